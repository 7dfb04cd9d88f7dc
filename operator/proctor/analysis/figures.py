"""The reliability figures, declared once (pure data): a new figure is one entry here.

`reliability.agent_figures` computes them; the report's summary table
(`markdown.summary_table`), the pass@k table, the plots' error bars and the figures an
Evaluation's status and metrics carry (`proctor.k8s.evaluation.figures.FIGURES`) are read from
`DECLARED`, so they cannot drift apart. Only a published figure's pydantic field (its
help text goes into the CRD schema and docs) is written out beside it, in
`proctor.k8s.evaluation.figures.Reliability`; a test holds the two together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from proctor.analysis.reliability import AgentFigures

Needs = Literal["always", "variants", "repeats"]


@dataclass(frozen=True)
class Declared:
    """One figure: where its value and interval live, and who shows it."""

    attr: str
    """Its attribute on AgentFigures."""
    interval: str
    """Its interval's key in AgentFigures.intervals; ``{k}`` stands for a number of repeats."""
    label: str
    """Its column header in the report."""
    needs: Needs
    """What a run must have for it: nothing more, prompt variants, or 2 repeats or more."""
    in_summary: bool = False
    """A column of the report's summary table (in the order declared)."""
    per_k: bool = False
    """Its attribute holds one value per k (a column of the pass@k table)."""
    cap: float | None = None
    """The report caps its interval here (R_prompt is clamped at 1, as HAL does)."""
    status: str | None = None
    """Its field in an Evaluation's status and metrics, when the operator publishes it."""

    def value(self, figures: AgentFigures) -> float | None:
        """Its value in ``figures``; a per-k figure's at k = the run's repeats."""
        found = getattr(figures, self.attr)
        return found.get(figures.repeats) if self.per_k else found


DECLARED: tuple[Declared, ...] = (
    Declared("resolved_rate_excl_errors", "resolved_rate_excl_errors",
             "Resolved (errors out)", "always", in_summary=True),
    Declared("S_prompt_per_run", "S_prompt_per_run", "S_prompt per run (headline)",
             "variants", in_summary=True, status="s_prompt_per_run"),
    Declared("sigma2_prompt", "sigma2_prompt", "σ²_prompt (unclipped)", "variants",
             in_summary=True),
    Declared("S_prompt", "S_prompt", "S_prompt on K-means (K-dependent)", "variants",
             in_summary=True, status="s_prompt"),
    Declared("R_prompt", "R_prompt", "R_prompt", "variants", in_summary=True, cap=1.0,
             status="r_prompt"),
    Declared("accuracy_gap", "accuracy_gap", "Gap", "variants", in_summary=True),
    # The summary table shows these two to every agent (n/a under 2 repeats).
    Declared("C_out", "C_out", "C_out", "repeats", in_summary=True, status="c_out"),
    Declared("sigma2_run", "sigma2_run", "σ²_run", "repeats", in_summary=True),
    Declared("accuracy_original", "accuracy_original", "original prompts", "variants"),
    Declared("accuracy_variants", "accuracy_variants", "variants", "variants"),
    Declared("pass_at_k", "pass@{k}", "pass@k", "repeats", per_k=True, status="pass_at_k"),
    Declared("pass_hat_k", "pass^{k}", "pass^k", "repeats", per_k=True, status="pass_hat_k"),
)

BY_ATTR = {figure.attr: figure for figure in DECLARED}
SUMMARY = tuple(figure for figure in DECLARED if figure.in_summary)
PER_K = tuple(figure for figure in DECLARED if figure.per_k)
PUBLISHED = tuple(figure for figure in DECLARED if figure.status)
CAPS = {f.interval: f.cap for f in DECLARED if f.cap is not None and not f.per_k}
"""Interval caps by interval key (a per-k figure's key depends on k: none is capped)."""


def summary_columns(has_variants: bool) -> tuple[Declared, ...]:
    """The summary table's figures: those needing variants only where some agent has them."""
    return tuple(f for f in SUMMARY if has_variants or f.needs != "variants")


def capped(key: str, interval: tuple[float, float]) -> tuple[float, float]:
    """``interval`` of the figure whose interval key is ``key``, capped as declared."""
    cap = CAPS.get(key, math.inf)
    return min(cap, interval[0]), min(cap, interval[1])
