"""The bootstrap intervals cover the truth 92-98% of the time, by a seeded simulation.

The model (stated here once): 200 tasks, V = 4 prompts (the original and 3 variants),
K = 3 repeats. Task t has a difficulty a_t ~ Normal(0.3, 1.5) on the logit scale; the
original prompt adds nothing, each variant adds d_tv ~ Normal(-0.3, 0.8); a repeat is
in error with chance 0.05, else resolved with chance sigmoid(a_t + d_tv). The truth of
each figure is its limit under the model at the same V and K, computed from the model's
parameters alone (each figure is a ratio of per-task sums, so its limit is the ratio of
the per-task expectations: Gauss-Hermite quadrature over a_t and d_tv, exact sums over
each repeat's error and outcome), never from the code under test. 1,000 evaluations are
drawn; each gets 95% percentile intervals from 1,000 bootstrap resamples."""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest

from proctor.analysis.reliability import bootstrap_intervals, contributions, task_figures

TASKS, PROMPTS, REPEATS, ERROR = 200, 4, 3, 0.05
DIFFICULTY, VARIANT_SHIFT = (0.3, 1.5), (-0.3, 0.8)  # (mean, standard deviation)
RUNS, RESAMPLES = 1000, 1000
FIGURES = ("resolved_rate_excl_errors", "S_prompt", "R_prompt", "C_out")


def simulate(rng: np.random.Generator, tasks: int) -> np.ndarray:
    a = rng.normal(*DIFFICULTY, size=(tasks, 1))
    d = np.concatenate([np.zeros((tasks, 1)), rng.normal(*VARIANT_SHIFT, (tasks, PROMPTS - 1))],
                       axis=1)
    p = 1 / (1 + np.exp(-(a + d)))
    scores = (rng.random((tasks, PROMPTS, REPEATS)) < p[:, :, None]).astype(float)
    scores[rng.random(scores.shape) < ERROR] = np.nan
    return scores


# A prompt's mean over its scored repeats takes one of these values; None: no repeat scored.
MEANS = sorted({s / n for n in range(1, REPEATS + 1) for s in range(n + 1)})
STATES = [*MEANS, None]


def normal_nodes(mean: float, sd: float, n: int = 80) -> tuple[np.ndarray, np.ndarray]:
    """Points and weights that integrate against Normal(mean, sd)."""
    x, w = np.polynomial.hermite_e.hermegauss(n)
    return mean + sd * x, w / w.sum()


def outcomes(p: np.ndarray) -> list[tuple[int, int, np.ndarray]]:
    """(scored repeats n, resolved s, chance) of one prompt with resolve chance p."""
    return [(n, s, comb(REPEATS, n) * (1 - ERROR) ** n * ERROR ** (REPEATS - n)
             * comb(n, s) * p ** s * (1 - p) ** (n - s))
            for n in range(REPEATS + 1) for s in range(n + 1)]


def state_chances(p: np.ndarray) -> np.ndarray:
    """Chance of each of STATES for one prompt: shape p.shape + (len(STATES),)."""
    out = np.zeros((*p.shape, len(STATES)))
    for n, s, chance in outcomes(p):
        out[..., STATES.index(s / n if n else None)] += chance
    return out


def truth_from_the_model() -> dict[str, float]:
    a, wa = normal_nodes(*DIFFICULTY)
    d, wd = normal_nodes(*VARIANT_SHIFT)
    p_orig = 1 / (1 + np.exp(-a))                             # (A,)
    p_var = 1 / (1 + np.exp(-(a[:, None] + d[None, :])))      # (A, D)
    acc_orig, acc_var = wa @ p_orig, wa @ p_var @ wd
    cout_num = cout_den = 0.0
    for n, s, chance in outcomes(p_orig):
        if n >= 2:  # C_out needs two scored repeats of the original
            cout_num += wa @ (chance * (2 * s / n - 1) ** 2)
            cout_den += wa @ chance
    # S_prompt: the population variance of the scored prompts' means, over every joint
    # state of the V prompts (independent given a_t), where two or more are scored.
    orig = state_chances(p_orig)                                            # (A, states)
    variant = np.einsum("ads,d->as", state_chances(p_var), wd)
    var_num = var_den = 0.0
    for joint in itertools.product(range(len(STATES)), repeat=PROMPTS):
        means = [STATES[i] for i in joint if STATES[i] is not None]
        if len(means) < 2:
            continue
        chance = wa @ (orig[:, joint[0]] * np.prod([variant[:, i] for i in joint[1:]], axis=0))
        var_num += chance * float(np.var(means))
        var_den += chance
    # The original prompt scores on some repeat with a chance that does not depend on a_t,
    # so its mean over tasks with a score is the mean resolve chance.
    return {"resolved_rate_excl_errors": float(acc_orig), "S_prompt": float(1 - var_num / var_den),
            "R_prompt": float(acc_var / acc_orig), "C_out": float(cout_num / cout_den)}


@pytest.fixture(scope="module")
def coverage() -> dict[str, float]:
    rng = np.random.default_rng(20261124)
    truth = truth_from_the_model()
    hits = dict.fromkeys(FIGURES, 0)
    for run in range(RUNS):
        contrib = contributions(task_figures(simulate(rng, TASKS)))
        intervals = bootstrap_intervals(contrib, seed=run, resamples=RESAMPLES)
        for name in FIGURES:
            lo, hi = intervals[name]
            hits[name] += lo <= truth[name] <= hi
    return {name: hits[name] / RUNS for name in FIGURES}


@pytest.mark.parametrize("name", FIGURES)
def test_interval_covers_the_truth_92_to_98_percent(coverage, name):
    assert 0.92 <= coverage[name] <= 0.98, coverage
