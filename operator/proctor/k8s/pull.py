"""`proctor results pull`: a cluster Evaluation's kept results, as a local results folder.

It writes the folder `proctor run` writes (spec.json, results.jsonl, summary.json,
report.md, variants.jsonl with promptSensitivity, items/<instance>/<variant>/<repeat>/
with patch.diff, test_output.txt, apply.log, result.json, report.json), so every report
and analysis works on cluster runs too.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from urllib3.exceptions import HTTPError

from proctor import __version__
from proctor.core.exits import BadInput, NotRun
from proctor.core.labels import COMPONENT
from proctor.core.model import RESULT_SCHEMA_VERSION, WorkItem
from proctor.core.spec import Evaluation
from proctor.formats import agentbeats
from proctor.formats.manifest import parse_kind
from proctor.formats.report_json import report_json
from proctor.k8s.api import Kube, load_config
from proctor.k8s.manifests import owner_labels, task_variants
from proctor.k8s.store import newer_schema, read_result, result_labels
from proctor.prepare import Refusal, load_selection
from proctor.results import ResultsFolder, write_outputs
from proctor.runner.artifacts import unpack
from proctor.runner.workdir import write_json
from proctor.variants import write_variants


class PullError(BadInput):
    """The Evaluation cannot be pulled; the message says why."""


def write_folder(evaluation: Evaluation, configmaps: Iterable[Mapping[str, Any]],
                 out: Path) -> int:
    """Write the results folder; the number of results written."""
    folder = ResultsFolder(out)
    folder.claim({"evaluation": evaluation.name, "source": "cluster",
                  "spec": evaluation.spec.model_dump(mode="json", by_alias=True)})
    folder.results_path.unlink(missing_ok=True)  # pulled afresh: the cluster is the truth
    kept = [(result, cm) for cm in configmaps if (result := read_result(cm)) is not None]
    kept.sort(key=lambda rc: (rc[0].instance_id, rc[0].variant_id, rc[0].repeat))
    for result, cm in kept:
        work = folder.work_dir(WorkItem(id=result.item_id, instance_id=result.instance_id,
                                        variant_id=result.variant_id, repeat=result.repeat))
        work.root.mkdir(parents=True, exist_ok=True)
        files = {name.removesuffix(".gz"): unpack(packed)  # x.gz -> x
                 for name, packed in (cm.get("binaryData") or {}).items()}
        for name, data in files.items():
            (work / name).write_bytes(data)
        write_json(work / "result.json", result.model_dump(mode="json"))
        log = files.get("test_output.txt")  # swebench classifies infra failures from it
        write_json(work / "report.json",
                   report_json(result, log.decode(errors="replace") if log else None))
        folder.append(result)
    return len(kept)


def participant_id(evaluation: Evaluation) -> str:
    """The participant's id in agentbeats-results.json: its AgentUnderTest, as
    namespace/name, or where the patches came from."""
    spec = evaluation.spec
    if spec.predictions.source == "agent" and spec.agent_ref:
        return f"{evaluation.namespace}/{spec.agent_ref.name}"
    return Path(spec.predictions.path).name if spec.predictions.path else spec.predictions.source


def pull(kube: Kube, namespace: str, name: str, out: Path) -> int:
    """Pull one Evaluation's results into `out`; the number of results."""
    body = kube.get_custom("evaluations", namespace, name)
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
    count = write_folder(evaluation, configmaps, out)
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


def pull_from_cluster(namespace: str, name: str, out: Path) -> int:
    """`pull` from the cluster of the kubeconfig (or the pod's service account): no
    cluster configured is bad input (exit 2); one that does not answer, or refuses, is
    NotRun (exit 3); each one line."""
    try:
        load_config()
    except (ConfigException, OSError, ValueError) as exc:  # ValueError: a junk kubeconfig
        where = os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise PullError(f"no cluster to pull from (kubeconfig {where}): {exc}") from None
    try:
        return pull(Kube(), namespace, name, out)
    except ApiException as exc:
        raise NotRun(f"the cluster refused to list Evaluation {namespace}/{name}'s results: "
                     f"{exc.status} {exc.reason}") from None
    except HTTPError as exc:
        raise NotRun(f"cannot reach the cluster: {exc}") from None
