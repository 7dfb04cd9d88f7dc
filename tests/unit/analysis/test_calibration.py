"""Calibration (ECE, Brier, AUROC) and abstention against hand-computed cases, the A2A
`confidence` key, and the figures' behaviour on simulated agents."""

from __future__ import annotations

import math

import numpy as np
import pytest

from proctor.a2a.extract import extract_confidence
from proctor.analysis.calibration import (
    Answers,
    auroc_of,
    bin_of,
    calibration,
)
from proctor.analysis.inference import resample_weights
from proctor.analysis.reliability import agent_figures
from proctor.formats.harness_logs import results_dir

N = math.nan


def answers(resolved, confidence, patchless=None) -> Answers:
    r = np.array(resolved, dtype=float)[:, :, None]
    c = np.array(confidence, dtype=float)[:, :, None]
    p = np.zeros_like(r) if patchless is None else np.array(patchless, dtype=float)[:, :, None]
    return Answers(resolved=r, confidence=c, patchless=np.where(np.isnan(r), N, p))


def test_hand_computed_ece_brier_and_auroc():
    # two tasks, two items each: confidences 0.9, 0.8 (resolved, unresolved), 0.2, 0.1
    # (unresolved, resolved). Bins: 0.9 -> [0.9, 1], 0.8 -> [0.8, 0.9), 0.2 and 0.1 alone.
    a = answers([[1, 0], [0, 1]], [[0.9, 0.8], [0.2, 0.1]])
    cal = calibration(a, resample_weights(1, 2, 200), seed=1)
    assert cal is not None
    assert cal.ece == pytest.approx((0.1 + 0.8 + 0.2 + 0.9) / 4)
    assert cal.brier == pytest.approx((0.01 + 0.64 + 0.04 + 0.81) / 4)
    # resolved 0.9, 0.1 against unresolved 0.8, 0.2: 0.9 beats both, 0.1 neither
    assert cal.auroc == pytest.approx(0.5)
    assert (cal.items, cal.tasks, cal.resolved) == (4, 2, 2)
    assert any("under 100" in n for n in cal.notes)


def test_bins_are_hals_edges_the_last_one_closed():
    assert list(bin_of(np.array([0.0, 0.05, 0.1, 0.3, 0.95, 1.0]))) == [0, 0, 1, 2, 9, 9]


def test_auroc_ties_count_half_and_one_class_is_undefined():
    assert auroc_of(np.array([0.5, 0.5]), np.array([1.0, 0.0])) == 0.5
    assert auroc_of(np.array([0.9, 0.1]), np.array([1.0, 0.0])) == 1.0
    assert math.isnan(auroc_of(np.array([0.9, 0.1]), np.array([1.0, 1.0])))


def test_no_confidence_gives_no_calibration_but_abstention_still_counts():
    a = answers([[1, 0], [0, N]], [[N, N], [N, N]], patchless=[[0, 1], [0, 0]])
    fig, _ = agent_figures("a", a.resolved, answers=a, resamples=100)
    assert fig.calibration is None
    assert fig.abstention_rate == pytest.approx(1 / 3)   # one of three scored items
    assert fig.selective_accuracy == pytest.approx(1 / 2)


def simulated(tasks: int, items: int, distort, seed: int = 3) -> Answers:
    rng = np.random.default_rng(seed)
    conf = rng.random((tasks, items, 1))
    resolved = (rng.random(conf.shape) < distort(conf)).astype(float)
    return Answers(resolved=resolved, confidence=conf, patchless=1 - resolved)


def test_a_calibrated_agent_sits_at_its_noise_floor_an_overconfident_one_does_not():
    weights = resample_weights(5, 200, 1000)
    honest = calibration(simulated(200, 5, lambda c: c), weights, seed=5)
    proud = calibration(simulated(200, 5, lambda c: c ** 3), weights, seed=5)
    assert honest is not None and proud is not None
    print(f"ECE calibrated {honest.ece:.3f} (noise floor {honest.ece_if_calibrated:.3f}); "
          f"overconfident {proud.ece:.3f}")
    assert honest.ece < 2.5 * honest.ece_if_calibrated and honest.ece < 0.06
    assert proud.ece > 0.15 and proud.intervals["ece"][0] > honest.intervals["ece"][1]
    assert 0.75 < honest.auroc < 0.9 and not honest.notes
    for name in ("ece", "brier", "auroc"):
        lo, hi = honest.intervals[name]
        assert lo <= getattr(honest, name) <= hi


def test_the_agents_confidence_is_read_from_its_metadata_key():
    assert extract_confidence({"confidence": 0.7}) == 0.7
    assert extract_confidence(None, {"other": 1}, {"confidence": 1}) == 1.0
    assert extract_confidence({"confidence": 0.2}, {"confidence": 0.9}) == 0.2  # latest first
    for bad in (70, -0.1, "0.7", True, math.nan):
        assert extract_confidence({"confidence": bad}) is None


def test_a_reported_confidence_reaches_the_result_and_proctor_show(tmp_path, capsys):
    """The sensitive agent reports its chance (0.75 in the original words) over real A2A."""
    from proctor.agents.server import start_reference_agent
    from proctor.cli.main import main
    from proctor.results import ResultsFolder

    item = "proctor-demo__textkit-1"
    out = tmp_path / "o"
    with start_reference_agent("sensitive") as agent:
        assert main(["eval", "--agent", agent.url, "-d", "proctor-demo", "-i", item, "-q",
                     "--sandbox", "process", "--output-dir", str(out)]) == 0
    out = results_dir(out, "run")  # proctor eval's results folder of the run
    [result] = ResultsFolder(out).load()
    assert result.confidence == 0.75
    capsys.readouterr()
    assert main(["show", str(out), item]) == 0
    assert "confidence: 0.75 (the agent's, that this resolves)" in capsys.readouterr().out
