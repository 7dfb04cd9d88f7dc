"""The agent's task slots as a Kueue AdmissionCheck (pure: the objects and the patches).

Kueue admits a Job by its ClusterQueue's quota alone; it knows nothing of an agent's
maxConcurrentTasks. A ClusterQueue that lists the AdmissionCheck `CHECK` (whose
controllerName is `CONTROLLER`: this operator) admits a Proctor Job only once the
operator marks the check Ready on the Job's Workload, which it does while the agent has a
slot free. So a queued Job holds no slot: the slot is taken at admission, and the queue
can hold as many Jobs as maxConcurrentRows lets Proctor create.

Without the check on the ClusterQueue (its Workloads do not list it), a queued Job
reserves its slot from its creation instead (`reconcile.holds_agent_slot`): Kueue could
admit more Jobs than the agent has slots, and an admitted Job cannot be held back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from proctor.core.labels import KUEUE_JOB_UID
from proctor.k8s.machinery.objects import MutableObj, Workload

CHECK = "proctor-agent-slots"
"""The AdmissionCheck's name, as a ClusterQueue's admissionChecksStrategy lists it."""
CONTROLLER = "proctor.dev/agent-slots"
"""Its spec.controllerName: which controller decides it."""
KUEUE = "kueue.x-k8s.io/v1beta2"
FIELD_MANAGER = "proctor-agent-slots"
"""The server-side apply field manager of the check's state on Workloads: it owns that
one entry of status.admissionChecks, Kueue the rest."""
PENDING, READY = "Pending", "Ready"


@dataclass
class Queued:
    """What the operator notes of an Evaluation's Jobs in Kueue's queue, by Job uid (in this
    process's memory only: a restart reads the kept patches again, `act.restore_answers`)."""

    answers: dict[str, MutableObj | None] = field(default_factory=dict)
    """The Jobs seen asking the agent: the ConfigMap of the patch kept from each, {} when its
    solve log held none, None while not read (`reconcile.observe`)."""
    answers_restored: bool = False
    """Whether the kept patches were listed once (`act.restore_answers`)."""
    checks: dict[str, SlotCheck] = field(default_factory=dict)
    """The agent-slots check on each queued Job's Workload."""
    task_ids: dict[str, str] = field(default_factory=dict)
    """The agent's task each queued Job sent, read from its solve log while it waits
    (`reconcile.awaiting_task`)."""


@dataclass(frozen=True)
class SlotCheck:
    """The check on one Job's Workload."""

    workload: str
    state: str | None
    """Pending, Ready, Retry or Rejected (Kueue sets it back to Pending on an eviction);
    None: the Workload does not carry the check (its ClusterQueue does not list it)."""
    quota_reserved: bool
    """Kueue has reserved quota for it: it waits for its checks alone."""

    @property
    def waiting(self) -> bool:
        """Whether Kueue waits for the operator's word to admit the Job."""
        return self.quota_reserved and self.state == PENDING


def checks_by_job(workloads: Iterable[Workload]) -> dict[str, SlotCheck]:
    """The check of each Job's Workload, by the uid of the Job it admits (Kueue's job-uid
    label); a Job whose Workload is not made yet is not in this map."""
    found = {}
    for workload in workloads:
        meta, status = workload.get("metadata") or {}, workload.get("status") or {}
        uid = (meta.get("labels") or {}).get(KUEUE_JOB_UID)
        state = next((c.get("state") for c in status.get("admissionChecks") or []
                      if c.get("name") == CHECK), None)
        if uid:
            reserved = any(c.get("type") == "QuotaReserved" and c.get("status") == "True"
                           for c in status.get("conditions") or [])
            found[uid] = SlotCheck(meta.get("name", ""), state, reserved)
    return found


def check_state(workload: str, namespace: str, state: str, message: str, now: str
                ) -> dict[str, Any]:
    """The server-side apply body that sets the check's state on a Workload's status."""
    return {"apiVersion": KUEUE, "kind": "Workload",
            "metadata": {"name": workload, "namespace": namespace},
            "status": {"admissionChecks": [{"name": CHECK, "state": state,
                                            "lastTransitionTime": now,
                                            "message": message[:1000]}]}}


def admission_check() -> dict[str, Any]:
    """The AdmissionCheck object (cluster-scoped) a ClusterQueue names to use the check."""
    return {"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": {"name": CHECK},
            "spec": {"controllerName": CONTROLLER}}


def active(now: str) -> dict[str, Any]:
    """The AdmissionCheck's status saying its controller runs: Kueue keeps a ClusterQueue
    that names an inactive check from admitting anything."""
    return {"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": {"name": CHECK},
            "status": {"conditions": [{"type": "Active", "status": "True",
                                       "reason": "Active", "lastTransitionTime": now,
                                       "message": "the Proctor operator decides it: a Job "
                                                  "is admitted while its agent has a task "
                                                  "slot free"}]}}
