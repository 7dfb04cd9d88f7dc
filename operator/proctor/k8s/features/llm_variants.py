"""LLM prompt variants on a cluster: the one-off Job that writes them, and what the operator
reads back (pure).

The operator holds no model keys: a Job per Evaluation runs `proctor variants generate`
with the key from the Secret that promptSensitivity.apiKeySecretRef names, and prints
every task's record as one JSON line; the operator reads that line from the pod's log and
proceeds as with template variants. A task whose generation failed runs its original only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from proctor.core.labels import COMPONENT
from proctor.core.plan import Variant
from proctor.core.spec import API_VERSION, Evaluation
from proctor.k8s.children.manifests import owner_labels, runner_image
from proctor.k8s.children.security import (
    TMP_VOLUME,
    container_security_context,
    pod_security_context,
)
from proctor.k8s.machinery.names import owner_part
from proctor.k8s.machinery.objects import Job
from proctor.variants import store

CONDITION = "VariantsReady"
"""The condition that says whether an Evaluation's llm variants are made."""

KEY_ENV = "PROCTOR_VARIANTS_API_KEY"
"""The variable the key reaches `proctor variants generate` in (`llm.settings_for`)."""

DEADLINE_SECONDS = 3600
"""How long the Job may run: a model call per task, each retried, at most this."""



def variants_job_name(evaluation: Evaluation) -> str:
    """The variants Job of an Evaluation: one per Evaluation (promptSensitivity cannot
    change after creation), named so that a restart finds it instead of making another."""
    return f"{owner_part(evaluation.name)}-variants"


def evaluation_manifest(evaluation: Evaluation) -> dict[str, Any]:
    """The Evaluation as a manifest `proctor variants generate -f` reads."""
    return {"apiVersion": API_VERSION, "kind": "Evaluation",
            "metadata": {"name": evaluation.name, "namespace": evaluation.namespace},
            "spec": evaluation.model_dump(mode="json", by_alias=True,
                                          exclude_none=True)["spec"]}


def _env(evaluation: Evaluation, manifest_json: str) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": "PROCTOR_EVALUATION", "value": manifest_json},
                                 {"name": "HOME", "value": "/tmp"},
                                 {"name": "TMPDIR", "value": "/tmp"}]
    ref = evaluation.spec.prompt_sensitivity.api_key_secret_ref
    if ref is not None:  # only the Secret's name passes through the operator, not its value
        env.append({"name": KEY_ENV, "valueFrom": {"secretKeyRef": {"name": ref.name,
                                                                     "key": ref.key}}})
    return env


def variants_job(evaluation: Evaluation, *, runner_version: str,
                 runner_image_default: str | None = None) -> dict[str, Any]:
    """The Job that writes the Evaluation's llm variants and prints them on its log.

    The owner reference is left to ``kopf.adopt``.
    """
    labels = {**owner_labels(evaluation), COMPONENT: "variants"}
    # A shell writes the manifest to the pod's /tmp: the Job needs no ConfigMap of its own.
    script = ('printf "%s" "$PROCTOR_EVALUATION" > "$TMPDIR/evaluation.json" && exec proctor '
              'variants generate -f "$TMPDIR/evaluation.json" --output "$TMPDIR/variants.jsonl" '
              '--print-records')
    container = {
        "name": "variants",
        "image": runner_image(evaluation, runner_version, runner_image_default),
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
        "env": _env(evaluation, json.dumps(evaluation_manifest(evaluation), sort_keys=True)),
        "volumeMounts": [{"name": TMP_VOLUME, "mountPath": "/tmp"}],
        "securityContext": container_security_context("variants"),
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
        "securityContext": pod_security_context(),
        "volumes": [{"name": TMP_VOLUME, "emptyDir": {"sizeLimit": "256Mi"}}],
    }
    if evaluation.spec.runner.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s.name}
                                   for s in evaluation.spec.runner.image_pull_secrets]
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": variants_job_name(evaluation), "namespace": evaluation.namespace,
                     "labels": labels},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": DEADLINE_SECONDS,
                 "template": {"metadata": {"labels": dict(labels)}, "spec": pod}},
    }


@dataclass(frozen=True)
class VariantsState:
    """Where an Evaluation's llm variants stand: the VariantsReady condition's status,
    reason and message, and once ready, each task's variants and the tasks that got none."""

    ready: bool
    reason: str
    message: str
    variants: dict[str, list[Variant]] = field(default_factory=dict)
    failed: tuple[str, ...] = ()


def _job_finished(job: Job) -> str | None:
    for cond in (job.get("status") or {}).get("conditions") or ():
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            return str(cond["type"])
    return None


def variants_state(job: Job | None, log: str | None,
                   task_ids: tuple[str, ...]) -> VariantsState:
    """The variants of `task_ids` from the variants Job and its pod's log (None: not read
    yet). The log is read whether the Job completed or failed: `proctor variants generate`
    exits 1 when some task's generation failed, its records printed still. A log with no
    records line (the model unreachable, the pod gone) leaves every task with its original
    only, as a failed generation does on one machine; the status counts them."""
    if job is None:
        return VariantsState(False, "Creating", "creating the variants Job")
    name = job["metadata"]["name"]
    if _job_finished(job) is None:
        return VariantsState(False, "Generating", f"Job {name} is writing the llm variants")
    if log is None:
        return VariantsState(False, "ReadingLog", f"Job {name} finished; reading its log")
    records = store.records_from_log(log) if log else None
    if records is None:
        return VariantsState(True, "VariantsJobFailed",
                             f"Job {name} wrote no variants; every task runs its original "
                             f"prompt only", failed=tuple(task_ids))
    variants = {iid: v for iid, v in store.variants_of(records).items() if iid in task_ids}
    failed = tuple(iid for iid in task_ids if iid not in variants)
    return VariantsState(True, "Generated",
                         f"{len(variants)} of {len(task_ids)} tasks have llm variants",
                         variants, failed)
