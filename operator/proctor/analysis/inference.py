"""Paired tests, intervals and power for comparing agents on the same tasks (pure).

The unit of inference is the task: an agent's items on one task (its variants and repeats)
are correlated, so every test and interval here works on one number per task (the
task's mean score over the cells both agents have), never on items.

* Test: the sign-flip (paired permutation) test on the per-task differences d_t. Under
  "no difference" each d_t is as likely to be +x as -x, so flipping signs gives the
  statistic's null distribution. Exact (all 2^m flips) for m <= EXACT_UP_TO non-zero
  differences, else Monte Carlo with the add-one rule p = (1 + b) / (1 + R), which keeps
  the test valid (never anti-conservative) at any R. No p-value comes from a bootstrap.
* Interval: a percentile bootstrap of the mean difference, resampling tasks (clusters).
  It is too narrow with few tasks: see MIN_TASKS.
* Power: the normal approximation on the per-task differences' spread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

ALPHA = 0.05
POWER = 0.8
EXACT_UP_TO = 16
"""Non-zero differences up to which the sign-flip test enumerates every flip (65,536)."""
FLIPS = 20_000
"""Monte Carlo sign flips above EXACT_UP_TO."""
MIN_TASKS = 30
"""Fewer tasks than this in a figure's denominator and the report flags its interval as too
narrow to trust. Why 30: a 95% percentile bootstrap interval of a mean over n tasks is about
mean +- 1.96 * sd / sqrt(n) with the plug-in sd (divided by n, not n - 1) and a normal
quantile (not Student's t), so it covers less than 95%; measured for this module's figures
(tests/unit/analysis/test_inference.py, 1,000 simulated evaluations each) it covers about
83% at 5 tasks, 91% at 10, 92-93% at 20 and 94% from 30 on."""


def flip_statistics(diffs: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """|sum of signed differences| for each sign vector (rows of `signs`) and each set of
    differences (rows of `diffs`): shape (flips, sets). NaN differences count as 0."""
    return np.abs(signs @ np.nan_to_num(diffs).T)


def _all_signs(m: int) -> np.ndarray:
    bits = (np.arange(2 ** m)[:, None] >> np.arange(m)[None, :]) & 1
    return 1.0 - 2.0 * bits


@lru_cache(maxsize=2)
def _random_signs(seed: int, flips: int, tasks: int) -> np.ndarray:
    """Seeded sign vectors (flips x tasks), cached: they do not depend on the data, so every
    pair of agents on the same number of tasks shares one draw."""
    bits = np.random.default_rng(seed).integers(0, 2, size=(flips, tasks), dtype=np.int8)
    signs = 1.0 - 2.0 * bits
    signs.flags.writeable = False
    return signs


def sign_flip_pvalues(diffs: np.ndarray, seed: int, flips: int = FLIPS) -> np.ndarray:
    """Monte Carlo sign-flip p-values of many sets of per-task differences at once
    (`diffs` is sets x tasks; one shared draw of sign vectors, seeded)."""
    signs = _random_signs(seed, flips, diffs.shape[1])
    observed = np.abs(np.nansum(diffs, axis=1))
    beyond = np.zeros(len(diffs))
    for start in range(0, flips, 2000):  # chunks: flips x sets floats can be large
        stats = flip_statistics(diffs, signs[start:start + 2000])
        beyond += np.sum(stats >= observed[None, :] - 1e-9, axis=0)
    return (1 + beyond) / (1 + flips)


def sign_flip_pvalue(diffs: np.ndarray, seed: int, flips: int = FLIPS) -> tuple[float, str]:
    """Two-sided sign-flip p-value of the mean per-task difference, and how it was got
    ("exact" or "Monte Carlo, R flips")."""
    return sign_flip_batch([diffs], seed, flips)[0]


def sign_flip_batch(sets: list[np.ndarray], seed: int, flips: int = FLIPS
                    ) -> list[tuple[float, str]]:
    """`sign_flip_pvalue` of many sets of differences: the exact ones one by one, the Monte
    Carlo ones in one matrix product (zero-padded to one length: a zero's sign changes
    nothing, so padding leaves every p-value as it is)."""
    out: list[tuple[float, str]] = [(1.0, "exact")] * len(sets)
    monte = []
    for i, diffs in enumerate(sets):
        d = diffs[np.isfinite(diffs) & (diffs != 0)]
        if len(d) > EXACT_UP_TO:
            monte.append((i, d))
        elif len(d):
            stats = flip_statistics(d[None, :], _all_signs(len(d)))[:, 0]
            out[i] = (float(np.mean(stats >= abs(d.sum()) - 1e-9)), "exact")
    if monte:
        width = max(len(d) for _, d in monte)
        padded = np.zeros((len(monte), width))
        for row, (_, d) in enumerate(monte):
            padded[row, :len(d)] = d
        for (i, _), p in zip(monte, sign_flip_pvalues(padded, seed, flips), strict=True):
            out[i] = (float(p), f"Monte Carlo, {flips} flips")
    return out


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p-value: 2 x P(X <= min) for X ~ Binomial(b + c, 1/2)."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


@lru_cache(maxsize=4)
def resample_weights(seed: int, tasks: int, resamples: int) -> np.ndarray:
    """How often each task is drawn in each resample (resamples x tasks), seeded: tasks
    drawn with replacement, counted with one bincount (numpy's multinomial is far slower).
    Floats, so that `weights @ values` is one BLAS product; cached and read-only, since
    every agent on the same number of tasks resamples them the same way."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, tasks, size=(resamples, tasks))
    rows = np.arange(resamples)[:, None] * tasks
    weights = np.bincount((draws + rows).ravel(), minlength=resamples * tasks).reshape(
        resamples, tasks).astype(float)
    weights.flags.writeable = False
    return weights


def percentile_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    if not len(finite):
        return math.nan, math.nan
    lo, hi = np.percentile(finite, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(lo), float(hi)


def z(p: float) -> float:
    return NormalDist().inv_cdf(p)


def detectable_effect(sd: float, tasks: int, alpha: float = ALPHA, power: float = POWER
                      ) -> float:
    """The smallest true mean difference the two-sided test finds with `power`, for
    per-task differences of spread `sd` over `tasks` tasks (normal approximation)."""
    if tasks < 2 or not math.isfinite(sd):
        return math.nan
    return (z(1 - alpha / 2) + z(power)) * sd / math.sqrt(tasks)


def tasks_needed(effect: float, variance: float, alpha: float = ALPHA,
                 power: float = POWER) -> float:
    """Tasks for the test to find a true mean difference `effect` with `power`, when one
    task's difference has `variance` (normal approximation)."""
    if effect <= 0 or not math.isfinite(variance):
        return math.nan
    return math.ceil((z(1 - alpha / 2) + z(power)) ** 2 * variance / effect ** 2)


@dataclass(frozen=True)
class Components:
    """What one task's difference is made of, for planning (all variances, 0/1 scale)."""

    task: float
    """sigma2_delta: the spread of the true per-task difference between the two agents."""
    prompt: float
    """sigma2_prompt of A plus that of B (each agent's own, unclipped estimate, floored at
    0 here because a plan needs a variance)."""
    run: float
    """sigma2_run of A plus that of B."""

    def variance(self, variants: int, repeats: int) -> float:
        """Var(d_t) with `variants` prompts and `repeats` repeats per prompt."""
        return self.task + self.prompt / variants + self.run / (variants * repeats)


def components(observed_var: float, prompt: float, run: float, variants: int,
               repeats: int) -> Components:
    """Split the observed variance of the per-task differences: what the prompts and
    repeats explain at the design they were run with is taken out, the rest is the
    task part (floored at 0)."""
    prompt = max(0.0, prompt) if math.isfinite(prompt) else 0.0
    run = max(0.0, run) if math.isfinite(run) else 0.0
    task = observed_var - prompt / variants - run / (variants * repeats)
    return Components(max(0.0, task) if math.isfinite(task) else math.nan, prompt, run)
