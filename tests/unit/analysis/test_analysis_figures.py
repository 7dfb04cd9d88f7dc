"""The reliability figures are declared once: the report's tables read the declaration."""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np
import pytest

from proctor.analysis.figures import BY_ATTR, DECLARED, PER_K, SUMMARY
from proctor.analysis.markdown import repeat_table, summary_table
from proctor.analysis.reliability import AgentFigures, agent_figures


def figures(variants: int, repeats: int = 3, tasks: int = 6) -> AgentFigures:
    """An agent's figures over seeded 0/1 scores (task, variant, repeat)."""
    scores = (np.random.default_rng(3).random((tasks, variants, repeats)) < 0.5).astype(float)
    return agent_figures("a", scores, resamples=50)[0]


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_every_declared_figure_is_an_attribute_with_an_interval() -> None:
    fig = figures(variants=3)
    attrs = {f.name for f in fields(AgentFigures)}
    for figure in DECLARED:
        assert figure.attr in attrs, figure
        assert figure.interval.format(k=fig.repeats) in fig.intervals, figure
    assert len(BY_ATTR) == len(DECLARED)  # one entry per attribute


def test_every_figure_declared_in_the_summary_has_its_column_and_value() -> None:
    fig = figures(variants=3)
    head, _, row = summary_table([fig])
    assert cells(head) == ["Agent", "Tasks", *(f.label for f in SUMMARY), "Errors left out"]
    for figure, cell in zip(SUMMARY, cells(row)[2:-1], strict=True):
        value = figure.value(fig)
        assert value is not None and math.isfinite(value), figure
        assert cell.startswith(f"{value:.3f} ["), (figure, cell)  # with its interval


def test_without_variants_the_summary_drops_only_the_figures_that_need_them() -> None:
    head = cells(summary_table([figures(variants=1)])[0])
    for figure in SUMMARY:
        assert (figure.label in head) == (figure.needs != "variants"), figure


@pytest.mark.parametrize("repeats", [2, 3])
def test_the_pass_table_has_a_column_per_declared_per_k_figure(repeats: int) -> None:
    fig = figures(variants=1, repeats=repeats)
    lines = repeat_table([fig])
    assert cells(lines[2]) == ["k", *(f.label for f in PER_K)]
    rows = [cells(line) for line in lines[4:4 + repeats]]
    assert [row[0] for row in rows] == [str(k) for k in range(1, repeats + 1)]
    for row in rows:
        for figure, cell in zip(PER_K, row[1:], strict=True):
            assert cell.startswith(f"{getattr(fig, figure.attr)[int(row[0])]:.3f}"), cell
