"""Results kept on the cluster: one immutable ConfigMap per finished item (pure).

A result outlives its Job and pod: the operator writes it into a ConfigMap the
Evaluation owns (deleted with it). Without an object store it holds the full RunResult
as JSON and, as binaryData, the patch and the logs (gzip; the test log capped to its head
and tail). With one (spec.results.store, or the operator's default), the item's files
(`item_files`) go to the store and the ConfigMap holds only the small record
(`proctor.store.record.item_record`, about 1 KiB) that points at them; an upload that
failed falls back to the full ConfigMap (`keep_mode`), labelled LABEL_UPLOAD=failed, so no
result is lost; once the store answers, `k8s.backlog` moves such an item to the store and
its record to a ConfigMap of kind RECORD_KIND (the full one is deleted only then). Status
is rebuilt from either kind on every pass, and `proctor results pull` reads both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from proctor.core.labels import (
    COMPONENT,
    LABEL_INSTANCE,
    LABEL_ITEM,
    LABEL_OUTCOME,
    LABEL_UPLOAD,
)
from proctor.core.model import RESULT_SCHEMA_VERSION, RunResult
from proctor.core.result_files import RESULT_FILE, result_files
from proctor.core.spec import Evaluation
from proctor.k8s.children import manifests as m
from proctor.k8s.machinery.names import configmap_name, label_value
from proctor.k8s.machinery.objects import ConfigMap
from proctor.runner.artifacts import unpack
from proctor.store.location import S3Location, parse_s3_url
from proctor.store.record import RECORD_VERSION, result_from_record

RESULT_KIND = "result"
RECORD_KIND = "record"
"""The name's kind of a record made for an item moved from a full ConfigMap: a name apart
from the full one's, so the record exists before the full one is deleted."""
UPLOAD_FAILED = "failed"
RESULT_KEY = RESULT_FILE
RECORD_KEY = "record.json"


class StoreConfig(BaseModel):
    """The object store an Evaluation's artefacts go to, as resolved (`store_of`)."""

    model_config = ConfigDict(frozen=True)

    run: S3Location
    """The Evaluation's own place: `<url>/<namespace>/<evaluation>`."""
    endpoint: str = ""
    """The store's URL; empty: AWS_ENDPOINT_URL, else AWS S3."""


def store_of(evaluation: Evaluation, environ: Mapping[str, str]) -> StoreConfig | None:
    """The store of `evaluation`: its spec.results.store, else the operator's default
    (PROCTOR_RESULTS_STORE_URL and _ENDPOINT, from the chart), else None (ConfigMaps).
    A bad URL is a StoreError naming it."""
    spec = evaluation.spec.results.store
    url = spec.url if spec else environ.get("PROCTOR_RESULTS_STORE_URL", "").strip()
    if not url:
        return None
    default = environ.get("PROCTOR_RESULTS_STORE_ENDPOINT", "").strip()
    endpoint = (spec.endpoint if spec else "") or default
    run = parse_s3_url(url).child(f"{evaluation.namespace}/{evaluation.name}")
    return StoreConfig(run=run, endpoint=endpoint)


def keep_mode(store: StoreConfig | None, upload_error: str | None) -> str:
    """How an item's result is kept: "record" once its files are in the store, else
    "configmap" (no store, or the upload failed: the full result stays in etcd, as
    without a store, so a store that is down loses nothing)."""
    return "record" if store is not None and upload_error is None else "configmap"


def item_files(result: RunResult, artifacts: Mapping[str, str] | None) -> dict[str, bytes]:
    """An item's files as its work folder holds them after `proctor results pull`: the
    kept artefacts unpacked (x.gz -> x), result.json and report.json. The same bytes
    go to the store and to the folder a ConfigMap is pulled into."""
    files = {name.removesuffix(".gz"): unpack(packed)
             for name, packed in (artifacts or {}).items()}
    log = files.get("test_output.txt")  # swebench classifies infra failures from it
    files.update(result_files(result, log.decode(errors="replace") if log else None))
    return files


def result_labels(evaluation: Evaluation) -> dict[str, str]:
    """The labels that select every kept result of an Evaluation."""
    return {**m.owner_labels(evaluation), COMPONENT: RESULT_KIND}


def result_configmap(evaluation: Evaluation, result: RunResult,
                     artifacts: Mapping[str, str] | None = None, *,
                     upload_failed: bool = False, kind: str = RESULT_KIND) -> dict[str, Any]:
    """The ConfigMap that keeps one item's result and its files; ``upload_failed``: kept
    in full because its upload failed (labelled, the backlog `k8s.backlog` moves)."""
    labels = {COMPONENT: RESULT_KIND, LABEL_ITEM: result.item_id,
              LABEL_INSTANCE: label_value(result.instance_id),
              LABEL_OUTCOME: result.outcome.value}
    if upload_failed:
        labels[LABEL_UPLOAD] = UPLOAD_FAILED
    name = configmap_name(evaluation.name, kind, result.item_id)
    body = m.immutable_configmap(evaluation, name, labels, {RESULT_KEY: result.model_dump_json()})
    if artifacts:
        body["binaryData"] = dict(artifacts)
    return body


def record_configmap(evaluation: Evaluation, result: RunResult,
                     record: Mapping[str, Any], kind: str = RESULT_KIND) -> dict[str, Any]:
    """The ConfigMap that keeps one item's record, its files being in the store: the
    same name and labels as `result_configmap`, so either kind is found alike (``kind``
    RECORD_KIND: the name of one moved from a full ConfigMap)."""
    body = result_configmap(evaluation, result, kind=kind)
    body["data"] = {RECORD_KEY: json.dumps(record, separators=(",", ":"))}
    return body


def read_record(configmap: ConfigMap) -> dict[str, Any] | None:
    """The record a ConfigMap keeps (its files in the store), or None."""
    text = (configmap.get("data") or {}).get(RECORD_KEY)
    try:
        record = json.loads(text) if text else None
    except ValueError:
        return None
    # Without these it points at nothing: read as no record, as a junk result is none.
    usable = isinstance(record, dict) and isinstance(record.get("objects"), dict) and \
        all(isinstance(record.get(k), str) for k in ("bucket", "prefix", "item"))
    return record if usable else None


def read_result(configmap: ConfigMap) -> RunResult | None:
    """The result a ConfigMap keeps (of a record: as far as it tells, `result_from_record`),
    or None if it keeps none that can be read (the operator's index must not stall on one
    bad object)."""
    text = (configmap.get("data") or {}).get(RESULT_KEY)
    try:
        if text:
            return RunResult.model_validate_json(text)
        record = read_record(configmap)
        return result_from_record(record) if record is not None else None
    except (ValueError, KeyError, TypeError):  # pydantic's ValidationError is a ValueError
        return None


def newer_schema(configmap: ConfigMap) -> int | None:
    """The schema version of a kept result (or record) newer than this Proctor reads (a
    newer operator wrote it), else None: such a result is unreadable here, not absent."""
    data = configmap.get("data") or {}
    text = data.get(RESULT_KEY)
    try:
        if text:
            version = json.loads(text).get("schema_version")
        else:
            record = read_record(configmap) or {}
            version = record.get("result_v")
            if isinstance(record.get("v"), int) and record["v"] > RECORD_VERSION:
                version = max(record["v"], RESULT_SCHEMA_VERSION + 1)
    except (ValueError, AttributeError):  # not JSON, or not an object
        return None
    newer = isinstance(version, int) and version > RESULT_SCHEMA_VERSION
    return version if newer else None


def upload_failed(configmap: ConfigMap) -> bool:
    """Whether a ConfigMap keeps a result in full because its upload failed."""
    labels = (configmap.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_UPLOAD) == UPLOAD_FAILED and RESULT_KEY in (
        configmap.get("data") or {})

