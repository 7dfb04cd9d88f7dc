"""The analysis' figures: each function returns a matplotlib Figure (no global state)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from matplotlib.figure import Figure

from proctor.reliability import AgentFigures

TaskRow = Sequence[object]  # a task_level_sensitivity.csv row (see tables.task_rows)


def _errors(value: float, interval: tuple[float, float]) -> list[float]:
    lo, hi = interval
    if not all(map(math.isfinite, (value, lo, hi))):
        return [0.0, 0.0]
    return [max(0.0, value - lo), max(0.0, hi - value)]


def sensitivity_comparison(figs: Sequence[AgentFigures]) -> Figure:
    """S_prompt per agent, with its 95% interval (the seed's bar chart, plus intervals)."""
    fig = Figure(figsize=(max(5, 1.2 * len(figs) + 3), 4))
    ax = fig.add_subplot()
    names = [f.agent for f in figs]
    values = [f.S_prompt for f in figs]
    errs = [_errors(f.S_prompt, f.intervals.get("S_prompt", (math.nan, math.nan)))
            for f in figs]
    ax.bar(names, [0 if math.isnan(v) else v for v in values],
           yerr=[[e[0] for e in errs], [e[1] for e in errs]], capsize=4, color="tab:blue",
           label="S_prompt (95% bootstrap interval)")
    ax.axhline(0.75, color="grey", linestyle="--", label="floor for 0/1 scores (0.75)")
    ax.set_ylim(0.7, 1.01)
    ax.set_title("Prompt robustness by agent")
    ax.set_xlabel("Agent")
    ax.set_ylabel("S_prompt = 1 - mean variance")
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def task_sensitivity_distribution(rows: Sequence[TaskRow]) -> Figure:
    """Histograms of the per-task variance and min-max gap, one colour per agent."""
    fig = Figure(figsize=(10, 4))
    left, right = fig.subplots(1, 2)
    agents = sorted({str(r[5]) for r in rows})
    for agent in agents:
        mine = [r for r in rows if r[5] == agent]
        left.hist([float(r[1]) for r in mine], bins=10, range=(0, 0.25), alpha=0.6, label=agent)
        right.hist([float(r[3]) for r in mine], bins=10, range=(0, 1), alpha=0.6, label=agent)
    left.set_title("Per-task variance across variants")
    left.set_xlabel("Population variance of the variant scores")
    left.set_ylabel("Tasks")
    right.set_title("Per-task min-max gap")
    right.set_xlabel("Best minus worst variant score")
    right.set_ylabel("Tasks")
    for ax in (left, right):
        ax.legend(title="Agent") if agents else ax.legend([], [], title="no tasks")
    fig.suptitle("Task sensitivity distribution")
    fig.tight_layout()
    return fig


def most_sensitive_tasks(rows: Sequence[TaskRow], top: int = 15) -> Figure:
    """The tasks with the largest variance across variants (any agent)."""
    ranked = sorted(rows, key=lambda r: (-float(r[1]), str(r[5]), str(r[0])))[:top]
    fig = Figure(figsize=(8, max(3, 0.35 * len(ranked) + 1.5)))
    ax = fig.add_subplot()
    labels = [f"{r[0]} ({r[5]})" for r in ranked]
    ax.barh(labels[::-1], [float(r[1]) for r in ranked][::-1], color="tab:red",
            label="variance across variants")
    ax.set_title(f"Most prompt-sensitive tasks (top {len(ranked)})")
    ax.set_xlabel("Population variance of the variant scores")
    ax.set_ylabel("Task (agent)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def accuracy_original_vs_variants(figs: Sequence[AgentFigures]) -> Figure:
    """Per agent, the resolved rate on original prompts (with its bootstrap interval) and
    the pooled accuracy on variants."""
    fig = Figure(figsize=(max(5, 1.5 * len(figs) + 3), 4))
    ax = fig.add_subplot()
    xs = range(len(figs))
    orig = [f.resolved_rate for f in figs]
    var = [f.accuracy_variants for f in figs]
    errs = [_errors(f.resolved_rate, f.intervals.get("resolved_rate", (math.nan, math.nan)))
            for f in figs]
    ax.bar([x - 0.2 for x in xs], [0 if math.isnan(v) else v for v in orig], width=0.4,
           yerr=[[e[0] for e in errs], [e[1] for e in errs]], capsize=4, label="original")
    ax.bar([x + 0.2 for x in xs], [0 if math.isnan(v) else v for v in var], width=0.4,
           label="variants")
    ax.set_xticks(list(xs), [f.agent for f in figs])
    ax.set_ylim(0, 1.05)
    ax.set_title("Accuracy on original prompts vs variants")
    ax.set_xlabel("Agent")
    ax.set_ylabel("Accuracy (errors left out)")
    ax.legend()
    fig.tight_layout()
    return fig
