"""The bootstrap intervals cover the truth 92-98% of the time, by a seeded simulation.

The model (stated here once): 200 tasks, V = 4 prompts (the original and 3 variants),
K = 3 repeats. Task t has a difficulty a_t ~ Normal(0.3, 1.5) on the logit scale; the
original prompt adds nothing, each variant adds d_tv ~ Normal(-0.3, 0.8); a repeat is
in error with chance 0.05, else resolved with chance sigmoid(a_t + d_tv). The truth of
each figure is its expectation under the model at the same V and K, computed from one
evaluation of 400,000 tasks (each figure is a ratio of per-task sums, so that is its
limit). 1,000 evaluations are drawn; each gets 95% percentile intervals from 1,000
bootstrap resamples.
"""

from __future__ import annotations

import numpy as np
import pytest

from proctor.analysis.reliability import (
    bootstrap_intervals,
    contributions,
    figures_from_sums,
    task_figures,
)

TASKS, PROMPTS, REPEATS, ERROR = 200, 4, 3, 0.05
RUNS, RESAMPLES = 1000, 1000
FIGURES = ("resolved_rate_excl_errors", "S_prompt", "R_prompt", "C_out")


def simulate(rng: np.random.Generator, tasks: int) -> np.ndarray:
    a = rng.normal(0.3, 1.5, size=(tasks, 1))
    d = np.concatenate([np.zeros((tasks, 1)), rng.normal(-0.3, 0.8, (tasks, PROMPTS - 1))],
                       axis=1)
    p = 1 / (1 + np.exp(-(a + d)))
    scores = (rng.random((tasks, PROMPTS, REPEATS)) < p[:, :, None]).astype(float)
    scores[rng.random(scores.shape) < ERROR] = np.nan
    return scores


@pytest.fixture(scope="module")
def coverage() -> dict[str, float]:
    rng = np.random.default_rng(20261124)
    big = contributions(task_figures(simulate(rng, 400_000))).sum(axis=0)
    truth = {k: float(v) for k, v in figures_from_sums(big).items()}
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
