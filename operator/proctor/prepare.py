"""The preparation of an evaluation, shared by both engines (`proctor run` and the operator).

    refusals (what neither engine runs yet) -> dataset rows -> items (pure `plan`)

Each engine adds only what its world needs: the one-machine engine finds its agent among
the manifests it was given and checks that each row can run in its sandbox; the operator
finds the agent in the cluster. Neither imports the other.
"""

from __future__ import annotations

from pathlib import Path

from proctor import dataset
from proctor.model import WorkItem
from proctor.plan import PlanInputs, plan
from proctor.spec import PROMPT_SENSITIVITY_UNBUILT, Evaluation


class Refusal(ValueError):
    """The evaluation cannot run as it is; `reason` is one CamelCase word (a condition's
    reason on a cluster), the message says why and what to do."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


def agent_label(evaluation: Evaluation) -> str:
    """Who the results belong to: the agent's name, or where the patches came from."""
    spec = evaluation.spec
    if spec.predictions.source == "agent":
        return spec.agent_ref.name if spec.agent_ref else "agent"
    if spec.predictions.source == "file":
        return f"predictions:{Path(spec.predictions.path or '').name}"
    return spec.predictions.source


def check_runnable(evaluation: Evaluation, on_cluster: bool) -> None:
    """Refuse what this version of Proctor does not run, before any row is read."""
    spec = evaluation.spec
    if spec.prompt_sensitivity.enabled:
        raise Refusal("PromptSensitivityUnsupported", PROMPT_SENSITIVITY_UNBUILT)
    if on_cluster and spec.predictions.source == "file":
        raise Refusal("PredictionsUnsupported", "predictions.source file reads a local "
                      "file, which the operator cannot; use it with `proctor run`")


def load_selection(evaluation: Evaluation) -> dataset.Selection:
    """The rows the evaluation runs on (slow: it may reach the hub; call it off the loop)."""
    ds = evaluation.spec.dataset
    try:
        return dataset.load(ds.name, ds.split, ds.revision, ds.instance_ids, ds.max_rows)
    except dataset.DatasetError as exc:
        raise Refusal("DatasetUnusable", str(exc)) from exc


def plan_items(evaluation: Evaluation, selection: dataset.Selection) -> list[WorkItem]:
    """Every item of the evaluation, in order (pure).

    An item's id hashes its own row, not the selection: more rows (maxRows,
    instanceIds) leave the ids of the rows already run as they were.
    """
    spec = evaluation.spec
    inputs = PlanInputs(dataset=spec.dataset.name, revision=spec.dataset.revision,
                        agent=agent_label(evaluation), repeats=spec.repeats,
                        include_hints=spec.dataset.include_hints)
    return plan(inputs, selection.instances)
