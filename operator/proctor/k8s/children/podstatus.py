"""What a work item's Job, its pod and their events say about the item (pure).

``item_state(job, pods, events)`` reads the objects as the API returns them (plain dicts,
typed in `proctor.k8s.machinery.objects`) and answers one of five phases:

* queued: the Job is suspended and has not ended: it waits for Kueue to admit it (created
  suspended with a queue name), or Kueue preempted it (suspended it again; the Job
  controller deletes its pods). Its pods, while they are still there, are read as usual
  for the steps they ran.
* pending: no step has started. Includes what will not resolve by itself, with since
  when: an image that cannot be pulled (the pod stays Pending forever, it never fails),
  a container that cannot be configured (a missing Secret), pods refused at creation
  (FailedCreate: pod security, quota; no pod ever appears). The operator decides when to
  give up; ``error_kind`` and ``retryable`` say what giving up would mean.
* running: a step has started and the pod has not ended.
* succeeded: the grade step ended; ``result`` is its compact result (the termination
  message of ``proctor runner grade --termination-log``), or None with reason
  ``ResultUnreadable`` when the grade log must be read instead.
* failed, with a cause. Per the architecture note's table, infrastructure failures
  (deadline, eviction, OOM kill, node lost, pod lost) are ``infra`` and retried up to
  ``runner.infraRetries``; a step that exits non-zero is a broken sandbox, not retried.
  The node's disk running out (an eviction or refusal for DiskPressure, a pull or step
  meeting "no space left on device") is ``DiskPressure``: infra, retried on another node.

Job conditions come first: since 1.31 a Job shows FailureTarget / SuccessCriteriaMet as
soon as the outcome is decided, before Failed / Complete; both count.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from proctor.core.labels import KUEUE_QUEUE_NAME, LABEL_ITEM
from proctor.core.model import ErrorKind, Outcome
from proctor.k8s.machinery.objects import (
    Condition,
    ContainerState,
    ContainerStateDetail,
    ContainerStatus,
    Event,
    Job,
    ObjectReference,
    Pod,
    PodStatus,
)


class Phase(StrEnum):
    """Where a work item's attempt stands."""

    QUEUED = "queued"
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


# Waiting reasons that a pod does not get out of by waiting a little.
PULL_PROBLEMS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                           "ErrImageNeverPull", "RegistryUnavailable", "SignatureValidationFailed"})
CONFIG_PROBLEMS = frozenset({"CreateContainerConfigError", "CreateContainerError",
                             "RunContainerError"})

# pod.status.reason of a pod that failed for reasons outside it -> our cause.
_POD_REASONS = {"Evicted": "Evicted", "DeadlineExceeded": "DeadlineExceeded",
                "NodeLost": "NodeLost", "Shutdown": "NodeLost", "NodeShutdown": "NodeLost",
                "Terminated": "NodeLost", "UnexpectedAdmissionError": "Rejected",
                "NodeAffinity": "Rejected"}
DISK_PRESSURE = "DiskPressure"
"""The cause of an attempt that failed for want of disk on its node: evicted or refused
by the kubelet for node disk pressure, or a pull or step that met a full disk. An
infrastructure failure: retried (with the patch it got), on another node than this one."""
# The kubelet's words for the node's disk (not the pod's own limits: an emptyDir over its
# sizeLimit or a container over its ephemeral-storage limit says "exceeds"/"exceeded",
# and would fill any node again).
_NODE_DISK = re.compile(r"low on resource: ephemeral-storage|node had condition: \[?[^\]]*"
                        r"DiskPressure|no space left on device", re.IGNORECASE)
# The DisruptionTarget condition's reason (1.26+) -> our cause.
_DISRUPTIONS = {"PreemptionByScheduler": "Preempted", "DeletionByTaintManager": "NodeLost",
                "DeletionByPodGC": "NodeLost", "EvictionByEvictionAPI": "Evicted",
                "TerminationByKubelet": "Evicted"}


@dataclass(frozen=True)
class Step:
    """One container of the pod, as its status shows it."""

    name: str
    state: str
    """waiting, running, terminated, or unknown (no status yet)."""
    reason: str | None = None
    message: str | None = None
    exit_code: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    init: bool = False
    """An init container."""
    sidecar: bool = False
    """An init container with restartPolicy Always (a native sidecar)."""


@dataclass(frozen=True)
class ItemState:
    """What an attempt's Job and pod say; see the module docstring."""

    phase: Phase
    reason: str
    """One CamelCase word: Created, FailedCreate, Unschedulable, ImagePullBackOff, Running,
    Completed, ResultUnreadable, DeadlineExceeded, Evicted, OOMKilled, Killed, NodeLost,
    Preempted, Rejected, PodLost, ResultLost, StepFailed, ..."""
    message: str = ""
    since: str | None = None
    """When the present state began (for a stuck pending pod: its first failure)."""
    error_kind: ErrorKind | None = None
    """The item's error kind if it ends here (for pending: if the operator gives up)."""
    retryable: bool = False
    """An infrastructure failure that ``runner.infraRetries`` covers."""
    result: dict[str, Any] | None = None
    """The grade step's compact result, when it succeeded and could be read."""
    pod: str | None = None
    node: str | None = None
    images: dict[str, str] = field(default_factory=dict)
    """The image each step ran (those that pulled one): its imageID, which names the
    registry digest where the runtime knows it."""
    steps: tuple[Step, ...] = ()


# --- Reading objects ------------------------------------------------------------------------


def parse_time(value: str) -> datetime:
    """An API timestamp (RFC 3339, with or without fractions) as an aware datetime."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def seconds_since(value: str | None, now: datetime) -> float:
    """Seconds from an API timestamp to ``now``; 0 when there is none."""
    return max(0.0, (now - parse_time(value)).total_seconds()) if value else 0.0


def _true_conditions(conditions: Sequence[Condition] | None) -> dict[str, Condition]:
    return {c["type"]: c for c in conditions or [] if c.get("status") == "True"}


class PodsByJob:
    """Pods indexed by the Job that made them, once for many Jobs: by the Job's uid (owner
    reference, ``controller-uid`` labels), else by its name (``job-name`` labels).

    The uid tells a Job from an earlier one of the same name whose pods are still going.
    """

    def __init__(self, pods: Sequence[Pod]):
        self._pods: dict[tuple[str, str], list[Pod]] = {}
        for pod in pods:
            meta = pod.get("metadata", {})
            labels = meta.get("labels") or {}
            uids = [ref.get("uid") for ref in meta.get("ownerReferences") or []]
            uids += [labels.get("batch.kubernetes.io/controller-uid"), labels.get("controller-uid")]
            names = [labels.get("batch.kubernetes.io/job-name"), labels.get("job-name")]
            for key in {("uid", u) for u in uids if u} | {("name", n) for n in names if n}:
                self._pods.setdefault(key, []).append(pod)

    def of(self, job: Job) -> list[Pod]:
        meta = job.get("metadata", {})
        return list(self._pods.get(("uid", meta.get("uid", ""))) or
                    self._pods.get(("name", meta.get("name", ""))) or [])


def _about(event: Event) -> ObjectReference:
    """The object an event is about (core/v1 ``involvedObject``, events/v1 ``regarding``)."""
    return event.get("involvedObject") or event.get("regarding") or {}


def events_of(kind: str, name: str, events: Sequence[Event]) -> list[Event]:
    """The events about one object."""
    return [e for e in events if _about(e).get("kind") == kind and _about(e).get("name") == name]


def _earliest(events: Iterable[Event]) -> str | None:
    """When the first of ``events`` happened."""
    times = [t for e in events if (t := e.get("firstTimestamp") or e.get("eventTime")
                                   or e.get("metadata", {}).get("creationTimestamp"))]
    return min(times, key=parse_time) if times else None


_STATES: tuple[Literal["terminated", "running", "waiting"], ...] = (
    "terminated", "running", "waiting")


def _step(status: ContainerStatus, init: bool, sidecar: bool) -> Step:
    state: ContainerState = status.get("state") or {}
    kind = next((k for k in _STATES if k in state), None)
    detail: ContainerStateDetail = (state.get(kind) if kind else None) or {}
    return Step(name=status["name"], state=kind or "unknown", reason=detail.get("reason"),
                message=detail.get("message"), exit_code=detail.get("exitCode"),
                started_at=detail.get("startedAt"), finished_at=detail.get("finishedAt"),
                init=init, sidecar=sidecar)


def _statuses(status: PodStatus) -> list[ContainerStatus]:
    """The init containers' statuses, then the main containers'."""
    return [*(status.get("initContainerStatuses") or []),
            *(status.get("containerStatuses") or [])]


def steps_of(pod: Pod) -> tuple[Step, ...]:
    """Every container in the order it runs: init containers (sidecars marked), then main.

    Read from the spec's order, so a step without a status yet is still listed; a status
    without a spec (a partial object) is listed where its status list puts it.
    """
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    order: list[tuple[str, bool, bool]] = []
    for containers, init in ((spec.get("initContainers"), True),
                             (spec.get("containers"), False)):
        order += [(c["name"], init, c.get("restartPolicy") == "Always")
                  for c in containers or []]
    for statuses, init in ((status.get("initContainerStatuses"), True),
                           (status.get("containerStatuses"), False)):
        known = {name for name, _, _ in order}
        order += [(s["name"], init, False) for s in statuses or [] if s["name"] not in known]
    by_name = {s["name"]: s for s in _statuses(status)}
    return tuple(_step(by_name.get(name) or ContainerStatus(name=name), init, sidecar)
                 for name, init, sidecar in order)


# --- Compact results ------------------------------------------------------------------------


def read_compact_result(message: str | None, item_id: str | None = None
                        ) -> tuple[dict[str, Any] | None, str]:
    """The grade step's compact result from its termination message, or why not."""
    if not message:
        return None, "the grade step left no termination message"
    try:
        result = json.loads(message)
    except json.JSONDecodeError:
        return None, "the grade step's termination message is not JSON (cut at 4 KiB?)"
    if not isinstance(result, dict) or result.get("outcome") not in set(Outcome):
        return None, "the grade step's termination message is not a compact result"
    if item_id and result.get("item") != item_id:
        return None, f"the result is of item {result.get('item')!r}, not {item_id!r}"
    return result, ""


# --- Classification -------------------------------------------------------------------------


def _common(pod: Pod | None) -> dict[str, Any]:
    """The fields every state with a pod carries: pod, node, images, steps."""
    if pod is None:
        return {}
    statuses = _statuses(pod.get("status") or {})
    return {"pod": pod.get("metadata", {}).get("name"),
            "node": (pod.get("spec") or {}).get("nodeName"), "steps": steps_of(pod),
            "images": {s["name"]: s["imageID"] for s in statuses if s.get("imageID")}}


def _infra(reason: str, message: str, **fields: Any) -> ItemState:
    return ItemState(phase=Phase.FAILED, reason=reason, message=message,
                     error_kind=ErrorKind.INFRA, retryable=True, **fields)


def _pod_disruption(pod: Pod) -> tuple[str, str] | None:
    """An outside cause of the pod's end: eviction, node loss, preemption, rejection."""
    status = pod.get("status") or {}
    reason = status.get("reason") or ""
    cause = _POD_REASONS.get(reason) or ("Rejected" if reason.startswith("OutOf") else None)
    if cause:
        message = status.get("message") or reason
        return (DISK_PRESSURE if _NODE_DISK.search(message) else cause), message
    disruption = _true_conditions(status.get("conditions")).get("DisruptionTarget")
    if disruption:
        why = disruption.get("reason") or ""
        message = disruption.get("message") or why
        return (DISK_PRESSURE if _NODE_DISK.search(message)
                else _DISRUPTIONS.get(why, "NodeLost")), message
    return None


def _failed(job: Job, pod: Pod | None, common: dict[str, Any]) -> ItemState:
    """Why a Job (or its pod) failed, and whether that is worth another attempt."""
    conditions = _true_conditions((job.get("status") or {}).get("conditions"))
    decided: Condition = conditions.get("Failed") or conditions.get("FailureTarget") or {}
    if decided.get("reason") == "DeadlineExceeded":
        return _infra("DeadlineExceeded", decided.get("message") or "the Job ran past its "
                      "deadline", since=decided.get("lastTransitionTime"), **common)
    if pod is None:
        return _infra("PodLost", "the Job failed and its pod is gone (node lost, or deleted)",
                      since=decided.get("lastTransitionTime"), **common)
    outside = _pod_disruption(pod)
    if outside:
        return _infra(outside[0], outside[1], **common)
    return _failed_step(pod, common)


def _failed_step(pod: Pod, common: dict[str, Any]) -> ItemState:
    """The first step that ended badly: OOM, killed (137), or a non-zero exit."""
    ended = [s for s in common["steps"] if s.state == "terminated"]
    for step in ended:  # killed by the kernel or the kubelet: 137 is SIGKILL, mostly memory
        if step.reason == "OOMKilled" or step.exit_code == 137:
            oom = step.reason == "OOMKilled"
            why = "out of memory" if oom else "killed by SIGKILL, most likely out of memory"
            return _infra("OOMKilled" if oom else "Killed",
                          f"step {step.name} exited {step.exit_code}: {why}",
                          since=step.finished_at, **common)
    for step in ended:  # the node's disk is full: no emptyDir limit gives ENOSPC (they evict)
        if step.exit_code and step.message and "no space left on device" in step.message.lower():
            return _infra(DISK_PRESSURE, f"step {step.name} exited {step.exit_code}: the "
                          f"node's disk is full: {step.message.strip()[-300:]}",
                          since=step.finished_at, **common)
    for step in ended:
        if step.exit_code and not step.sidecar:
            detail = f": {step.message.strip()[-500:]}" if step.message else ""
            return ItemState(phase=Phase.FAILED, reason="StepFailed",
                             message=f"step {step.name} exited {step.exit_code}{detail}",
                             since=step.finished_at, error_kind=ErrorKind.SANDBOX, **common)
    message = (pod.get("status") or {}).get("message") or "the pod failed with no step failing"
    return _infra("PodFailed", message, **common)


def _succeeded(job: Job, pod: Pod | None, common: dict[str, Any]) -> ItemState:
    """The grade step's compact result, or why it has to come from the grade log."""
    item_id = (job.get("metadata", {}).get("labels") or {}).get(LABEL_ITEM)
    # The grade step is the pod's one main container.
    grade = next((s for s in reversed(common.get("steps", ())) if not s.init), None)
    if pod is None or grade is None:
        return _infra("ResultLost", "the Job completed but its pod, and the result in it, is "
                      "gone", **common)
    result, why = read_compact_result(grade.message, item_id)
    if result is None:
        return ItemState(phase=Phase.SUCCEEDED, reason="ResultUnreadable",
                         message=f"{why}; read the full result from the grade log",
                         since=grade.finished_at, **common)
    return ItemState(phase=Phase.SUCCEEDED, reason="Completed", since=grade.finished_at,
                     result=result, **common)


def _waiting_since(pod: Pod, steps: Sequence[Step], index: int) -> str | None:
    """When a step started waiting: the end of the step before it, else the pod's start."""
    before = [s.finished_at for s in steps[:index] if s.finished_at and not s.sidecar]
    status = pod.get("status") or {}
    return (max(before, key=parse_time) if before else None) or status.get("startTime") or \
        pod.get("metadata", {}).get("creationTimestamp")


def _first_failure(pod: Pod, step: str, events: Sequence[Event]) -> str | None:
    """The first event of the kubelet failing a step (its image pull, its config)."""
    name = pod.get("metadata", {}).get("name") or ""
    return _earliest(e for e in events_of("Pod", name, events) if e.get("type") == "Warning"
                     and _about(e).get("fieldPath", "").endswith(f"{{{step}}}"))


def _stuck(pod: Pod, steps: Sequence[Step], events: Sequence[Event],
           common: dict[str, Any]) -> ItemState | None:
    """A step waiting on something that will not come by itself: an image, its config."""
    for index, step in enumerate(steps):
        if step.state == "waiting" and step.reason in PULL_PROBLEMS | CONFIG_PROBLEMS:
            pull = step.reason in PULL_PROBLEMS
            since = _first_failure(pod, step.name, events) or _waiting_since(pod, steps, index)
            # A pull that found the node's disk full will not succeed there: given up at once
            # (`reconcile`), and retried on another node.
            full = pull and bool(_NODE_DISK.search(step.message or ""))
            return ItemState(phase=Phase.PENDING,
                             reason=DISK_PRESSURE if full else step.reason or "",
                             message=step.message or "", since=since,
                             error_kind=ErrorKind.INFRA if pull else None, retryable=pull,
                             **common)
    return None


def _live(pod: Pod, events: Sequence[Event], common: dict[str, Any]) -> ItemState:
    """A pod that has not ended: stuck, waiting to be scheduled, or running a step."""
    steps = common["steps"]
    stuck = _stuck(pod, steps, events, common)
    if stuck:
        return stuck
    started = [s for s in steps if not s.sidecar and s.state in ("running", "terminated")]
    if started:
        current = next((s for s in steps if not s.sidecar and s.state != "terminated"), None)
        step = current or started[-1]
        return ItemState(phase=Phase.RUNNING, reason="Running",
                         since=step.started_at or started[-1].finished_at, **common)
    conditions = (pod.get("status") or {}).get("conditions") or []
    scheduled = next((c for c in conditions if c.get("type") == "PodScheduled"), Condition())
    if scheduled.get("status") == "False":
        return ItemState(phase=Phase.PENDING, reason=scheduled.get("reason") or "Unschedulable",
                         message=scheduled.get("message") or "",
                         since=scheduled.get("lastTransitionTime"), **common)
    waiting = next((s for s in steps if s.state == "waiting"), None)
    return ItemState(phase=Phase.PENDING, reason=(waiting.reason if waiting else None) or
                     "Pending", since=_waiting_since(pod, steps, 0), **common)


def _no_pod(job: Job, events: Sequence[Event], common: dict[str, Any]) -> ItemState:
    """A Job without a pod: just created, or its pods refused (FailedCreate)."""
    name = job.get("metadata", {}).get("name") or ""
    refused = [e for e in events_of("Job", name, events) if e.get("reason") == "FailedCreate"]
    if refused:
        # The job-controller keeps trying; nothing changes until a person fixes the cause.
        return ItemState(phase=Phase.PENDING, reason="FailedCreate",
                         message=refused[-1].get("message") or "", since=_earliest(refused),
                         **common)
    created = job.get("metadata", {}).get("creationTimestamp")
    return ItemState(phase=Phase.PENDING, reason="Created", since=created, **common)


def _queued(job: Job, common: dict[str, Any]) -> ItemState:
    """A suspended Job: in its Kueue queue, since it was created or suspended again."""
    suspended = next((c for c in (job.get("status") or {}).get("conditions") or []
                      if c.get("type") == "Suspended" and c.get("status") == "True"), Condition())
    queue = (job.get("metadata", {}).get("labels") or {}).get(KUEUE_QUEUE_NAME)
    return ItemState(phase=Phase.QUEUED, reason="Queued",
                     message=f"the Job waits for Kueue to admit it (queue {queue})",
                     since=suspended.get("lastTransitionTime")
                     or job.get("metadata", {}).get("creationTimestamp"), **common)


def item_state(job: Job, pods: Sequence[Pod] = (), events: Sequence[Event] = ()) -> ItemState:
    """The state of one attempt: its Job, the pods listed for it, and their events.

    ``pods`` are the Job's own (`PodsByJob` picks them from a wider list); ``events`` may
    be the namespace's: only those about the Job and its pod are read.
    """
    # The pod to read: the newest one (a Job with backoffLimit 0 has one).
    pod = max(pods, default=None, key=lambda p: (p.get("metadata", {}).get("creationTimestamp")
                                                 or "", p.get("metadata", {}).get("name") or ""))
    common = _common(pod)
    conditions = _true_conditions((job.get("status") or {}).get("conditions"))
    if "Failed" in conditions or "FailureTarget" in conditions:
        return _failed(job, pod, common)
    if "Complete" in conditions or "SuccessCriteriaMet" in conditions:
        return _succeeded(job, pod, common)
    if (job.get("spec") or {}).get("suspend"):
        return _queued(job, common)
    if pod is None:
        return _no_pod(job, events, common)
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Failed":  # the Job controller has not caught up yet
        return _failed(job, pod, common)
    if phase == "Succeeded":
        return _succeeded(job, pod, common)
    return _live(pod, events, common)
