"""The preparation of an evaluation, shared by both engines (`proctor run` and the operator).

    refusals (what neither engine runs yet) -> dataset rows -> items (pure `plan`)

Each engine adds only what its world needs: the one-machine engine finds its agent among
the manifests it was given and checks that each row can run in its sandbox; the operator
finds the agent in the cluster. Neither imports the other.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from proctor import datasets
from proctor.core.exits import BadInput
from proctor.core.model import WorkItem
from proctor.core.plan import PlanInputs, Variant, plan, shard
from proctor.core.spec import (
    VARIANTS_FILE_ON_CLUSTER,
    Evaluation,
)
from proctor.variants import MAX_VARIATIONS, store, variants_for
from proctor.variants.llm import settings_for


class Refusal(BadInput):
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


PREDICTIONS_FILE_ON_CLUSTER = ("predictions.source file reads a local file, which the "
                               "operator cannot; use it with `proctor run`")
"""The operator's refusal of a predictions file (the chart's admission policy says it too)."""


def check_runnable(evaluation: Evaluation, on_cluster: bool) -> None:
    """Refuse what this version of Proctor does not run, before any row is read."""
    spec = evaluation.spec
    _check_prompt_sensitivity(evaluation, on_cluster)
    if on_cluster and spec.predictions.source == "file":
        raise Refusal("PredictionsUnsupported", PREDICTIONS_FILE_ON_CLUSTER)


def _check_prompt_sensitivity(evaluation: Evaluation, on_cluster: bool) -> None:
    sensitivity = evaluation.spec.prompt_sensitivity
    if not sensitivity.enabled:
        return
    # The operator makes template variants in-process (pure, no key, no file), and llm
    # ones in a Job of their own (`k8s.variants_job`: the key stays in its Secret); a
    # variants file is on the user's machine (docs/kubernetes.md).
    if on_cluster and sensitivity.variants_file:
        raise Refusal("PromptSensitivityUnsupported", VARIANTS_FILE_ON_CLUSTER)
    if sensitivity.strategy != "template":
        return
    if sensitivity.num_variations > MAX_VARIATIONS:
        raise Refusal("PromptSensitivityUnsupported",
                      f"promptSensitivity.numVariations is {sensitivity.num_variations}, but "
                      f"the template strategy writes at most {MAX_VARIATIONS} distinct "
                      f"variants per task; ask for {MAX_VARIATIONS} or fewer")


def variants_model(evaluation: Evaluation) -> str:
    """The litellm model that writes llm variants: promptSensitivity.model, else
    greenAgentModel."""
    spec = evaluation.spec
    return spec.prompt_sensitivity.model or spec.green_agent_model


def variants_store(evaluation: Evaluation) -> Path:
    """Where stored variants are kept: promptSensitivity.variantsFile, else the user's
    cache (where only llm variants go: template ones need no store)."""
    named = evaluation.spec.prompt_sensitivity.variants_file
    return Path(named).expanduser() if named else store.default_path()


def _source(evaluation: Evaluation) -> store.Source:
    if evaluation.spec.prompt_sensitivity.strategy == "llm":
        return store.llm_source(settings_for(variants_model(evaluation),
                                             evaluation.spec.prompt_sensitivity.api_base))
    return store.TEMPLATE


def stored_variants(evaluation: Evaluation, selection: datasets.Selection, *,
                    store_path: Path | None = None, retry_failed: bool = False,
                    progress: store.Progress | None = None) -> dict[str, dict]:
    """Each task's variants record of the Evaluation's strategy (stored, else written and
    stored); stops with ModelUnreachable (exit 3) before anything runs when the llm
    strategy's model cannot be reached."""
    spec = evaluation.spec
    try:
        return store.ensure(store_path or variants_store(evaluation), selection.instances,
                            datasets.names.hub_id(spec.dataset.name),
                            spec.dataset.revision or "", _source(evaluation),
                            spec.prompt_sensitivity.num_variations,
                            retry_failed=retry_failed, progress=progress)
    except store.StoreError as exc:
        raise Refusal("VariantsFileUnusable", str(exc)) from exc


def prompt_variants(evaluation: Evaluation, selection: datasets.Selection,
                    progress: store.Progress | None = None) -> dict[str, list[Variant]]:
    """Each task's reworded problem statements (none unless promptSensitivity is on; a
    task whose llm generation failed gets none, never the original in their place).
    Template variants come from the variantsFile when one is named, the same texts."""
    sensitivity = evaluation.spec.prompt_sensitivity
    if not sensitivity.enabled:
        return {}
    if sensitivity.strategy == "llm" or sensitivity.variants_file:
        return store.variants_of(stored_variants(evaluation, selection, progress=progress))
    return variants_for(selection.instances, sensitivity.num_variations)


def load_selection(evaluation: Evaluation) -> datasets.Selection:
    """The rows the evaluation runs on (slow: it may reach the hub; call it off the loop)."""
    ds = evaluation.spec.dataset
    try:
        selection = datasets.load(ds.name, ds.split, ds.revision, ds.instance_ids, ds.max_rows)
    except datasets.DatasetError as exc:
        raise Refusal("DatasetUnusable", str(exc)) from exc
    if ds.shard is None:
        return selection
    rows = tuple(shard(selection.instances, ds.shard.index, ds.shard.count))
    return dataclasses.replace(selection, instances=rows, fingerprint=datasets.fingerprint(rows))


def plan_items(evaluation: Evaluation, selection: datasets.Selection,
               variants: dict[str, list[Variant]] | None = None) -> list[WorkItem]:
    """Every item of the evaluation, in order (pure): task x (original + variants) x repeat.

    An item's id hashes its own row, not the selection: more rows (maxRows,
    instanceIds) leave the ids of the rows already run as they were.
    """
    spec = evaluation.spec
    # `lite` and `SWE-bench/SWE-bench_Lite` are one dataset: their items are the same items.
    inputs = PlanInputs(dataset=datasets.names.hub_id(spec.dataset.name),
                        revision=spec.dataset.revision, agent=agent_label(evaluation),
                        repeats=spec.repeats,
                        include_hints=spec.dataset.include_hints)
    return plan(inputs, selection.instances, variants)
