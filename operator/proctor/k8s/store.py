"""Results kept on the cluster: one immutable ConfigMap per finished item (pure).

A result outlives its Job and pod: the operator writes it into a ConfigMap the
Evaluation owns (deleted with it), holding the full RunResult as JSON and, as
binaryData, the patch and the logs (gzip; the test log capped to its head and tail).
Status is rebuilt from these on every pass, and `proctor results pull` reads them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from proctor.core.labels import COMPONENT, LABEL_INSTANCE, LABEL_ITEM, LABEL_OUTCOME
from proctor.core.model import RESULT_SCHEMA_VERSION, RunResult
from proctor.core.spec import Evaluation
from proctor.k8s import manifests as m
from proctor.k8s.names import configmap_name, label_value

RESULT_KIND = "result"
RESULT_KEY = "result.json"


def result_labels(evaluation: Evaluation) -> dict[str, str]:
    """The labels that select every kept result of an Evaluation."""
    return {**m.owner_labels(evaluation), COMPONENT: RESULT_KIND}


def result_configmap(evaluation: Evaluation, result: RunResult,
                     artifacts: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ConfigMap that keeps one item's result and its files."""
    labels = {COMPONENT: RESULT_KIND, LABEL_ITEM: result.item_id,
              LABEL_INSTANCE: label_value(result.instance_id),
              LABEL_OUTCOME: result.outcome.value}
    name = configmap_name(evaluation.name, RESULT_KIND, result.item_id)
    body = m.immutable_configmap(evaluation, name, labels, {RESULT_KEY: result.model_dump_json()})
    if artifacts:
        body["binaryData"] = dict(artifacts)
    return body


def read_result(configmap: Mapping[str, Any]) -> RunResult | None:
    """The result a ConfigMap keeps, or None if it keeps none that can be read (the
    operator's index must not stall on one bad object)."""
    text = (configmap.get("data") or {}).get(RESULT_KEY)
    try:
        return RunResult.model_validate_json(text) if text else None
    except ValueError:  # pydantic's ValidationError, for JSON or fields alike
        return None


def newer_schema(configmap: Mapping[str, Any]) -> int | None:
    """The schema version of a kept result newer than this Proctor reads (a newer operator
    wrote it), else None: such a result is unreadable here, not absent."""
    text = (configmap.get("data") or {}).get(RESULT_KEY)
    try:
        version = json.loads(text).get("schema_version") if text else None
    except (ValueError, AttributeError):  # not JSON, or not an object
        return None
    newer = isinstance(version, int) and version > RESULT_SCHEMA_VERSION
    return version if newer else None
