"""The analysis' CSV files, at full precision (the seed's column names first)."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from proctor.analysis.load import AgentRun
from proctor.analysis.reliability import AgentFigures

SEED_AGENT_COLUMNS = ["agent", "S_prompt", "mean_variance", "std_variance",
                      "mean_min_max_gap", "max_min_max_gap", "num_tasks"]
OUR_AGENT_COLUMNS = ["S_prompt_per_run", "resolved_rate_excl_errors", "accuracy_original",
                     "accuracy_variants", "R_prompt", "R_prompt_unclamped", "accuracy_gap",
                     "sigma2_prompt", "sigma2_run", "C_out", "tasks", "variants", "repeats",
                     "items", "error_items", "abstention_rate", "selective_accuracy",
                     "confidence_items", "mean_confidence", "ece", "ece_if_calibrated", "brier",
                     "auroc"]
CALIBRATION = ("confidence_items", "mean_confidence", "ece", "ece_if_calibrated", "brier",
               "auroc")
"""The calibration figures' columns, read from AgentFigures.calibration (NaN without)."""
SEED_TASK_COLUMNS = ["task_id", "variance", "mean_score", "min_max_gap", "S_task"]
OUR_TASK_COLUMNS = ["agent", "num_variants", "original_score", "sigma2_run", "sigma2_prompt"]


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


def figure(f: AgentFigures, name: str) -> float:
    """A figure by its column name: calibration ones from f.calibration (NaN without)."""
    if name in CALIBRATION:
        cal = f.calibration
        if cal is None:
            return 0 if name == "confidence_items" else math.nan
        return cal.items if name == "confidence_items" else getattr(cal, name)
    return getattr(f, name)


def agent_rows(figs: Sequence[AgentFigures]) -> list[list[object]]:
    return [[figure(f, c) for c in SEED_AGENT_COLUMNS + OUR_AGENT_COLUMNS] for f in figs]


def task_rows(agent: str, run: AgentRun, per: dict[str, np.ndarray]) -> list[list[object]]:
    """One row per task with at least 2 scored variants (the others are left out)."""
    rows = []
    for i, task in enumerate(run.tasks):
        if not per["sens_valid"][i]:
            continue
        variance = float(per["variance"][i])
        rows.append([task, variance, float(per["mean_score"][i]), float(per["min_max_gap"][i]),
                     1 - variance, agent, int(per["scored_variants"][i]),
                     float(per["original_score"][i]), float(per["sigma2_run"][i]),
                     float(per["sigma2_prompt"][i])])
    return rows


def _interval(f: AgentFigures, name: str) -> tuple[float, float]:
    if name.startswith("R_prompt"):
        lo, hi = f.intervals.get("R_prompt", (math.nan, math.nan))
        return (lo, hi) if name == "R_prompt_unclamped" else (min(1.0, lo), min(1.0, hi))
    return f.intervals.get(name, (math.nan, math.nan))


def metric_rows(f: AgentFigures) -> list[list[object]]:
    """reliability_metrics.csv: agent, metric, value, ci_low, ci_high, tasks (long form;
    tasks: how many the interval rests on)."""
    def row(name: str, value: float) -> list[object]:
        return [f.agent, name, value, *_interval(f, name),
                f.denominators.get(name.replace("_unclamped", ""), "")]

    rows = [row(name, getattr(f, name))
            for name in ("resolved_rate_excl_errors", "accuracy_original", "accuracy_variants",
                         "S_prompt_per_run", "S_prompt", "R_prompt", "R_prompt_unclamped",
                         "accuracy_gap", "C_out", "sigma2_prompt", "sigma2_run")]
    rows += [row(f"pass@{k}", v) for k, v in f.pass_at_k.items()]
    rows += [row(f"pass^{k}", v) for k, v in f.pass_hat_k.items()]
    rows += [row(f"C_res_{k}", v) for k, v in f.C_res.items()]
    rows += [row(name, getattr(f, name)) for name in ("abstention_rate", "selective_accuracy")]
    if f.calibration:
        rows += [row(name, figure(f, name)) for name in CALIBRATION]
    rows += [[f.agent, f"tasks_left_out_{k}", v, math.nan, math.nan, ""]
             for k, v in f.tasks_left_out.items()]
    return rows


def variant_rows(run: AgentRun) -> list[list[object]]:
    """variants.csv: per task and variant, the text's hash, its similarity to the
    original and its outcomes."""
    rows = []
    for i, task in enumerate(run.tasks):
        for j, variant in enumerate(run.variants):
            outcomes = [run.outcomes.get((task, variant, k)) for k in range(run.scores.shape[2])]
            ran = [o for o in outcomes if o]
            if not ran:
                continue
            scores = run.scores[i, j]
            scored = scores[~np.isnan(scores)]
            rows.append([run.agent, task, variant, run.hashes.get((task, variant), ""),
                         1.0 if variant == "original" else
                         run.similarity.get((task, variant), math.nan),
                         len(ran), ran.count("error"), ran.count("resolved"),
                         float(scored.mean()) if len(scored) else math.nan, "|".join(ran)])
    return rows


def calibration_rows(figs: Sequence[AgentFigures]) -> list[list[object]]:
    """calibration_bins.csv: the reliability diagram's points, per agent and bin."""
    return [[f.agent, *b] for f in figs if f.calibration for b in f.calibration.bins]


CALIBRATION_COLUMNS = ["agent", "bin_low", "bin_high", "items", "mean_confidence",
                       "resolved_share"]
VARIANT_COLUMNS = ["agent", "task_id", "variant_id", "sha256", "similarity", "repeats", "errors",
                   "resolved", "mean_score", "outcomes"]
METRIC_COLUMNS = ["agent", "metric", "value", "ci_low", "ci_high", "tasks"]
