"""`proctor analyze` and `proctor compare` over results folders: load, compute the figures
and the paired comparisons, write the tables, plots and reports (the package's docstring
lists them). Kept apart from the package's `__init__`, so that the operator, which takes
only the figures (`reliability`, `load`), imports no plotting library."""


from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from proctor.analysis import plots, tables
from proctor.analysis.compare import (
    COLUMNS,
    DETECT_POINTS,
    PairComparison,
    compare_runs,
    comparison_row,
    differences,
    holm,
    plan_rows,
    write_comparison,
)
from proctor.analysis.inference import sign_flip_batch
from proctor.analysis.load import AgentRun, AnalysisError, Score, check_output, load_agents
from proctor.analysis.markdown import render
from proctor.analysis.reliability import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    AgentFigures,
    agent_figures,
)

__all__ = ["Analysis", "AnalysisError", "analyze", "compare", "compute", "write"]


@dataclass
class Analysis:
    """Everything the analysis computed, before it is written."""

    runs: list[AgentRun]
    figures: list[AgentFigures]
    task_rows: list[list[object]]
    comparisons: list[PairComparison]


def pairs(runs: list[AgentRun], figures: list[AgentFigures], seed: int, resamples: int
          ) -> list[PairComparison]:
    """Every pair of runs, compared over the cells both scored (the sign-flip tests of all
    pairs in one batch: one matrix product instead of one per pair)."""
    by = dict(zip((r.agent for r in runs), figures, strict=True))
    combos = list(itertools.combinations(runs, 2))
    tests = sign_flip_batch([differences(a, b) for a, b in combos], seed)
    return [compare_runs(a, b, (by[a.agent].sigma2_prompt, by[a.agent].sigma2_run,
                                by[b.agent].sigma2_prompt, by[b.agent].sigma2_run),
                         seed, resamples, test)
            for (a, b), test in zip(combos, tests, strict=True)]


def compute(runs: list[AgentRun], seed: int = DEFAULT_SEED,
            resamples: int = DEFAULT_RESAMPLES) -> Analysis:
    """The figures of every agent and every pair (pure)."""
    figures, task_rows = [], []
    for run in runs:
        fig, per = agent_figures(run.agent, run.scores, resources=run.resources,
                                 errors=run.errors, seed=seed, resamples=resamples,
                                 answers=run.answers)
        figures.append(fig)
        task_rows += tables.task_rows(run.agent, run, per)
    return Analysis(runs, figures, task_rows, pairs(runs, figures, seed, resamples))


@dataclass(frozen=True)
class Image:
    """One figure of the report: its file, how it is drawn and its caption."""

    title: str
    name: str
    make: Callable[[Analysis], Figure]
    caption: str
    needs: Callable[[Analysis], bool]
    """Whether the analysis has what the figure shows (else it is not drawn)."""


def _variants(a: Analysis) -> bool:
    return any(f.variants > 1 for f in a.figures)


def _repeats(a: Analysis) -> bool:
    return any(f.repeats > 1 for f in a.figures)


IMAGES = [
    Image("Prompt robustness by agent", "sensitivity_comparison.png",
          lambda a: plots.sensitivity_comparison(a.figures),
          "S_prompt per run (HAL's per-run reading; does not move with the number of "
          "repeats K) beside S_prompt on the K-repeat means (rises with K), with 95% "
          "bootstrap intervals over tasks. The dashed line is the lowest value 0/1 scores "
          "allow.", _variants),
    Image("Task sensitivity distribution", "task_sensitivity_distribution.png",
          lambda a: plots.task_sensitivity_distribution(a.task_rows),
          "Per task with 2+ scored variants: the population variance of its variant scores "
          "(left) and its best-minus-worst variant score (right), per agent.", _variants),
    Image("Most prompt-sensitive tasks", "most_sensitive_tasks.png",
          lambda a: plots.most_sensitive_tasks(a.task_rows),
          "The tasks whose score varies most with the wording (variance across variants); "
          "tasks whose score never changed are not drawn.", _variants),
    Image("Accuracy on original prompts vs variants", "accuracy_original_vs_variants.png",
          lambda a: plots.accuracy_original_vs_variants(a.figures),
          "Pooled accuracy (errors left out) on the original prompts and on the variants; "
          "R_prompt is their ratio. 95% bootstrap intervals over tasks.", _variants),
    Image("Prompt vs run variance", "variance_components.png",
          lambda a: plots.variance_components(a.figures),
          "sigma2_prompt (between prompts, sampling noise removed, unclipped) against "
          "sigma2_run (between repeats of one prompt) per agent, with 95% intervals. Above "
          "the diagonal the wording matters more than rerunning.",
          lambda a: _variants(a) and _repeats(a)),
    Image("pass@k and pass^k", "pass_k_curve.png", lambda a: plots.pass_k_curve(a.figures),
          "pass@k (solid: at least one of k repeats resolves) and pass^k (dashed: all k "
          "resolve) over k, original prompts, with 95% bands. The gap between them is the "
          "agent's inconsistency.", _repeats),
    Image("Outcome consistency", "outcome_consistency.png",
          lambda a: plots.outcome_consistency(a.figures),
          "C_out per agent: mean over tasks of (2p - 1)^2, p the resolved share of the "
          "original prompt's repeats; 1 = the same outcome every repeat. 95% intervals.",
          _repeats),
    Image("Calibration", "calibration.png", lambda a: plots.reliability_diagram(a.figures),
          "Reliability diagram of the confidence each agent reported: per bin of width 0.1, "
          "the mean confidence against the resolved share (marker area: items in the bin), "
          "over every scored item with a confidence. On the diagonal the agent is calibrated; "
          "below it, overconfident.", lambda a: any(f.calibration for f in a.figures)),
]


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
    if any(f.calibration for f in analysis.figures):
        tables.write_csv(out / "calibration_bins.csv", tables.CALIBRATION_COLUMNS,
                         tables.calibration_rows(analysis.figures))
    tables.write_csv(out / "variants.csv", tables.VARIANT_COLUMNS,
                     [row for run in analysis.runs for row in tables.variant_rows(run)])
    if analysis.comparisons:
        adjusted = holm([c.p_value for c in analysis.comparisons])
        tables.write_csv(out / "comparisons.csv", COLUMNS,
                         [comparison_row(c, p) for c, p in zip(analysis.comparisons, adjusted,
                                                               strict=True)])
    drawn = [image for image in IMAGES if image.needs(analysis)]
    for image in drawn:
        image.make(analysis).savefig(out / image.name, dpi=100, bbox_inches="tight")
    report = render(analysis.runs, analysis.figures, analysis.task_rows, analysis.comparisons,
                    [(i.title, i.name, i.caption) for i in drawn])
    (out / "sensitivity_report.md").write_text(report)


def analyze(folders: list[Path], out: Path, score: Score = "resolved",
            seed: int = DEFAULT_SEED, resamples: int = DEFAULT_RESAMPLES) -> Analysis:
    """Load the folders, compute, write; returns what was computed. Every input is checked
    before anything is written."""
    if not folders:
        raise AnalysisError("give at least one results folder")
    check_output(out)
    analysis = compute(load_agents(folders, score), seed, resamples)
    write(analysis, out)
    return analysis


def compare(folders: list[Path], out: Path, points: Sequence[float] = DETECT_POINTS,
            score: Score = "resolved", seed: int = DEFAULT_SEED,
            resamples: int = DEFAULT_RESAMPLES) -> list[PairComparison]:
    """`proctor compare`: every pair of the folders' runs, matched by task, variant and
    repeat; compare_report.md, comparison.csv and sample_size.csv under `out`."""
    if len(folders) < 2:
        raise AnalysisError("give two results folders or more to compare")
    if any(p <= 0 or p > 100 for p in points):
        raise AnalysisError("--detect takes differences in percentage points, above 0 and "
                            "at most 100")
    check_output(out)
    runs = load_agents(folders, score)
    figures = [agent_figures(r.agent, r.scores, errors=r.errors, seed=seed, resamples=10)[0]
               for r in runs]
    comparisons = pairs(runs, figures, seed, resamples)
    plan = [row for c in comparisons for row in plan_rows(c, points, c.variants)]
    write_comparison(comparisons, plan, out)
    return comparisons
