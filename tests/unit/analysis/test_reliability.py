"""Every reliability formula against hand-computed cases, degenerate ones included."""

from __future__ import annotations

import math

import numpy as np
import pytest

from proctor.analysis.reliability import (
    agent_figures,
    pass_at_k,
    pass_hat_k,
    resource_consistency,
    scores_array,
)

N = math.nan


def arr(x) -> np.ndarray:
    return np.array(x, dtype=float)


def test_seed_formula_with_one_repeat():
    # task A: original 1, variants 0 and 1; task B: all 1.
    fig, per = agent_figures("a", arr([[[1], [0], [1]], [[1], [1], [1]]]), resamples=200)
    assert per["variance"] == pytest.approx([2 / 9, 0])
    assert per["mean_score"] == pytest.approx([2 / 3, 1])
    assert per["min_max_gap"] == pytest.approx([1, 0])
    assert fig.S_prompt == pytest.approx(8 / 9)
    assert fig.S_prompt_per_run == pytest.approx(8 / 9)  # K = 1: both readings are HAL's
    assert (fig.mean_variance, fig.std_variance) == pytest.approx((1 / 9, 1 / 9))
    assert (fig.mean_min_max_gap, fig.max_min_max_gap) == pytest.approx((0.5, 1))
    assert fig.num_tasks == 2
    assert (fig.accuracy_original, fig.accuracy_variants) == pytest.approx((1, 0.75))
    assert fig.R_prompt == fig.R_prompt_unclamped == pytest.approx(0.75)
    assert fig.accuracy_gap == pytest.approx(0.25)
    assert fig.resolved_rate_excl_errors == 1
    assert math.isnan(fig.C_out) and math.isnan(fig.sigma2_run) and not fig.pass_at_k


def test_three_repeats_components_consistency_and_pass_k():
    # original repeats 1, 1, 0; the variant 0, 0 and one error.
    fig, _ = agent_figures("a", arr([[[1, 1, 0], [0, 0, N]]]), errors=1, resamples=200)
    assert fig.S_prompt == pytest.approx(1 - 1 / 9)
    assert fig.S_prompt_per_run == pytest.approx(0.75)  # runs 0 and 1 only (2 has 1 score)
    assert fig.sigma2_run == pytest.approx(1 / 6)      # (1/3 + 0) / 2
    assert fig.sigma2_prompt == pytest.approx(2 / 9 - (1 / 6) / 2.5)
    assert fig.C_out == pytest.approx(1 / 9)            # (2 * 2/3 - 1)^2
    assert fig.pass_at_k == pytest.approx({1: 2 / 3, 2: 1, 3: 1})
    assert fig.pass_hat_k == pytest.approx({1: 2 / 3, 2: 1 / 3, 3: 0})
    assert fig.R_prompt == 0 and fig.accuracy_gap == pytest.approx(2 / 3)
    assert (fig.items, fig.error_items) == (6, 1)


def test_sigma2_prompt_is_not_clipped_per_task():
    # Both prompts 1,0: the variant means are equal (between 0), so the task's estimate is
    # 0 - sigma2_run / K = -0.25; clipping it at 0 would bias the mean over tasks upward.
    # The second task: prompts 1,1 and 0,0: between 0.5, sigma2_run 0.
    fig, per = agent_figures("a", arr([[[1, 0], [0, 1]], [[1, 1], [0, 0]]]), resamples=50)
    assert per["sigma2_prompt"].tolist() == pytest.approx([-0.25, 0.5])
    assert fig.sigma2_prompt == pytest.approx(0.125)
    assert fig.sigma2_run == pytest.approx(0.25)


def test_the_per_run_headline_does_not_move_with_repeats_and_the_k_mean_reading_does():
    # 400 tasks, 4 prompts; the truth per (task, prompt) fixed, repeats drawn from it.
    rng = np.random.default_rng(3)
    p = rng.uniform(0.1, 0.9, size=(400, 4, 1))
    readings = {}
    for k in (1, 3, 9):
        scores = (rng.random((400, 4, k)) < p).astype(float)
        fig, _ = agent_figures("a", scores, resamples=20)
        readings[k] = (fig.S_prompt_per_run, fig.S_prompt, fig.sigma2_prompt)
    per_run = [r[0] for r in readings.values()]
    assert max(per_run) - min(per_run) < 0.01
    assert readings[1][1] < readings[3][1] - 0.03 < readings[9][1] - 0.06  # rises with K
    assert readings[3][2] == pytest.approx(readings[9][2], abs=0.01)      # K-independent


def test_pass_k_leaves_out_tasks_with_fewer_repeats_than_k():
    fig, _ = agent_figures("a", arr([[[1, N, N]], [[1, 1, 0]]]), resamples=50)
    assert fig.tasks_left_out["pass@1"] == 0
    assert fig.tasks_left_out["pass@2"] == fig.tasks_left_out["pass@3"] == 1
    assert fig.pass_at_k[1] == pytest.approx((1 + 2 / 3) / 2)
    assert fig.pass_hat_k[3] == 0
    assert fig.tasks_left_out["C_out"] == 1


def test_pass_k_formulas():
    assert pass_at_k(5, 0, 3) == 0 and pass_at_k(5, 5, 1) == 1
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)
    assert pass_hat_k(4, 3, 2) == pytest.approx(3 / 6)
    assert pass_hat_k(4, 1, 2) == 0


def test_one_variant_leaves_every_task_out_of_sensitivity():
    fig, _ = agent_figures("a", arr([[[1]], [[0]]]), resamples=50)
    assert fig.num_tasks == 0 and fig.tasks_left_out["sensitivity"] == 2
    assert math.isnan(fig.S_prompt) and math.isnan(fig.R_prompt)
    assert fig.resolved_rate_excl_errors == 0.5


def test_equal_scores_are_perfectly_robust_and_zero_accuracy_gives_nan_r_prompt():
    fig, _ = agent_figures("a", arr([[[0], [0]], [[0], [0]]]), resamples=50)
    assert fig.S_prompt == 1 and fig.max_min_max_gap == 0
    assert math.isnan(fig.R_prompt) and math.isnan(fig.R_prompt_unclamped)
    assert any("original prompts is 0" in n for n in fig.notes)


def test_r_prompt_clamps_at_one_and_keeps_the_unclamped_value():
    fig, _ = agent_figures("a", arr([[[1], [1]], [[0], [1]]]), resamples=50)
    assert fig.R_prompt_unclamped == pytest.approx(2.0) and fig.R_prompt == 1.0


def test_no_tasks_and_every_item_in_error():
    empty, _, _ = scores_array([])
    fig, _ = agent_figures("a", empty, resamples=50)
    assert fig.tasks == 0 and math.isnan(fig.S_prompt) and math.isnan(fig.resolved_rate_excl_errors)
    assert all(math.isnan(lo) for lo, _ in fig.intervals.values())
    fig, _ = agent_figures("a", np.full((2, 2, 2), np.nan), errors=8, resamples=50)
    assert fig.num_tasks == 0 and fig.tasks_left_out["sensitivity"] == 2
    assert math.isnan(fig.S_prompt) and math.isnan(fig.C_out) and fig.error_items == 8
    assert math.isnan(fig.sigma2_run) and fig.pass_at_k == {}


def test_resource_consistency():
    assert resource_consistency(arr([[[1, 1, 1]]])) == 1
    assert resource_consistency(arr([[[1, 3]]])) == pytest.approx(math.exp(-math.sqrt(2) / 2))
    assert math.isnan(resource_consistency(arr([[[1, N]]])))
    assert math.isnan(resource_consistency(arr([[[0, 0]]])))


def test_intervals_are_seeded_and_bracket_the_estimate():
    rng = np.random.default_rng(1)
    scores = (rng.random((60, 4, 3)) < 0.6).astype(float)
    a, _ = agent_figures("a", scores, seed=7, resamples=500)
    b, _ = agent_figures("a", scores, seed=7, resamples=500)
    assert a.intervals == b.intervals
    for name in ("resolved_rate_excl_errors", "S_prompt", "R_prompt", "C_out", "accuracy_gap",
                 "sigma2_run", "sigma2_prompt"):
        lo, hi = a.intervals[name]
        point = getattr(a, "R_prompt_unclamped" if name == "R_prompt" else name)
        assert lo <= point <= hi and (lo < hi or name == "sigma2_prompt"), name


def test_pass_k_pass_hat_k_and_c_res_have_intervals_that_bracket_them():
    rng = np.random.default_rng(2)
    scores = (rng.random((80, 2, 4)) < 0.5).astype(float)
    latency = rng.uniform(5, 15, size=(80, 2, 4))
    fig, _ = agent_figures("a", scores, resources={"latency": latency}, resamples=400)
    for name, value in [*((f"pass@{k}", v) for k, v in fig.pass_at_k.items()),
                        *((f"pass^{k}", v) for k, v in fig.pass_hat_k.items()),
                        ("C_res_latency", fig.C_res["latency"])]:
        lo, hi = fig.intervals[name]
        assert lo < value < hi or (name == "pass@1" and lo <= value <= hi), name
        assert fig.denominators[name] == 80
    assert not any("too few" in n for n in fig.notes)


def test_figures_on_fewer_than_30_tasks_are_flagged():
    fig, _ = agent_figures("a", (np.random.default_rng(0).random((10, 3, 2)) < 0.5).astype(
        float), resamples=100)
    note = next(n for n in fig.notes if "too few tasks" in n)
    assert "S_prompt" in note and "resolved_rate_excl_errors" in note


def test_scores_array_puts_the_original_first():
    scores, tasks, variants = scores_array([("t", "terse", 0, 1.0), ("t", "original", 1, 0.0),
                                            ("u", "formal", 0, None)])
    assert tasks == ["t", "u"] and variants == ["original", "formal", "terse"]
    assert scores.shape == (2, 3, 2)
    assert scores[0, 2, 0] == 1 and scores[0, 0, 1] == 0 and np.isnan(scores[1]).all()
