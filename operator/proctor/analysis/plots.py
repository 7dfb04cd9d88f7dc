"""The analysis' figures: each function returns a matplotlib Figure (no global state)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from matplotlib.figure import Figure

from proctor.analysis.reliability import AgentFigures

TaskRow = Sequence[object]  # a task_level_sensitivity.csv row (see tables.task_rows)


def _error_bars(figs: Sequence[AgentFigures], name: str) -> list[list[float]]:
    """matplotlib's yerr (below, above) of each agent's figure `name` from its interval."""
    below, above = [], []
    for f in figs:
        value, (lo, hi) = getattr(f, name), f.intervals.get(name, (math.nan, math.nan))
        ok = all(map(math.isfinite, (value, lo, hi)))
        below.append(max(0.0, value - lo) if ok else 0.0)
        above.append(max(0.0, hi - value) if ok else 0.0)
    return [below, above]


def _finish(fig: Figure, ax, title: str, xlabel: str, ylabel: str,
            legend: dict | None = None) -> Figure:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(**(legend or {}))
    fig.tight_layout()
    return fig


def _bar_values(values: Sequence[float]) -> list[float]:
    return [0 if math.isnan(v) else v for v in values]


def sensitivity_comparison(figs: Sequence[AgentFigures]) -> Figure:
    """S_prompt per agent, with its 95% interval (the seed's bar chart, plus intervals)."""
    fig = Figure(figsize=(max(5, 1.2 * len(figs) + 3), 4))
    ax = fig.add_subplot()
    ax.bar([f.agent for f in figs], _bar_values([f.S_prompt for f in figs]),
           yerr=_error_bars(figs, "S_prompt"), capsize=4, color="tab:blue",
           label="S_prompt (95% bootstrap interval)")
    ax.axhline(0.75, color="grey", linestyle="--", label="floor for 0/1 scores (0.75)")
    ax.set_ylim(0.7, 1.01)
    return _finish(fig, ax, "Prompt robustness by agent", "Agent",
                   "S_prompt = 1 - mean variance", {"loc": "lower right"})


def task_sensitivity_distribution(rows: Sequence[TaskRow]) -> Figure:
    """Histograms of the per-task variance and min-max gap, one colour per agent."""
    fig = Figure(figsize=(10, 4))
    left, right = fig.subplots(1, 2)
    agents = sorted({str(r[5]) for r in rows})
    for agent in agents:
        mine = [r for r in rows if r[5] == agent]
        left.hist([float(r[1]) for r in mine], bins=10, range=(0, 0.25), alpha=0.6, label=agent)
        right.hist([float(r[3]) for r in mine], bins=10, range=(0, 1), alpha=0.6, label=agent)
    fig.suptitle("Task sensitivity distribution")
    legend = {"title": "Agent"} if agents else {"handles": [], "title": "no tasks"}
    _finish(fig, left, "Per-task variance across variants",
            "Population variance of the variant scores", "Tasks", legend)
    return _finish(fig, right, "Per-task min-max gap", "Best minus worst variant score",
                   "Tasks", legend)


def most_sensitive_tasks(rows: Sequence[TaskRow], top: int = 15) -> Figure:
    """The tasks with the largest variance across variants (any agent)."""
    ranked = sorted(rows, key=lambda r: (-float(r[1]), str(r[5]), str(r[0])))[:top]
    fig = Figure(figsize=(8, max(3, 0.35 * len(ranked) + 1.5)))
    ax = fig.add_subplot()
    labels = [f"{r[0]} ({r[5]})" for r in ranked]
    ax.barh(labels[::-1], [float(r[1]) for r in ranked][::-1], color="tab:red",
            label="variance across variants")
    return _finish(fig, ax, f"Most prompt-sensitive tasks (top {len(ranked)})",
                   "Population variance of the variant scores", "Task (agent)",
                   {"loc": "lower right"})


def accuracy_original_vs_variants(figs: Sequence[AgentFigures]) -> Figure:
    """Per agent, the pooled accuracy on original prompts and on variants (R_prompt is
    their ratio), each with its 95% bootstrap interval."""
    fig = Figure(figsize=(max(5, 1.5 * len(figs) + 3), 4))
    ax = fig.add_subplot()
    xs = range(len(figs))
    for shift, name, label in ((-0.2, "accuracy_original", "original prompts"),
                               (0.2, "accuracy_variants", "variants")):
        ax.bar([x + shift for x in xs], _bar_values([getattr(f, name) for f in figs]),
               width=0.4, yerr=_error_bars(figs, name), capsize=4, label=label)
    ax.set_xticks(list(xs), [f.agent for f in figs])
    ax.set_ylim(0, 1.05)
    return _finish(fig, ax, "Accuracy on original prompts vs variants", "Agent",
                   "Accuracy (errors left out)")
