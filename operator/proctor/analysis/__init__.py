"""`proctor analyze`: reliability figures of one or many results folders.

    load (load.py) -> figures per agent (proctor.analysis.reliability, pure) -> CSVs (tables.py),
    PNGs (plots.py), sensitivity_report.md (markdown.py)

Written under the output folder:

    agent_level_sensitivity.csv   task_level_sensitivity.csv   reliability_metrics.csv
    variants.csv                  comparisons.csv (two agents or more)
    sensitivity_comparison.png    task_sensitivity_distribution.png
    most_sensitive_tasks.png      accuracy_original_vs_variants.png
    sensitivity_report.md
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

from proctor.analysis import plots, tables
from proctor.analysis.load import AgentRun, AnalysisError, Score, load_agents
from proctor.analysis.markdown import render
from proctor.analysis.reliability import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    AgentFigures,
    Comparison,
    agent_figures,
    compare,
)

__all__ = ["Analysis", "AnalysisError", "analyze", "compute", "write"]


@dataclass
class Analysis:
    """Everything the analysis computed, before it is written."""

    runs: list[AgentRun]
    figures: list[AgentFigures]
    task_rows: list[list[object]]
    comparisons: list[Comparison]


def compute(runs: list[AgentRun], seed: int = DEFAULT_SEED,
            resamples: int = DEFAULT_RESAMPLES) -> Analysis:
    """The figures of every agent and every pair (pure)."""
    figures, task_rows, rates = [], [], {}
    for run in runs:
        fig, per = agent_figures(run.agent, run.scores, resources=run.resources,
                                 errors=run.errors, seed=seed, resamples=resamples)
        figures.append(fig)
        task_rows += tables.task_rows(run.agent, run, per)
        rates[run.agent] = {t: float(s) for t, s, n in zip(run.tasks, per["original_score"],
                                                           per["orig_n"], strict=True) if n}
    comparisons = [compare(a.agent, rates[a.agent], b.agent, rates[b.agent],
                           repeats=max(a.scores.shape[2], b.scores.shape[2]), seed=seed,
                           resamples=resamples)
                   for a, b in itertools.combinations(runs, 2)]
    return Analysis(runs, figures, task_rows, comparisons)


IMAGES = [("Prompt robustness by agent", "sensitivity_comparison.png",
           lambda a: plots.sensitivity_comparison(a.figures)),
          ("Task sensitivity distribution", "task_sensitivity_distribution.png",
           lambda a: plots.task_sensitivity_distribution(a.task_rows)),
          ("Most prompt-sensitive tasks", "most_sensitive_tasks.png",
           lambda a: plots.most_sensitive_tasks(a.task_rows)),
          ("Accuracy on original prompts vs variants", "accuracy_original_vs_variants.png",
           lambda a: plots.accuracy_original_vs_variants(a.figures))]


def write(analysis: Analysis, out: Path) -> None:
    """The CSVs, PNGs and report under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    tables.write_csv(out / "agent_level_sensitivity.csv",
                     tables.SEED_AGENT_COLUMNS + tables.OUR_AGENT_COLUMNS,
                     tables.agent_rows(analysis.figures))
    tables.write_csv(out / "task_level_sensitivity.csv",
                     tables.SEED_TASK_COLUMNS + tables.OUR_TASK_COLUMNS, analysis.task_rows)
    tables.write_csv(out / "reliability_metrics.csv", tables.METRIC_COLUMNS,
                     [row for f in analysis.figures for row in tables.metric_rows(f)])
    tables.write_csv(out / "variants.csv", tables.VARIANT_COLUMNS,
                     [row for run in analysis.runs for row in tables.variant_rows(run)])
    if analysis.comparisons:
        tables.write_csv(out / "comparisons.csv", tables.COMPARISON_COLUMNS,
                         [tables.comparison_row(c) for c in analysis.comparisons])
    for _title, name, make in IMAGES:
        make(analysis).savefig(out / name, dpi=100)
    report = render(analysis.runs, analysis.figures, analysis.task_rows, analysis.comparisons,
                    [(title, name) for title, name, _ in IMAGES])
    (out / "sensitivity_report.md").write_text(report)


def analyze(folders: list[Path], out: Path, score: Score = "resolved",
            seed: int = DEFAULT_SEED, resamples: int = DEFAULT_RESAMPLES) -> Analysis:
    """Load the folders, compute, write; returns what was computed."""
    if not folders:
        raise AnalysisError("give at least one results folder")
    analysis = compute(load_agents(folders, score), seed, resamples)
    write(analysis, out)
    return analysis
