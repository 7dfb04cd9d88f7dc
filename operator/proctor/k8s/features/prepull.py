"""Pulling an Evaluation's task images before any of its items starts (pure).

With ``spec.images.prePull``, the operator makes one Job per distinct task image, at most
``prePullParallelism`` pulling at once; its pod runs the image's own ``true`` (as an item's
pull step does), so the kubelet pulls the image onto the node the scheduler picked. No item
starts until every image's Job has ended: pulled, or failed.

A failed pull does not hold the Evaluation back. Its Job failed (past its deadline, say),
or its pod kept failing to pull past the operator's image pull timeout: the image may be
missing, or the registry down for a while. Waiting for it would hold every other item
back, with no end; instead the items of that task run as any item does, and their own pull
step meets the same problem: retried as an infrastructure failure, then kept as an
``infra`` error naming it. The status counts the failed images, and ImagesPulled is False
with reason PullFailed.

What this gives: on one node, every image is there before the first item starts. On many
nodes, each image is pulled on one node (the scheduler's pick, as for any pod), and the
task's items then prefer that node (a preferred node affinity, as a retry prefers the node
that ran its task before); a node with no room left takes none (the scheduler honours the
disk-pressure taint). Pulling each image on every node would need a DaemonSet per image;
a Verified run would then hold every image on every node, which is what fills disks.

Once an item has started, the pre-pull is over: nothing is pulled again, and the operator
deletes the pull Jobs with their pods, whose exited containers would otherwise keep every
image in use, out of reach of the kubelet's image garbage collection, for as long as the
Evaluation lives. The status then keeps the pre-pull's last counts and condition.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from proctor.core.images import instance_image
from proctor.core.labels import COMPONENT
from proctor.core.model import Instance, WorkItem
from proctor.core.spec import Evaluation
from proctor.k8s.children.manifests import DEFAULT_ARCH, PULL_RESOURCES, JobDefaults, owner_labels
from proctor.k8s.children.podstatus import DISK_PRESSURE, Phase, item_state, seconds_since
from proctor.k8s.children.security import container_security_context, pod_security_context
from proctor.k8s.machinery.names import owner_part
from proctor.k8s.machinery.objects import Event, Job, Pod

CONDITION = "ImagesPulled"
"""The condition that says whether an Evaluation's task images are pulled."""
COMPONENT_VALUE = "pre-pull"
"""The component label of pull Jobs and their pods."""
ANNOTATION_IMAGE = "proctor.dev/image"
"""The image a pull Job pulls (an image name is no label value)."""
DEADLINE_SECONDS = 3600
"""How long a pull Job may run: SWE-bench images are several GB; a cold node on a slow
link takes minutes for one. Past it the Job fails and the image counts as failed."""

Outcome = Literal["pulled", "failed", "pulling"]


def images_of(evaluation: Evaluation, items: Sequence[WorkItem],
              instances: Mapping[str, Instance]) -> list[str]:
    """The distinct task images of ``items``, in plan order (the first items' first)."""
    registry = evaluation.spec.runner.instance_image_registry
    found = (instance_image(instances[item.instance_id], registry) for item in items)
    return list(dict.fromkeys(found))


def pull_job_name(evaluation: Evaluation, image: str) -> str:
    """One pull Job per image of an Evaluation, named after both (60 characters at most),
    so that a restart finds it instead of making another."""
    return f"{owner_part(evaluation.name)}-pull-{hashlib.sha256(image.encode()).hexdigest()[:12]}"


def pull_job(evaluation: Evaluation, image: str,
             defaults: JobDefaults | None = None) -> dict[str, Any]:
    """The Job that pulls ``image``: its pod runs the image's ``true`` with the least
    resources, as the restricted Pod Security profile asks, on the nodes an item's pod
    may go to (its nodeSelector, tolerations, runtime class). The owner reference is left
    to ``kopf.adopt``."""
    runner = evaluation.spec.runner
    labels = {**owner_labels(evaluation), COMPONENT: COMPONENT_VALUE}
    container = {
        "name": "pull", "image": image, "command": ["true"],
        # IfNotPresent as the items' steps: an image already on the node is not pulled again.
        "imagePullPolicy": "IfNotPresent",
        "resources": {k: dict(v) for k, v in PULL_RESOURCES.items()},
        "securityContext": container_security_context("pull"),
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "nodeSelector": {"kubernetes.io/arch": DEFAULT_ARCH, **(runner.node_selector or {})},
        "containers": [container],
        "securityContext": pod_security_context(),
    }
    runtime_class = runner.runtime_class_name or (defaults.runtime_class_name if defaults
                                                  else None)
    if runtime_class:  # the same nodes as the items' pods (a RuntimeClass may select them)
        pod["runtimeClassName"] = runtime_class
    if runner.tolerations:
        pod["tolerations"] = [dict(t) for t in runner.tolerations]
    if runner.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s.name} for s in runner.image_pull_secrets]
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": pull_job_name(evaluation, image),
                     "namespace": evaluation.namespace, "labels": labels,
                     "annotations": {ANNOTATION_IMAGE: image}},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": DEADLINE_SECONDS,
                 "template": {"metadata": {"labels": dict(labels)}, "spec": pod}},
    }


def is_pull_job(job: Job) -> bool:
    """Whether a Job is a pull Job (its component label)."""
    return (job.get("metadata", {}).get("labels") or {}).get(COMPONENT) == COMPONENT_VALUE


def image_of(job: Job) -> str:
    """The image a pull Job pulls ("" on another Job)."""
    return str((job.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_IMAGE, ""))


@dataclass(frozen=True)
class Pull:
    """One image's pull as observed: its outcome, the node its pod ran on, and why."""

    outcome: Outcome
    node: str | None = None
    reason: str = ""
    message: str = ""


def pull_of(job: Job, pods: Sequence[Pod], events: Sequence[Event], now: datetime,
            pull_timeout_s: float) -> Pull:
    """What a pull Job and its pod say: pulled or failed once the Job says so (its pod may
    be gone by then; a pod that ended counts once its Job does, so that no more than
    prePullParallelism Jobs are ever unfinished at once); failed too when its pull has kept
    failing past ``pull_timeout_s`` (the pod stays in ImagePullBackOff and never fails by
    itself: it is left to its Job's deadline), at once when the node's disk was full;
    pulling otherwise."""
    decided = {c.get("type") for c in (job.get("status") or {}).get("conditions") or []
               if c.get("status") == "True"}
    state = item_state(job, pods, events)
    if decided & {"Complete", "SuccessCriteriaMet"}:
        return Pull("pulled", state.node)
    if decided & {"Failed", "FailureTarget"}:
        return Pull("failed", state.node, state.reason, state.message)
    if state.phase == Phase.PENDING and state.retryable and (
            state.reason == DISK_PRESSURE or seconds_since(state.since, now) > pull_timeout_s):
        return Pull("failed", state.node, state.reason, state.message)
    return Pull("pulling", state.node, state.reason, state.message)


@dataclass(frozen=True)
class PullState:
    """Where an Evaluation's pre-pull stands: whether items may start, the ImagesPulled
    condition, the counts for ``status.images``, the images to make a Job for now, and the
    node each pulled image is on."""

    ready: bool
    condition: tuple[bool, str, str]
    """ImagesPulled's status, reason (Pulling, Pulled, PullFailed) and message."""
    total: int
    pulled: int
    failed: int
    pulling: int
    create: tuple[str, ...] = ()
    nodes: dict[str, str] = field(default_factory=dict)

    def status(self) -> dict[str, int]:
        """``status.images``."""
        return {"total": self.total, "pulled": self.pulled, "failed": self.failed,
                "pulling": self.pulling}


def pull_state(images: Sequence[str], pulls: Mapping[str, Pull], parallelism: int,
               suspended: bool = False) -> PullState:
    """The pre-pull of ``images`` from the pulls observed (by image: those with a Job).
    Items may start once every image's pull has ended, pulled or failed. Jobs are made for
    the next images in order while fewer than ``parallelism`` pull, none while the
    Evaluation is ``suspended`` (it asks the cluster for nothing new)."""
    seen = [pulls[image] for image in images if image in pulls]
    tally = {o: sum(p.outcome == o for p in seen) for o in ("pulled", "failed", "pulling")}
    nodes = {image: p.node for image, p in pulls.items() if p.node and p.outcome == "pulled"}
    waiting = [image for image in images if image not in pulls]
    ready = not waiting and tally["pulling"] == 0
    room = 0 if ready or suspended else max(0, parallelism - tally["pulling"])
    create = tuple(waiting[:room])
    total = len(images)
    if not ready:
        said = next((f"; {p.reason}: {p.message.strip()[:300]}" for p in seen
                     if p.outcome == "pulling" and p.reason not in ("", "Created", "Pending")
                     and p.message), "; suspended: no image starts pulling" if suspended
                    else "")
        condition = (False, "Pulling", f"{tally['pulled']} of {total} images pulled, "
                     f"{tally['pulling']} pulling, {tally['failed']} failed; no item starts "
                     f"until each has ended{said}")
    elif tally["failed"]:
        first = next(f"{image}: {p.reason}: {p.message.strip()[:300]}".rstrip(": ")
                     for image, p in pulls.items() if p.outcome == "failed")
        condition = (False, "PullFailed", f"{tally['failed']} of {total} images could not "
                     f"be pulled (first: {first}); their items run, and end as infra errors "
                     f"if the image still cannot be pulled")
    else:
        condition = (True, "Pulled", f"{tally['pulled']} of {total} images pulled")
    return PullState(ready, condition, total, tally["pulled"], tally["failed"],
                     tally["pulling"], create, nodes)
