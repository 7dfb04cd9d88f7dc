"""The reliability figures of an Evaluation's status and metrics (pure).

They are `proctor analyze`'s figures: the same functions (`proctor.analysis.reliability`)
on the scores array built the same way (`proctor.analysis.load.score_rows`), with the same
seed and resamples, so the status and `proctor analyze` of the pulled results agree.

Bounded whatever the number of tasks: a fixed set of figures, each with its 95% interval,
and at most TOP_TASKS tasks (the most prompt-sensitive). A figure the run cannot give is
absent, never 0: C_out, pass@k and pass^k need 2 repeats or more; S_prompt (both readings)
and R_prompt need prompt variants. What each figure needs, its estimator and its interval
come from the one declaration of the figures (`proctor.analysis.figures.DECLARED`, its
entries with a `status`); its name and help are a field of `Reliability` here (the status
keys, camelCase, and the metric names and help texts: `metric_name`, the field
descriptions), which a test holds to the declaration.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from proctor.analysis.figures import PUBLISHED, Needs
from proctor.analysis.load import score_rows
from proctor.analysis.reliability import AgentFigures, agent_figures, scores_array
from proctor.core.model import Outcome, RunResult

TOP_TASKS = 5
DIGITS = 4
"""Figures are rounded: the status stays small, and 1e-4 is far under any interval."""


class _Camel(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)


class Estimate(_Camel):
    """A figure and its 95% interval (a seeded bootstrap over tasks)."""

    value: float
    low: float | None = None
    """None where the interval is undefined (too few tasks for it)."""
    high: float | None = None


class SensitiveTask(_Camel):
    """One of the tasks whose score moved most with the wording of its prompt."""

    task: str
    variance: float = Field(description="Variance of a task's mean score across its prompt "
                            "variants (the original included): 0 when the wording never "
                            "mattered")
    min_max_gap: float
    """Best variant's mean score minus the worst's."""


class Reliability(_Camel):
    """The reliability figures of one Evaluation, over its results so far."""

    tasks: int = Field(description="Tasks with a scored result (items in error are left "
                       "out of the reliability figures)")
    variants: int = Field(description="Prompts per task in the results, the original "
                          "included")
    repeats: int = Field(description="Repeats per prompt in the results: the k of pass@k "
                         "and pass^k")
    s_prompt: Estimate | None = Field(None, description="Prompt sensitivity S_prompt, 1 - "
                                      "mean over tasks of the variance of variant mean "
                                      "scores (HAL's formula; rises with repeats)")
    s_prompt_per_run: Estimate | None = Field(None, description="S_prompt read per run "
                                              "(HAL's per-run reading, the headline: does "
                                              "not move with the number of repeats)")
    r_prompt: Estimate | None = Field(None, description="Prompt robustness R_prompt, "
                                      "accuracy on variants over accuracy on originals, "
                                      "capped at 1")
    c_out: Estimate | None = Field(None, description="Outcome consistency C_out over "
                                   "repeats of the original prompt: 1 when every task "
                                   "always or never resolves")
    pass_at_k: Estimate | None = Field(None, description="pass@k, k = repeats: chance that "
                                       "at least one of k repeats resolves a task")
    pass_hat_k: Estimate | None = Field(None, description="pass^k, k = repeats: chance that "
                                        "all k repeats resolve a task")
    most_sensitive_tasks: list[SensitiveTask] = Field(default_factory=list,
                                                      max_length=TOP_TASKS)
    """The TOP_TASKS tasks of highest variance across variants (empty without variants)."""


ESTIMATES = tuple(name for name, info in Reliability.model_fields.items()
                  if Estimate in get_args(info.annotation))
"""The fields that are figures with an interval."""
COUNTS = ("tasks", "variants", "repeats")


class Figure(NamedTuple):
    """How one of Reliability's estimates is read from `proctor analyze`'s figures."""

    needs: Needs
    """What the run must have for the figure: prompt variants, or 2 repeats or more."""
    interval: str
    """Its interval's key in AgentFigures.intervals; ``{k}`` stands for the repeats."""
    estimator: Callable[[AgentFigures], float | None]
    """Its value in `proctor analyze`'s figures of the agent."""


FIGURES: dict[str, Figure] = {
    # Each field of Reliability that is an Estimate (a test holds the two to each other):
    # its name, help and type are the field's, the rest is the declaration's.
    figure.status: Figure(figure.needs, figure.interval, figure.value)
    for figure in PUBLISHED if figure.status
}


def metric_name(field: str) -> str:
    """`s_prompt` -> `proctor_reliability_s_prompt`; `variance` (of a sensitive task) ->
    `proctor_reliability_task_variance`."""
    return "proctor_reliability_" + ("task_variance" if field == "variance" else field)


def _rounded(x: float | None) -> float | None:
    return round(x, DIGITS) if x is not None and math.isfinite(x) else None


def _estimate(value: float | None, interval: tuple[float, float] | None) -> Estimate | None:
    if value is None or not math.isfinite(value):
        return None
    low, high = interval or (math.nan, math.nan)
    return Estimate(value=_rounded(value), low=_rounded(low), high=_rounded(high))


def _most_sensitive(per: dict[str, np.ndarray], tasks: list[str]) -> list[SensitiveTask]:
    """Highest variance first, ties by task id; tasks with 2 scored variants or more."""
    ok = [i for i in np.flatnonzero(per["sens_valid"]) if per["variance"][i] > 0]
    ok.sort(key=lambda i: (-per["variance"][i], tasks[i]))
    return [SensitiveTask(task=tasks[i], variance=_rounded(float(per["variance"][i])),
                          min_max_gap=_rounded(float(per["min_max_gap"][i])))
            for i in ok[:TOP_TASKS]]


def reliability(agent: str, results: Sequence[RunResult]) -> Reliability | None:
    """The figures over ``results`` (each item's kept result); None before any scored one."""
    scores, tasks, _ = scores_array(score_rows(results))
    if np.isnan(scores).all():
        return None
    errors = sum(r.outcome == Outcome.ERROR for r in results)
    fig, per = agent_figures(agent, scores, errors=errors)
    k, has_variants = fig.repeats, fig.variants > 1
    shown = {"always": True, "variants": has_variants, "repeats": k >= 2}
    scored = int(np.sum(~np.isnan(scores).all(axis=(1, 2))))
    return Reliability(tasks=scored, variants=fig.variants, repeats=k,
                       most_sensitive_tasks=_most_sensitive(per, tasks) if has_variants
                       else [],
                       **{name: _estimate(figure.estimator(fig),
                                          fig.intervals.get(figure.interval.format(k=k)))
                          for name, figure in FIGURES.items() if shown[figure.needs]})


def status_of(figures: Reliability) -> dict[str, Any]:
    """The status's `reliability`: camelCase, absent figures (and no tasks) left out."""
    return {key: value for key, value in figures.model_dump(by_alias=True,
                                                            exclude_none=True).items()
            if value != []}
