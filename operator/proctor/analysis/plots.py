"""The analysis' figures: each function returns a matplotlib Figure (no global state).

For a paper: every value axis starts at 0 (or below, where a figure can be negative), every
legend sits outside the axes (right of them), and only agents and tasks that have a value
are drawn. The report gives each figure a caption (`proctor.analysis.CAPTIONS`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure

from proctor.analysis.figures import BY_ATTR, PER_K
from proctor.analysis.reliability import AgentFigures

TaskRow = Sequence[Any]  # a task_level_sensitivity.csv row, str and float cells (tables.task_rows)
STYLES = ("-", "--", ":")
"""Line styles of the per-k figures, in their declared order."""
OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0}


def _finite(x: float) -> bool:
    return x is not None and math.isfinite(x)


def _error_bars(figs: Sequence[AgentFigures], name: str) -> list[list[float]]:
    """matplotlib's yerr (below, above) of each agent's figure `name` (its attribute) from
    its declared interval."""
    below, above, key = [], [], BY_ATTR[name].interval
    for f in figs:
        value, (lo, hi) = getattr(f, name), f.intervals.get(key, (math.nan, math.nan))
        ok = all(map(_finite, (value, lo, hi)))
        below.append(max(0.0, value - lo) if ok else 0.0)
        above.append(max(0.0, hi - value) if ok else 0.0)
    return [below, above]


def _finish(fig: Figure, ax, title: str, xlabel: str, ylabel: str,
            legend: bool = True) -> Figure:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(**OUTSIDE)
    fig.tight_layout()
    return fig


def _empty(title: str, why: str) -> Figure:
    fig = Figure(figsize=(6, 2))
    ax = fig.add_subplot()
    ax.axis("off")
    ax.text(0.5, 0.5, why, ha="center", va="center")
    ax.set_title(title)
    return fig


def with_value(figs: Sequence[AgentFigures], name: str) -> list[AgentFigures]:
    return [f for f in figs if _finite(getattr(f, name))]


def sensitivity_comparison(figs: Sequence[AgentFigures]) -> Figure:
    """Per agent, the K-independent S_prompt_per_run (HAL's per-run reading, the headline)
    beside the K-dependent S_prompt on the K-repeat means, each with its 95% interval."""
    shown = with_value(figs, "S_prompt_per_run")
    if not shown:
        return _empty("Prompt robustness by agent", "no variants: prompt sensitivity not "
                                                    "measured")
    fig = Figure(figsize=(1.3 * len(shown) + 6, 4))
    ax = fig.add_subplot()
    xs = range(len(shown))
    for shift, name, label in ((-0.2, "S_prompt_per_run", "S_prompt per run (HAL, headline)"),
                               (0.2, "S_prompt", "S_prompt on K-repeat means (rises with K)")):
        ax.bar([x + shift for x in xs], [getattr(f, name) for f in shown], width=0.4,
               yerr=_error_bars(shown, name), capsize=4, label=label)
    ax.axhline(0.75, color="grey", linestyle="--", label="floor for 0/1 scores (0.75)")
    ax.set_xticks(list(xs), [f.agent for f in shown])
    ax.set_ylim(0, 1.05)
    return _finish(fig, ax, "Prompt robustness by agent", "Agent", "S_prompt (1 = robust)")


def task_sensitivity_distribution(rows: Sequence[TaskRow]) -> Figure:
    """Histograms of the per-task variance and min-max gap, one colour per agent."""
    if not rows:
        return _empty("Task sensitivity distribution", "no variants: prompt sensitivity not "
                                                       "measured")
    fig = Figure(figsize=(12, 4))
    left, right = fig.subplots(1, 2)
    for agent in sorted({str(r[5]) for r in rows}):
        mine = [r for r in rows if r[5] == agent]
        left.hist([float(r[1]) for r in mine], bins=10, range=(0, 0.25), alpha=0.6, label=agent)
        right.hist([float(r[3]) for r in mine], bins=10, range=(0, 1), alpha=0.6, label=agent)
    fig.suptitle("Task sensitivity distribution")
    _finish(fig, left, "Per-task variance across variants",
            "Population variance of the variant scores", "Tasks", legend=False)
    return _finish(fig, right, "Per-task min-max gap", "Best minus worst variant score",
                   "Tasks")


def most_sensitive_tasks(rows: Sequence[TaskRow], top: int = 15) -> Figure:
    """The tasks with the largest variance across variants (any agent); tasks whose score
    never changed with the wording are not drawn."""
    ranked = sorted((r for r in rows if float(r[1]) > 0),
                    key=lambda r: (-float(r[1]), str(r[5]), str(r[0])))[:top]
    if not ranked:
        return _empty("Most prompt-sensitive tasks", "no task's score changed with the wording"
                      if rows else "no variants: prompt sensitivity not measured")
    fig = Figure(figsize=(8, max(3, 0.35 * len(ranked) + 1.5)))
    ax = fig.add_subplot()
    labels = [f"{r[0]} ({r[5]})" for r in ranked]
    ax.barh(labels[::-1], [float(r[1]) for r in ranked][::-1], color="tab:red")
    ax.set_xlim(0, 0.26)
    return _finish(fig, ax, f"Most prompt-sensitive tasks (top {len(ranked)})",
                   "Population variance of the variant scores (0.25 = max for 0/1)",
                   "Task (agent)")


def accuracy_original_vs_variants(figs: Sequence[AgentFigures]) -> Figure:
    """Per agent, the pooled accuracy on original prompts and on variants (R_prompt is
    their ratio), each with its 95% bootstrap interval."""
    shown = with_value(figs, "accuracy_variants")
    if not shown:
        return _empty("Accuracy on original prompts vs variants",
                      "no variants: prompt sensitivity not measured")
    fig = Figure(figsize=(1.5 * len(shown) + 5, 4))
    ax = fig.add_subplot()
    xs = range(len(shown))
    for shift, name, label in ((-0.2, "accuracy_original", "original prompts"),
                               (0.2, "accuracy_variants", "variants")):
        ax.bar([x + shift for x in xs], [getattr(f, name) for f in shown],
               width=0.4, yerr=_error_bars(shown, name), capsize=4, label=label)
    ax.set_xticks(list(xs), [f.agent for f in shown])
    ax.set_ylim(0, 1.05)
    return _finish(fig, ax, "Accuracy on original prompts vs variants", "Agent",
                   "Accuracy (errors left out)")


def variance_components(figs: Sequence[AgentFigures]) -> Figure:
    """sigma2_prompt against sigma2_run per agent, with 95% intervals: above the diagonal the
    wording moves scores more than rerunning does."""
    shown = [f for f in figs if _finite(f.sigma2_prompt) and _finite(f.sigma2_run)]
    if not shown:
        return _empty("Prompt vs run variance", "needs variants and 2+ repeats")
    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    for f in shown:
        (xl, xh), (yl, yh) = (f.intervals.get(n, (math.nan, math.nan))
                              for n in ("sigma2_run", "sigma2_prompt"))
        ax.errorbar([f.sigma2_run], [f.sigma2_prompt], fmt="o", capsize=4, label=f.agent,
                    clip_on=False,  # an agent at (0, 0) sits on the axes' corner
                    xerr=[[max(0, f.sigma2_run - xl)], [max(0, xh - f.sigma2_run)]]
                    if _finite(xl) else None,
                    yerr=[[max(0, f.sigma2_prompt - yl)], [max(0, yh - f.sigma2_prompt)]]
                    if _finite(yl) else None)
    top = max(0.05, *(max(f.sigma2_run, f.sigma2_prompt, f.intervals.get(
        "sigma2_prompt", (0, 0))[1], f.intervals.get("sigma2_run", (0, 0))[1]) for f in shown))
    low = min(0.0, *(f.intervals.get("sigma2_prompt", (0, 0))[0] for f in shown))
    ax.plot([0, top * 1.1], [0, top * 1.1], color="grey", linestyle="--",
            label="sigma2_prompt = sigma2_run")
    ax.set_xlim(0, top * 1.1)
    ax.set_ylim(min(low * 1.1, 0), top * 1.1)
    return _finish(fig, ax, "Prompt vs run variance", "sigma2_run (within a prompt)",
                   "sigma2_prompt (between prompts, unclipped)")


def pass_k_curve(figs: Sequence[AgentFigures]) -> Figure:
    """pass@k and pass^k over k for each agent with 2+ repeats, with 95% intervals."""
    shown = [f for f in figs if len(f.pass_hat_k) >= 2]
    if not shown:
        return _empty("pass@k and pass^k over k", "needs 2+ repeats")
    fig = Figure(figsize=(8, 4.5))
    ax = fig.add_subplot()
    for i, f in enumerate(shown):
        color = f"C{i % 10}"
        for n, figure in enumerate(PER_K):  # pass@k solid, pass^k dashed
            values, ks = getattr(f, figure.attr), sorted(getattr(f, figure.attr))
            keys = [figure.interval.format(k=k) for k in ks]
            lo = [f.intervals.get(key, (math.nan,) * 2)[0] for key in keys]
            hi = [f.intervals.get(key, (math.nan,) * 2)[1] for key in keys]
            ax.plot(ks, [values[k] for k in ks], STYLES[n % len(STYLES)], marker="o",
                    color=color, label=f"{f.agent} {figure.label}")
            ax.fill_between(ks, lo, hi, color=color, alpha=0.12)
        ax.set_xticks(sorted(f.pass_at_k))
    ax.set_ylim(0, 1.05)
    return _finish(fig, ax, "pass@k (any of k) and pass^k (all of k)", "k (repeats drawn)",
                   "Share of tasks")


def outcome_consistency(figs: Sequence[AgentFigures]) -> Figure:
    """C_out per agent with its 95% interval."""
    shown = with_value(figs, "C_out")
    if not shown:
        return _empty("Outcome consistency", "needs 2+ repeats")
    fig = Figure(figsize=(1.2 * len(shown) + 5, 4))
    ax = fig.add_subplot()
    ax.bar([f.agent for f in shown], [f.C_out for f in shown],
           yerr=_error_bars(shown, "C_out"), capsize=4, color="tab:green",
           label="C_out (95% interval)")
    ax.set_ylim(0, 1.05)
    return _finish(fig, ax, "Outcome consistency over repeats", "Agent",
                   "C_out (1 = same outcome every repeat)")


def reliability_diagram(figs: Sequence[AgentFigures]) -> Figure:
    """Per agent that reported confidences: each bin's mean confidence against its
    resolved share (marker area by items), with the diagonal of perfect calibration."""
    shown = [f for f in figs if f.calibration]
    if not shown:
        return _empty("Calibration", "no agent reported a confidence")
    fig = Figure(figsize=(7.5, 5))
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", label="perfect calibration")
    for f in shown:
        cal = f.calibration
        assert cal is not None
        most = max(b[2] for b in cal.bins)
        ax.plot([b[3] for b in cal.bins], [b[4] for b in cal.bins], "-", alpha=0.5)
        ax.scatter([b[3] for b in cal.bins], [b[4] for b in cal.bins],
                   s=[20 + 180 * b[2] / most for b in cal.bins], clip_on=False,
                   color=ax.lines[-1].get_color(),
                   label=f"{f.agent} (ECE {cal.ece:.3f}, {cal.items} items)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    return _finish(fig, ax, "Calibration (reliability diagram)",
                   "Mean confidence in the bin", "Resolved share in the bin")
