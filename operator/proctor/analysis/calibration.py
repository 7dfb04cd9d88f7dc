"""Predictability: how well an agent's own confidence tells its outcome, and abstention (pure).

Input per item, as arrays indexed [task, variant, repeat] (`Answers`): whether it resolved
(1/0; NaN for an item in error or not run), the confidence the agent reported (0 to 1, the
A2A metadata key `confidence`; NaN where it gave none) and whether it answered without a
patch. Every scored item that carries a confidence counts, over all variants and repeats,
as HAL pools every run (reliability_eval/metrics/predictability.py):

* ECE: 10 equal-width bins on [0, 1] (the last one closed); the sum over bins of (items in
  the bin / items) x |resolved share - mean confidence|. 0 is perfect.
* Brier score: the mean of (confidence - resolved)^2. 0 is perfect; always answering the
  base rate p scores p(1 - p).
* AUROC: the chance that a resolved item's confidence is above an unresolved one's (ties
  count half); 0.5 is no better than chance. Undefined unless both kinds are present.
* Abstention (HAL's abstention metrics, with "no patch" as the abstention): the share of
  scored items answered without a patch, and the selective accuracy, the resolved share of
  the others. Computed for every agent, confidence or not.

Intervals: 95% percentile bootstrap resampling tasks (a task's items travel together), on
the same resamples as every other figure. Two cautions the report repeats:

* ECE is biased upward on few items (bins hold few items, and |noise| is never negative):
  `ece_if_calibrated` is the ECE a perfectly calibrated agent with these very confidences
  would show from sampling noise alone (the mean over seeded simulations of outcomes drawn
  as Bernoulli(confidence)). Read ECE against it, not against 0; its interval is an
  interval of a biased estimate.
* Below MIN_ITEMS items with a confidence, or MIN_CLASS of either outcome (AUROC), the
  figures are flagged.

The AUROC interval counts confidences on a grid of 0.001 (the point estimate is exact), so
that a resample is one matrix product.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from proctor.analysis.inference import percentile_interval

BINS = 10
MIN_ITEMS = 100
"""Fewer scored items with a confidence than this and the calibration figures are flagged:
with 10 bins, a perfectly calibrated agent's ECE from noise alone is about 0.1 at 100
items (see `ece_if_calibrated`), as large as the miscalibration one wants to see."""
MIN_CLASS = 10
"""Fewer resolved (or unresolved) items than this and AUROC is flagged."""
SIMULATIONS = 200
GRID = 1000


@dataclass(frozen=True)
class Answers:
    """One agent's items as arrays [task, variant, repeat]."""

    resolved: np.ndarray
    """1 when the item resolved, 0 when not; NaN for an error or an item not run."""
    confidence: np.ndarray
    """The agent's reported confidence, 0 to 1; NaN where it reported none."""
    patchless: np.ndarray
    """1 when the answer had no patch, 0 when it had one; NaN where `resolved` is."""


@dataclass
class Calibration:
    """The calibration figures of one agent (items: scored items with a confidence)."""

    items: int
    tasks: int
    resolved: int
    mean_confidence: float
    ece: float
    ece_if_calibrated: float
    brier: float
    auroc: float
    bins: list[tuple[float, float, int, float, float]] = field(default_factory=list)
    """Per non-empty bin: low edge, high edge, items, mean confidence, resolved share."""
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


EDGES = np.linspace(0, 1, BINS + 1)
"""The bins' edges as HAL computes them (np.linspace: 0.3 falls below its edge
0.30000000000000004, so in the bin below, in HAL's figures and in these)."""


def bin_of(confidence: np.ndarray) -> np.ndarray:
    """Each confidence's bin, 0..BINS-1: [EDGES[i], EDGES[i+1]), the last one closed."""
    return np.clip(np.searchsorted(EDGES, confidence, side="right") - 1, 0, BINS - 1)


def ece_from_sums(sums: np.ndarray) -> np.ndarray:
    """ECE from per-bin sums laid out as [items..., confidence sums..., resolved sums...]
    (last axis, 3 x BINS); any leading shape. NaN where there are no items."""
    n, c, y = sums[..., :BINS], sums[..., BINS:2 * BINS], sums[..., 2 * BINS:]
    total = n.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, np.abs(y - c).sum(axis=-1) / np.where(total > 0, total, 1),
                        np.nan)


def auroc_of(confidence: np.ndarray, resolved: np.ndarray) -> float:
    """P(confidence of a resolved item > that of an unresolved one), ties half; exact."""
    pos, neg = confidence[resolved == 1], np.sort(confidence[resolved == 0])
    if not len(pos) or not len(neg):
        return math.nan
    below = np.searchsorted(neg, pos, side="left")
    ties = np.searchsorted(neg, pos, side="right") - below
    return float((below.sum() + 0.5 * ties.sum()) / (len(pos) * len(neg)))


def _per_task(task: np.ndarray, columns: np.ndarray, tasks: int) -> np.ndarray:
    """Sum item columns (items x c) per task: (tasks x c)."""
    out = np.zeros((tasks, columns.shape[1]))
    np.add.at(out, task, columns)
    return out


def _auroc_boot(task: np.ndarray, conf: np.ndarray, y: np.ndarray, weights: np.ndarray
                ) -> np.ndarray:
    """AUROC per resample, from per-task counts of each grid level (occupied levels only)."""
    levels, level = np.unique(np.round(conf * GRID).astype(int), return_inverse=True)
    tasks = weights.shape[1]
    pos = np.zeros((tasks, len(levels)))
    neg = np.zeros((tasks, len(levels)))
    np.add.at(pos, (task[y == 1], level[y == 1]), 1)
    np.add.at(neg, (task[y == 0], level[y == 0]), 1)
    out = []
    for start in range(0, len(weights), 500):
        w = weights[start:start + 500]
        p, n = w @ pos, w @ neg
        below = np.cumsum(n, axis=1) - n
        num = np.sum(p * (below + 0.5 * n), axis=1)
        den = p.sum(axis=1) * n.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append(np.where(den > 0, num / np.where(den > 0, den, 1), np.nan))
    return np.concatenate(out)


def _ece_if_calibrated(conf: np.ndarray, seed: int) -> float:
    """Mean ECE of outcomes drawn as Bernoulli(confidence), seeded."""
    rng = np.random.default_rng(seed)
    draws = (rng.random((SIMULATIONS, len(conf))) < conf).astype(float)
    b = bin_of(conf)
    onehot = np.zeros((len(conf), BINS))
    onehot[np.arange(len(conf)), b] = 1
    n, c = onehot.sum(axis=0), conf @ onehot
    y = draws @ onehot
    return float(np.mean(np.abs(y - c).sum(axis=1) / n.sum()))


def calibration(answers: Answers, weights: np.ndarray, seed: int) -> Calibration | None:
    """The calibration figures, with intervals over the resampled tasks; None when the
    agent reported no confidence on any scored item."""
    has = np.isfinite(answers.confidence) & np.isfinite(answers.resolved)
    if not has.any():
        return None
    task = np.nonzero(has)[0]
    conf, y = answers.confidence[has], answers.resolved[has]
    b = bin_of(conf)
    cols = np.zeros((len(conf), 3 * BINS + 2))
    cols[np.arange(len(conf)), b] = 1
    cols[np.arange(len(conf)), BINS + b] = conf
    cols[np.arange(len(conf)), 2 * BINS + b] = y
    cols[:, -2], cols[:, -1] = (conf - y) ** 2, 1
    per_task = _per_task(task, cols, weights.shape[1])
    sums = per_task.sum(axis=0)
    boot = weights @ per_task
    with np.errstate(invalid="ignore", divide="ignore"):
        brier_boot = np.where(boot[:, -1] > 0, boot[:, -2] / np.where(boot[:, -1] > 0,
                                                                      boot[:, -1], 1), np.nan)
    resolved = int(y.sum())
    cal = Calibration(
        items=len(conf), tasks=int(np.unique(task).size), resolved=resolved,
        mean_confidence=float(conf.mean()), ece=float(ece_from_sums(sums[:3 * BINS])),
        ece_if_calibrated=_ece_if_calibrated(conf, seed), brier=float(np.mean((conf - y) ** 2)),
        auroc=auroc_of(conf, y),
        bins=[(round(float(EDGES[i]), 9), round(float(EDGES[i + 1]), 9), int(sums[i]),
               float(sums[BINS + i] / sums[i]), float(sums[2 * BINS + i] / sums[i]))
              for i in range(BINS) if sums[i]],
        intervals={"ece": percentile_interval(ece_from_sums(boot[:, :3 * BINS])),
                   "brier": percentile_interval(brier_boot)})
    if math.isfinite(cal.auroc):
        cal.intervals["auroc"] = percentile_interval(_auroc_boot(task, conf, y, weights))
    _caveats(cal)
    return cal


def _caveats(cal: Calibration) -> None:
    if cal.items < MIN_ITEMS:
        cal.notes.append(f"calibration rests on {cal.items} items with a confidence (under "
                         f"{MIN_ITEMS}): ECE is biased upward, a perfectly calibrated agent "
                         f"would show {cal.ece_if_calibrated:.3f} here")
    unresolved = cal.items - cal.resolved
    if not math.isfinite(cal.auroc):
        cal.notes.append("AUROC undefined: every item with a confidence "
                         + ("resolved" if cal.resolved else "failed"))
    elif min(cal.resolved, unresolved) < MIN_CLASS:
        cal.notes.append(f"AUROC rests on {cal.resolved} resolved and {unresolved} unresolved "
                         f"items (under {MIN_CLASS} of one kind): read it as rough")


def abstention_parts(answers: Answers) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per task, (numerator, denominator) of the abstention rate (items without a patch
    over scored items) and of the selective accuracy (resolved over items with a patch)."""
    scored = np.isfinite(answers.resolved)
    none = scored & (answers.patchless == 1)
    kept = scored & (answers.patchless == 0)
    per = (1, 2)
    return {"abstention_rate": (none.sum(axis=per).astype(float),
                                scored.sum(axis=per).astype(float)),
            "selective_accuracy": ((kept & (answers.resolved == 1)).sum(axis=per).astype(float),
                                   kept.sum(axis=per).astype(float))}
