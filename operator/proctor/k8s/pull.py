"""`proctor results pull`: a cluster Evaluation's kept results, as a local results folder.

It writes the folder `proctor run` writes (spec.json, results.jsonl, summary.json,
report.md, variants.jsonl with promptSensitivity, items/<instance>/<variant>/<repeat>/
with patch.diff, test_output.txt, apply.log, result.json, report.json), so every report
and analysis works on cluster runs too. A result kept as a record (its files in the object
store) is fetched from the store and checked against the record's digests: the folder is
the same either way.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from urllib3.exceptions import HTTPError

from proctor import __version__
from proctor.core.exits import BadInput, NotRun
from proctor.core.labels import COMPONENT
from proctor.core.model import RESULT_SCHEMA_VERSION, RunResult, WorkItem
from proctor.core.result_files import RESULT_FILE
from proctor.core.spec import Evaluation
from proctor.formats import agentbeats
from proctor.formats.manifest import parse_kind
from proctor.k8s.children.manifests import owner_labels, task_variants
from proctor.k8s.children.store import (
    item_files,
    newer_schema,
    read_record,
    read_result,
    result_labels,
)
from proctor.k8s.machinery.api import Kube, load_config
from proctor.k8s.machinery.objects import ConfigMap
from proctor.prepare import Refusal, load_selection
from proctor.results import ResultsFolder, write_outputs
from proctor.store.record import object_keys
from proctor.variants import write_variants


class PullError(BadInput):
    """The Evaluation cannot be pulled; the message says why."""


Files = dict[str, bytes]
Fetch = Callable[[list[Mapping[str, Any]]], list[Files]]
"""The files of each record, from the object store (`store_fetch`)."""


def kept_files(configmaps: Iterable[ConfigMap], fetch: Fetch | None
               ) -> list[tuple[RunResult, Files]]:
    """Each kept result with its item's files: from the ConfigMap itself, or, for a
    record, from the store (`fetch`; its full result is the stored result.json). Read
    whole before anything is written, so that a store that fails leaves the folder as it
    was."""
    kept: list[tuple[RunResult, Files]] = []
    records: list[Mapping[str, Any]] = []
    for cm in configmaps:
        if (record := read_record(cm)) is not None:
            records.append(record)
        elif (result := read_result(cm)) is not None:
            kept.append((result, item_files(result, cm.get("binaryData"))))
    # An operator stopped while moving an item to the store leaves its full ConfigMap
    # beside the record (`store_backlog`): the full one is read, once.
    full = {result.item_id for result, _ in kept}
    records = [r for r in records if r["item"] not in full]
    if records and fetch is None:
        raise PullError(f"{len(records)} results are in an object store, and none is "
                        f"configured")
    for stored, files in zip(records, fetch(records) if records and fetch else [],
                             strict=True):
        try:
            kept.append((RunResult.model_validate_json(files[RESULT_FILE]), files))
        except (KeyError, ValueError):
            raise PullError(f"item {stored.get('item')}: its stored {RESULT_FILE} is "
                            f"missing or unreadable") from None
    return sorted(kept, key=lambda rf: (rf[0].instance_id, rf[0].variant_id, rf[0].repeat))


def write_folder(evaluation: Evaluation, configmaps: Iterable[ConfigMap],
                 out: Path, fetch: Fetch | None = None) -> int:
    """Write the results folder; the number of results written."""
    kept = kept_files(configmaps, fetch)
    folder = ResultsFolder(out)
    folder.claim({"evaluation": evaluation.name, "source": "cluster",
                  "spec": evaluation.spec.model_dump(mode="json", by_alias=True)})
    folder.results_path.unlink(missing_ok=True)  # pulled afresh: the cluster is the truth
    for result, files in kept:
        work = folder.work_dir(WorkItem(id=result.item_id, instance_id=result.instance_id,
                                        variant_id=result.variant_id, repeat=result.repeat))
        work.root.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (work / name).write_bytes(data)
        folder.append(result)
    return len(kept)


def check_digests(record: Mapping[str, Any], files: Files) -> None:
    """Each stored file as its record says it was (sha256), else a PullError."""
    for name, meta in record["objects"].items():
        if hashlib.sha256(files.get(name, b"")).hexdigest() != meta.get("sha256"):
            raise PullError(f"item {record.get('item')}: the stored {name} is not the file "
                            f"the operator uploaded (sha256 differs, or it is gone)")


def store_fetch(endpoint: str | None) -> Fetch:
    """Fetch records' files from the store at `endpoint` (None: AWS_ENDPOINT_URL, else
    AWS S3), with this machine's credentials; each file checked against its digest."""
    def fetch(records: list[Mapping[str, Any]]) -> list[Files]:
        from proctor.store import s3  # boto3 is loaded only when a store is used

        client = s3.client(endpoint)
        by_bucket: dict[str, list[str]] = {}
        for record in records:
            by_bucket.setdefault(record["bucket"], []).extend(object_keys(record).values())
        found = {(bucket, key): data for bucket, keys in by_bucket.items()
                 for key, data in s3.fetch_objects(client, bucket, keys).items()}
        out = []
        for record in records:
            files = {name: found[(record["bucket"], key)]
                     for name, key in object_keys(record).items()}
            check_digests(record, files)
            out.append(files)
        return out
    return fetch


def participant_id(evaluation: Evaluation) -> str:
    """The participant's id in agentbeats-results.json: its AgentUnderTest, as
    namespace/name, or where the patches came from."""
    spec = evaluation.spec
    if spec.predictions.source == "agent" and spec.agent_ref:
        return f"{evaluation.namespace}/{spec.agent_ref.name}"
    return Path(spec.predictions.path).name if spec.predictions.path else spec.predictions.source


def pull(kube: Kube, namespace: str, name: str, out: Path, s3_endpoint: str | None = None
         ) -> int:
    """Pull one Evaluation's results into `out`; the number of results. Records' files
    come from the store at `s3_endpoint`, else the Evaluation's spec.results.store
    endpoint, else AWS_ENDPOINT_URL (else AWS S3)."""
    body = kube.get_evaluation(namespace, name)
    if body is None:
        raise PullError(f"Evaluation {name!r} not found in namespace {namespace}")
    evaluation = parse_kind(body, Evaluation)
    configmaps = kube.list_configmaps(namespace, result_labels(evaluation))["items"]
    newer = [v for cm in configmaps if (v := newer_schema(cm)) is not None]
    if newer:  # before the folder is touched: what it holds stays as it was
        raise PullError(f"{len(newer)} results of Evaluation {namespace}/{name} are of "
                        f"schema version {max(newer)}, newer than this proctor "
                        f"({__version__}) reads (up to {RESULT_SCHEMA_VERSION}); upgrade "
                        f"proctor to pull them ({out} was left as it was)")
    store = evaluation.spec.results.store
    endpoint = s3_endpoint or (store.endpoint if store else "") or None
    count = write_folder(evaluation, configmaps, out, store_fetch(endpoint))
    if evaluation.spec.prompt_sensitivity.enabled:
        # variants.jsonl, as `proctor run` writes it, from the texts the Jobs were given:
        # the analysis reads each variant's hash and similarity from it.
        tasks = kube.list_configmaps(namespace, {**owner_labels(evaluation), COMPONENT: "task"})
        write_variants(out, *task_variants(tasks["items"]))
    try:
        instances = load_selection(evaluation).by_id
    except Refusal:
        instances = {}  # figures still come out; only tests_left_out needs the rows
    planned = ((body.get("status") or {}).get("items") or {}).get("total", count)
    summary = write_outputs(ResultsFolder(out), evaluation, instances, planned)
    agentbeats.write_results(out, summary, evaluation, participant_id(evaluation))
    return count


def pull_from_cluster(namespace: str, name: str, out: Path, s3_endpoint: str | None = None
                      ) -> int:
    """`pull` from the cluster of the kubeconfig (or the pod's service account): no
    cluster configured is bad input (exit 2); one that does not answer, or refuses, is
    NotRun (exit 3); each one line."""
    try:
        load_config()
    except (ConfigException, OSError, ValueError) as exc:  # ValueError: a junk kubeconfig
        where = os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise PullError(f"no cluster to pull from (kubeconfig {where}): {exc}") from None
    try:
        return pull(Kube(), namespace, name, out, s3_endpoint)
    except ApiException as exc:
        raise NotRun(f"the cluster refused to list Evaluation {namespace}/{name}'s results: "
                     f"{exc.status} {exc.reason}") from None
    except HTTPError as exc:
        raise NotRun(f"cannot reach the cluster: {exc}") from None
