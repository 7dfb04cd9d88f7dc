"""An Evaluation's items, Jobs and pods as a reconcile pass observes them (pure builders):
five items, their Jobs and pods at a fixed NOW, and the views `reconcile.observe` makes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from proctor.core.labels import LABEL_ATTEMPT, LABEL_ITEM
from proctor.core.model import Outcome, RunResult, WorkItem
from proctor.formats.manifest import parse_resource
from proctor.k8s.children.podstatus import PodsByJob, item_state
from proctor.k8s.evaluation import reconcile
from proctor.k8s.evaluation.reconcile import ItemView

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def observe(items: list[WorkItem], jobs: list[dict], pods: list[dict], events: list[dict],
            kept: dict[str, RunResult]) -> list[ItemView]:
    """`reconcile.observe`, each Job's state read from these pods and events."""
    by_job = PodsByJob(pods)
    return reconcile.observe(items, jobs, kept,
                             lambda job: item_state(job, by_job.of(job), events))


def ts(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def evaluation(**spec):
    body = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
            "metadata": {"name": "ev"},
            "spec": {"dataset": {"name": "proctor-demo"}, "predictions": {"source": "gold"},
                     "maxConcurrentRows": 2, **spec}}
    return parse_resource(body)


ITEMS = [WorkItem(id=f"{i:x}" * 32, instance_id=f"t-{i}") for i in range(1, 6)]


def job(item: WorkItem, attempt: int = 0, *conditions: str, reason: str = "") -> dict:
    return {"metadata": {"name": f"ev-{item.id[:16]}", "uid": f"u-{item.id}-{attempt}",
                         "creationTimestamp": ts(100),
                         "labels": {LABEL_ITEM: item.id, LABEL_ATTEMPT: str(attempt)}},
            "status": {"conditions": [{"type": c, "status": "True", "reason": reason,
                                       "lastTransitionTime": ts(10)} for c in conditions]}}


def pod_for(j: dict, phase: str, **status) -> dict:
    return {"metadata": {"name": j["metadata"]["name"] + "-abcde",
                         "labels": {"controller-uid": j["metadata"]["uid"],
                                    "job-name": j["metadata"]["name"]},
                         "ownerReferences": [{"kind": "Job", "uid": j["metadata"]["uid"],
                                              "name": j["metadata"]["name"]}]},
            "spec": {"nodeName": "node-1"}, "status": {"phase": phase, **status}}


def pulling(j: dict, since: float) -> dict:
    waiting = {"name": "pull", "image": "img", "imageID": "", "ready": False,
               "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff",
                                                        "message": "Back-off pulling"}}}
    return pod_for(j, "Pending", startTime=ts(since), initContainerStatuses=[waiting])


def result(item: WorkItem, outcome=Outcome.RESOLVED) -> RunResult:
    return RunResult(item_id=item.id, instance_id=item.instance_id, outcome=outcome)
