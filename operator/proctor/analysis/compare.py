"""Two finished runs on the same tasks: the paired difference, its interval and test, the
smallest effect the comparison could find, and how many tasks a planned one needs (pure,
save `write_comparison`).

Cells are matched by task, variant name and repeat: a cell counts only where both runs
scored it (items in error are left out of both sides, and counted). A task's figure is
its mean over its matched cells, so each task weighs the same however many variants and
repeats it has; the difference d_t = A's mean - B's mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from proctor.analysis import inference as inf
from proctor.analysis.load import AgentRun
from proctor.analysis.tables import write_csv
from proctor.core.provenance import differences as provenance_differences

DETECT_POINTS = (5.0, 10.0)
"""Differences (percentage points) the planning table is written for, by default."""
PLAN_REPEATS = (1, 3, 5, 10)


@dataclass(frozen=True)
class PairComparison:
    """A paired comparison of two runs over the cells both scored."""

    agent_a: str
    agent_b: str
    tasks: int
    """Tasks with at least one matched cell scored by both."""
    variants: int
    """Variant names both runs have (the original included)."""
    repeats: int
    """Repeats both runs have."""
    cells: int
    """Matched (task, variant, repeat) cells scored by both."""
    cells_left_out: int
    """Matched cells left out because one side or both were in error."""
    mean_a: float
    mean_b: float
    difference: float
    """Mean over tasks of d_t (A - B); positive: A scores higher."""
    interval: tuple[float, float]
    """95% percentile bootstrap interval of the difference, resampling tasks."""
    p_value: float
    """Two-sided sign-flip test of the per-task differences."""
    test: str
    """How the p-value was got: exact, or Monte Carlo with its number of flips."""
    sd: float
    """Sample standard deviation of the per-task differences."""
    detectable: float
    """Smallest true difference found with power 0.8 at alpha 0.05, these tasks."""
    only_a: int | None
    """Tasks A resolves and B does not; None unless each task has one 0/1 outcome a side."""
    only_b: int | None
    mcnemar_p: float | None
    """Exact McNemar p-value, only where each task has one 0/1 outcome per agent."""
    plan: inf.Components
    too_few: bool
    """Fewer than MIN_TASKS tasks: the interval is too narrow to trust."""
    provenance_differences: tuple[str, ...] = ()
    """The provenance fields in which the two runs differ, one line each: a difference
    in score may come from these rather than from the agents."""


def matched(a: AgentRun, b: AgentRun) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """A's and B's scores on the cells both have: [task, variant, repeat] arrays over the
    shared tasks and variant names, NaN where either side has no score."""
    tasks = sorted(set(a.tasks) & set(b.tasks))
    variants = [v for v in a.variants if v in set(b.variants)]
    k = min(a.scores.shape[2], b.scores.shape[2])

    def pick(run: AgentRun) -> np.ndarray:
        where_t = {t: i for i, t in enumerate(run.tasks)}
        ti = [where_t[t] for t in tasks]
        vi = [run.variants.index(v) for v in variants]
        return run.scores[np.ix_(ti, vi, range(k))] if tasks and variants else \
            np.full((len(tasks), len(variants), k), np.nan)

    sa, sb = pick(a), pick(b)
    both = ~np.isnan(sa) & ~np.isnan(sb)
    return np.where(both, sa, np.nan), np.where(both, sb, np.nan), tasks, variants


def _task_means(s: np.ndarray) -> np.ndarray:
    n = np.sum(~np.isnan(s), axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.nansum(s, axis=(1, 2)) / np.maximum(n, 1), np.nan)


def _mcnemar(sa: np.ndarray, sb: np.ndarray) -> tuple[int | None, int | None, float | None]:
    """McNemar only where every task has exactly one matched 0/1 outcome a side."""
    n = np.sum(~np.isnan(sa), axis=(1, 2))
    binary = np.all(np.isin(sa[~np.isnan(sa)], (0.0, 1.0))) and \
        np.all(np.isin(sb[~np.isnan(sb)], (0.0, 1.0)))
    if not len(n) or not binary or np.any(n[n > 0] != 1):
        return None, None, None
    a, b = np.nansum(sa, axis=(1, 2))[n > 0], np.nansum(sb, axis=(1, 2))[n > 0]
    only_a, only_b = int(np.sum((a == 1) & (b == 0))), int(np.sum((b == 1) & (a == 0)))
    return only_a, only_b, inf.mcnemar_exact(only_a, only_b)


def differences(a: AgentRun, b: AgentRun) -> np.ndarray:
    """d_t over the tasks with a matched cell scored by both."""
    sa, sb, _, _ = matched(a, b)
    d = _task_means(sa) - _task_means(sb)
    return d[np.isfinite(d)]


def compare_runs(a: AgentRun, b: AgentRun, components: tuple[float, float, float, float],
                 seed: int, resamples: int, test: tuple[float, str] | None = None
                 ) -> PairComparison:
    """The paired comparison of A and B; `components` are A's and B's sigma2_prompt and
    sigma2_run (NaN where not measured), for the planning table; `test` the sign-flip
    p-value when already computed (in a batch of pairs)."""
    sa, sb, tasks, variants = matched(a, b)
    ma, mb = _task_means(sa), _task_means(sb)
    ok = np.isfinite(ma) & np.isfinite(mb)
    d = (ma - mb)[ok]
    t = len(d)
    interval, p, how, sd = (math.nan, math.nan), math.nan, "no shared tasks", math.nan
    if t:
        boot = inf.resample_weights(seed, t, resamples) @ d / t
        interval = inf.percentile_interval(boot)
        p, how = test or inf.sign_flip_pvalue(d, seed)
        sd = float(np.std(d, ddof=1)) if t > 1 else math.nan
    cells = int(np.sum(~np.isnan(sa)))
    ka = min(a.scores.shape[2], b.scores.shape[2])
    total = len(tasks) * len(variants) * ka
    pa, ra, pb, rb = components
    plan = inf.components(sd ** 2, _sum(pa, pb), _sum(ra, rb), max(1, len(variants)),
                          max(1, ka))
    only_a, only_b, mc = _mcnemar(sa, sb)
    return PairComparison(
        a.agent, b.agent, t, len(variants), ka, cells, total - cells,
        float(np.mean(ma[ok])) if t else math.nan, float(np.mean(mb[ok])) if t else math.nan,
        float(np.mean(d)) if t else math.nan, interval, p, how, sd,
        inf.detectable_effect(sd, t), only_a, only_b, mc, plan, t < inf.MIN_TASKS,
        tuple(provenance_differences(a.provenance, b.provenance)))


def warnings(comparisons: Sequence[PairComparison]) -> list[str]:
    """One line per provenance field in which a compared pair differs."""
    return [f"warning: {c.agent_a} and {c.agent_b} differ in provenance {line}"
            for c in comparisons for line in c.provenance_differences]


def _sum(x: float, y: float) -> float:
    return sum(v for v in (x, y) if math.isfinite(v))


def plan_rows(c: PairComparison, points: Sequence[float], max_variants: int
              ) -> list[list[object]]:
    """Tasks needed to find each difference (points) at power 0.8, by variants and repeats:
    variants from 1 to what the runs had, repeats from PLAN_REPEATS."""
    rows = []
    for effect in points:
        for v in sorted({1, max(1, max_variants)}):
            for k in PLAN_REPEATS:
                need = inf.tasks_needed(effect / 100, c.plan.variance(v, k))
                rows.append([c.agent_a, c.agent_b, effect, v, k, need])
    return rows


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (family-wise error over every pair compared)."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    out, running = [math.nan] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        out[i] = running
    return out


COLUMNS = ["agent_a", "agent_b", "tasks", "variants", "repeats", "cells", "cells_left_out",
           "mean_a", "mean_b", "difference", "ci_low", "ci_high", "p_value", "p_holm", "test",
           "sd_task_difference", "detectable_effect", "mcnemar_only_a", "mcnemar_only_b",
           "mcnemar_p", "sigma2_task", "sigma2_prompt_sum", "sigma2_run_sum", "too_few_tasks"]
PLAN_COLUMNS = ["agent_a", "agent_b", "difference_points", "variants", "repeats",
                "tasks_needed"]


def comparison_row(c: PairComparison, p_holm: float) -> list[object]:
    return [c.agent_a, c.agent_b, c.tasks, c.variants, c.repeats, c.cells, c.cells_left_out,
            c.mean_a, c.mean_b, c.difference, *c.interval, c.p_value, p_holm, c.test, c.sd,
            c.detectable, c.only_a, c.only_b, c.mcnemar_p, c.plan.task, c.plan.prompt,
            c.plan.run, c.too_few]


def _pct(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:+.1f}"


def _p(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.4f}"


def table(comparisons: Sequence[PairComparison], adjusted: Sequence[float]) -> list[str]:
    """The comparisons as a markdown table (points = percentage points)."""
    lines = ["| A | B | Tasks | Cells | A - B (points) | 95% interval | Sign-flip p | Holm p | "
             "Detectable (points) | McNemar p |", "|" + "---|" * 10]
    for c, ph in zip(comparisons, adjusted, strict=True):
        lo, hi = c.interval
        flag = " ⚠" if c.too_few else ""
        lines.append(f"| {c.agent_a} | {c.agent_b} | {c.tasks}{flag} | {c.cells} | "
                     f"{_pct(c.difference)} | [{_pct(lo)}, {_pct(hi)}] | {_p(c.p_value)} "
                     f"({c.test}) | {_p(ph)} | {_pct(c.detectable).lstrip('+')} | "
                     f"{_p(c.mcnemar_p)} |")
    return lines


EXPLAINED = [
    "Each task's score is its mean over the cells (variant, repeat) both runs scored; the "
    "difference is the mean over tasks of A's minus B's, in percentage points.",
    "The p-value is a two-sided sign-flip (paired permutation) test on the per-task "
    "differences: exact up to 16 non-zero differences, else 20,000 seeded random flips "
    "with the add-one rule. Holm's adjustment covers every pair in the table.",
    "The interval is a 95% percentile bootstrap resampling tasks (clusters).",
    f"⚠: fewer than {inf.MIN_TASKS} tasks; the interval is then too narrow (a nominal 95% "
    "covers about 91% at 10 tasks and 83% at 5); trust the test, not the interval.",
    "Detectable: the smallest true difference the test finds 80% of the time at alpha 0.05 "
    "on this many tasks, from the per-task differences' spread (normal approximation).",
    "McNemar (exact) only where each task has one 0/1 outcome per run.",
]


def report(comparisons: Sequence[PairComparison], plan: Sequence[Sequence[object]]) -> str:
    """compare_report.md: the table, the planning table, and what each column means."""
    adjusted = holm([c.p_value if math.isfinite(c.p_value) else 1.0 for c in comparisons])
    lines = ["# Paired comparison", "", *table(comparisons, adjusted), ""]
    lines += [f"* {text}" for text in EXPLAINED]
    if found := warnings(comparisons):
        lines += ["", "## Provenance differences", "",
                  "These runs differ in what they ran with, not only in the agent: a "
                  "difference in score may come from these.", "",
                  *(f"* {line.removeprefix('warning: ')}" for line in found)]
    lines += ["", "## How many tasks to find a difference", "",
              "Tasks needed for the test to find a true difference 80% of the time at alpha "
              "0.05, for a number of variants (prompts, the original included) and repeats "
              "per prompt. One task's difference has variance sigma2_task + "
              "sigma2_prompt / variants + sigma2_run / (variants x repeats), with the "
              "components estimated from these runs (table above's CSV); SWE-bench Verified "
              "has 500 tasks, so a need above that cannot be met by tasks alone.", "",
              "| A | B | Difference (points) | Variants | Repeats | Tasks needed |",
              "|" + "---|" * 6]
    lines += [f"| {r[0]} | {r[1]} | {r[2]:g} | {r[3]} | {r[4]} | {r[5]} |" for r in plan]
    lines += ["", "Components per pair: " + "; ".join(
        f"{c.agent_a} vs {c.agent_b}: sigma2_task {c.plan.task:.4f}, sigma2_prompt "
        f"{c.plan.prompt:.4f}, sigma2_run {c.plan.run:.4f}" for c in comparisons)]
    return "\n".join(lines) + "\n"


def write_comparison(comparisons: Sequence[PairComparison], plan: Sequence[Sequence[object]],
                     out: Path) -> None:
    """compare_report.md, comparison.csv and sample_size.csv under `out`."""
    adjusted = holm([c.p_value if math.isfinite(c.p_value) else 1.0 for c in comparisons])
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "comparison.csv", COLUMNS,
              [comparison_row(c, p) for c, p in zip(comparisons, adjusted, strict=True)])
    write_csv(out / "sample_size.csv", PLAN_COLUMNS, plan)
    (out / "compare_report.md").write_text(report(comparisons, plan))
