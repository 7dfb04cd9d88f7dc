"""What can go wrong in the test cluster, and the simulated-run mode.

A ``Fault`` matches pods (or, for ``failed_create``, Jobs) by the work item's labels and
strikes the first ``times`` of them (None: every one), so that a retry can succeed:

=============  =================================================================================
kind           effect (as a real cluster shows it)
=============  =================================================================================
image_pull     the ``step`` container's image (default: the first init container) never pulls:
               the pod stays Pending, the container waiting ErrImagePull / ImagePullBackOff,
               kubelet events Pulling, Failed, BackOff. Removing the fault lets it pull.
evict          ``after`` seconds into ``step`` (default test) the kubelet evicts the pod: running
               containers exit 137 (Error), phase Failed, reason Evicted, an emptyDir message.
oom            ``after`` seconds into ``step`` (default test) the container is OOM-killed:
               terminated OOMKilled exit 137, phase Failed.
deadline       ``after`` seconds into ``step`` (default: at once) the Job passes its
               activeDeadlineSeconds: FailureTarget/Failed DeadlineExceeded, the pod deleted.
failed_create  the Job controller cannot create the pod (pod security): no pod, Warning events
               FailedCreate on the Job. Removing the fault lets the next try succeed.
exit           ``step`` exits with ``exit_code`` at once (a broken sandbox): StepFailed.
config         ``step`` cannot start (CreateContainerConfigError, a missing Secret) until the
               fault is removed.
=============  =================================================================================
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = ("image_pull", "evict", "oom", "deadline", "failed_create", "exit", "config")
DEFAULT_STEP = {"evict": "test", "oom": "test", "exit": "test", "config": "solve"}


@dataclass
class Fault:
    kind: str
    instance: str | None = None
    """Match the ``proctor.dev/instance`` label (the instance id)."""
    item: str | None = None
    """Match the ``proctor.dev/item`` label (the item id)."""
    job: str | None = None
    """Match the Job's name."""
    namespace: str | None = None
    """Match the namespace."""
    step: str | None = None
    """The container concerned (see the table for defaults)."""
    times: int | None = 1
    """Strike the first N matching pods (Jobs for failed_create); None: all."""
    after: float = 0.0
    """Seconds into the step before it strikes (evict, oom, deadline)."""
    exit_code: int = 3
    message: str | None = None
    hits: list[str] = field(default_factory=list)
    """uids of the pods (or Jobs) it struck."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault {self.kind!r}; one of {', '.join(KINDS)}")
        if self.step is None:
            self.step = DEFAULT_STEP.get(self.kind)

    def matches(self, labels: Mapping[str, str], job_name: str | None,
                namespace: str | None = None) -> bool:
        return ((self.instance is None or labels.get("proctor.dev/instance") == self.instance)
                and (self.item is None or labels.get("proctor.dev/item") == self.item)
                and (self.job is None or job_name == self.job)
                and (self.namespace is None or namespace == self.namespace))


class Faults:
    """The faults in force (thread-safe); tests add and remove them while pods run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, kind: str, **match: Any) -> Fault:
        fault = Fault(kind, **match)
        with self._lock:
            self._faults.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        with self._lock:
            if fault in self._faults:
                self._faults.remove(fault)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def active(self, fault: Fault) -> bool:
        with self._lock:
            return any(f is fault for f in self._faults)

    def strike(self, kind: str, uid: str, labels: Mapping[str, str], job_name: str | None,
               step: str | None = None, namespace: str | None = None) -> Fault | None:
        """The fault of ``kind`` that strikes this pod (or Job) uid, counting it once."""
        with self._lock:
            for fault in self._faults:
                if fault.kind != kind or not fault.matches(labels, job_name, namespace):
                    continue
                if step is not None and fault.step is not None and fault.step != step:
                    continue
                if uid in fault.hits:
                    return fault
                if fault.times is None or len(fault.hits) < fault.times:
                    fault.hits.append(uid)
                    return fault
        return None


@dataclass
class Simulation:
    """Replace the steps by sleeps and a given result (a benchmark of the operator itself).

    ``seconds``: per step (``{"solve": 2, "test": 1}``), one number for the solve step, or a
    callable of the work item. ``outcome``: the compact result's outcome, or a callable of
    the work item. The grade step prints a full RunResult and leaves the compact result as
    its termination message, as the real one does.
    """

    seconds: float | Mapping[str, float] | Callable[[Any], float | Mapping[str, float]] = 0.0
    outcome: str | Callable[[Any], str] = "resolved"

    def durations(self, item: Any) -> Mapping[str, float]:
        value = self.seconds(item) if callable(self.seconds) else self.seconds
        return value if isinstance(value, Mapping) else {"solve": float(value)}

    def outcome_of(self, item: Any) -> str:
        return self.outcome(item) if callable(self.outcome) else self.outcome
