"""The paired test is valid on clustered data, has power, and the intervals' warning is true.

The model (stated here once): T tasks, V = 4 prompts, K = 3 repeats. Task t has a difficulty
a_t ~ Normal(0.3, 1.5) on the logit scale, shared by both agents; each agent has its own
task effect u_t ~ Normal(0, 0.5) and its own prompt effects d_tv ~ Normal(0, 0.8), so items
are correlated within a task (the clusters) and within a prompt. A repeat resolves with
chance sigmoid(a_t + u_t + d_tv + shift). With no true difference both agents draw from the
same distribution; with one, agent B's shift is set so that its expected resolved rate is
10 points higher. Each test sees the per-task means over the 12 cells.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from proctor.analysis import inference as inf

PROMPTS, REPEATS = 4, 3
SIMULATIONS, SEED = 5000, 20261124


def task_means(rng: np.random.Generator, a: np.ndarray, shift: float, prompts: int = PROMPTS,
               repeats: int = REPEATS) -> np.ndarray:
    """sims x tasks: one agent's per-task mean score over prompts x repeats items."""
    sims, tasks = a.shape
    logit = (a + rng.normal(0, 0.5, (sims, tasks)))[..., None] + \
        rng.normal(0, 0.8, (sims, tasks, prompts)) + shift
    p = 1 / (1 + np.exp(-logit))
    return rng.binomial(repeats, p).sum(axis=2) / (prompts * repeats)


def expected_rate(shift: float, rng: np.random.Generator) -> float:
    a = rng.normal(0.3, 1.5, 400_000) + rng.normal(0, 0.5, 400_000)
    return float(np.mean(1 / (1 + np.exp(-(a + rng.normal(0, 0.8, 400_000) + shift)))))


def ten_point_shift() -> float:
    """B's logit shift for a 10-point higher expected rate (bisection, common numbers)."""
    base = expected_rate(0.0, np.random.default_rng(1))
    lo, hi = 0.0, 2.0
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_rate(mid, np.random.default_rng(1)) - base < 0.10 \
            else (lo, mid)
    return (lo + hi) / 2


def rejections(tasks: int, shift: float, prompts: int = PROMPTS, repeats: int = REPEATS
               ) -> float:
    rng = np.random.default_rng(SEED)
    a = rng.normal(0.3, 1.5, (SIMULATIONS, tasks))
    d = task_means(rng, a, shift, prompts, repeats) - task_means(rng, a, 0.0, prompts, repeats)
    p = inf.sign_flip_pvalues(d, seed=SEED, flips=2000)
    return float(np.mean(p <= inf.ALPHA))


@pytest.mark.parametrize(("prompts", "repeats"), [(PROMPTS, REPEATS), (1, 1)])
def test_false_positive_rate_of_the_sign_flip_test_on_clustered_data(prompts, repeats):
    rate = rejections(200, 0.0, prompts, repeats)
    print(f"\nfalse-positive rate at alpha 0.05, {SIMULATIONS} clustered no-difference pairs, "
          f"200 tasks x {prompts} prompts x {repeats} repeats: {rate:.4f}")
    assert rate <= 0.06


def test_false_positive_rate_holds_with_few_tasks_where_the_bootstrap_p_did_not():
    rng = np.random.default_rng(SEED)
    a = rng.normal(0.3, 1.5, (2000, 10))
    d = task_means(rng, a, 0.0) - task_means(rng, a, 0.0)
    flip = np.array([inf.sign_flip_pvalue(row, SEED)[0] for row in d])
    # The old p-value: 2 min(P(boot <= 0), P(boot >= 0)) of a percentile bootstrap.
    w = inf.resample_weights(SEED, 10, 1000)
    boot = (w @ d.T) / 10
    old = np.minimum(1, 2 * np.minimum(np.mean(boot <= 0, axis=0), np.mean(boot >= 0, axis=0)))
    print(f"\n10 tasks, 2000 no-difference pairs: sign-flip false-positive rate "
          f"{np.mean(flip <= 0.05):.4f}, percentile-bootstrap p {np.mean(old <= 0.05):.4f}")
    assert np.mean(flip <= 0.05) <= 0.06 < np.mean(old <= 0.05)


@pytest.mark.parametrize(("prompts", "repeats", "least"), [(PROMPTS, REPEATS, 0.95), (1, 1, 0.55)])
def test_power_at_a_true_ten_point_difference_on_200_tasks(prompts, repeats, least):
    power = rejections(200, ten_point_shift(), prompts, repeats)
    print(f"\npower at a true 10-point difference, 200 tasks x {prompts} prompts x {repeats} "
          f"repeats, {SIMULATIONS} pairs: {power:.4f}")
    assert power >= least


def test_exact_sign_flip_by_hand():
    # Four positive differences: only all-plus and all-minus reach |sum| = 4 of 16 flips.
    assert inf.sign_flip_pvalue(np.array([1.0, 1, 1, 1]), 0) == (pytest.approx(2 / 16), "exact")
    # Zeros and NaNs carry no sign: the same test.
    assert inf.sign_flip_pvalue(np.array([1.0, 0, 1, 1, np.nan, 1]), 0)[0] == \
        pytest.approx(2 / 16)
    assert inf.sign_flip_pvalue(np.array([0.0, 0.0]), 0) == (1.0, "exact")
    # Oracle vs sensitive in the issue: 3 of 10 tasks differ, all one way: 2/8 = 0.25;
    # with 4 differing, 2/16 = 0.125, never the 0.016 a percentile bootstrap gave.
    assert inf.sign_flip_pvalue(np.array([0.25] * 4 + [0] * 6), 0)[0] == pytest.approx(0.125)


def test_monte_carlo_sign_flip_agrees_with_exact():
    d = np.random.default_rng(4).normal(0.1, 0.3, 16)
    exact, how = inf.sign_flip_pvalue(d, 0)
    mc = inf.sign_flip_pvalues(d[None, :], seed=1, flips=50_000)[0]
    assert how == "exact" and mc == pytest.approx(exact, abs=0.01)
    assert inf.sign_flip_pvalue(np.append(d, 0.2), 0)[1].startswith("Monte Carlo")


def test_mcnemar_exact():
    assert inf.mcnemar_exact(0, 0) == 1
    assert inf.mcnemar_exact(0, 5) == pytest.approx(2 / 32)
    assert inf.mcnemar_exact(3, 3) == 1
    assert inf.mcnemar_exact(1, 9) == pytest.approx(2 * 11 / 1024)


def test_detectable_effect_and_tasks_needed_agree():
    sd = 0.3
    mde = inf.detectable_effect(sd, 200)
    assert mde == pytest.approx(2.8016 * 0.3 / math.sqrt(200), rel=1e-3)
    assert inf.tasks_needed(mde, sd ** 2) in (200, 201)
    assert math.isnan(inf.detectable_effect(sd, 1)) and math.isnan(inf.tasks_needed(0, 1))


def test_components_take_out_what_prompts_and_repeats_explain():
    c = inf.components(0.1, prompt=0.08, run=0.3, variants=4, repeats=3)
    assert c.task == pytest.approx(0.1 - 0.02 - 0.025)
    assert c.variance(4, 3) == pytest.approx(0.1)
    assert c.variance(1, 1) > c.variance(4, 3) > c.variance(4, 10)
    assert inf.components(0.01, 0.2, 0.2, 1, 1).task == 0  # floored


def coverage(tasks: int, runs: int = 1000) -> float:
    rng = np.random.default_rng(SEED)
    truth = expected_rate(0.0, np.random.default_rng(1))
    hits = 0
    for run in range(runs):
        x = task_means(rng, rng.normal(0.3, 1.5, (1, tasks)), 0.0)[0]
        lo, hi = inf.percentile_interval(inf.resample_weights(run, tasks, 1000) @ x / tasks)
        hits += lo <= truth <= hi
    return hits / runs


def test_bootstrap_coverage_falls_with_few_tasks_as_min_tasks_says():
    few, enough = coverage(10), coverage(inf.MIN_TASKS)
    print(f"\n95% percentile bootstrap coverage: 10 tasks {few:.3f}, {inf.MIN_TASKS} tasks "
          f"{enough:.3f}")
    assert few < 0.93 <= enough
