"""The agent-slots AdmissionCheck (k8s/features/kueue.py): where a ClusterQueue lists it, a queued
Job holds none of its agent's task slots; the operator marks the check Ready on the Workloads
Kueue reserved quota for, as many as the agent has slots free, and Kueue admits those.

Workloads are shaped as Kueue v0.17 (kueue.x-k8s.io/v1beta2) writes them: the job-uid label,
status.admissionChecks (one entry per check of the ClusterQueue) and the QuotaReserved
condition. The cluster test (tests/cluster/test_cluster_kueue.py) runs it with the real Kueue."""

from __future__ import annotations

from typing import Any

from proctor.k8s.evaluation import reconcile
from proctor.k8s.evaluation.reconcile import ItemView, decide
from proctor.k8s.features import kueue
from proctor.k8s.features.kueue import CHECK, SlotCheck, checks_by_job
from support.kueue_jobs import agent_eval, kueue_job, solving
from support.reconcile_views import ITEMS, NOW, ts


def workload(job: dict, state: str | None = "Pending", reserved: bool = True,
             others: tuple[str, ...] = ("other-check",)) -> dict[str, Any]:
    """A Job's Workload: its checks' states (ours: ``state``; None: not listed) and whether
    Kueue reserved quota for it."""
    checks = [{"name": name, "state": "Pending", "lastTransitionTime": ts(20), "message": ""}
              for name in others]
    if state is not None:
        checks.append({"name": CHECK, "state": state, "lastTransitionTime": ts(20),
                       "message": ""})
    conditions = [{"type": "QuotaReserved", "status": "True" if reserved else "False",
                   "reason": "QuotaReserved" if reserved else "Pending",
                   "lastTransitionTime": ts(20), "message": ""}]
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": f"job-{job['metadata']['name']}-1a2b3",
                         "labels": {"kueue.x-k8s.io/job-uid": job["metadata"]["uid"]}},
            "status": {"admissionChecks": checks, "conditions": conditions}}


def views_of(jobs: list[dict], workloads: list[dict], pods: list[dict] = ()) -> list[ItemView]:
    from proctor.k8s.children.podstatus import PodsByJob, item_state

    by_job = PodsByJob(list(pods))
    return reconcile.observe(ITEMS, jobs, {}, lambda j: item_state(j, by_job.of(j)), {},
                             checks=checks_by_job(workloads))


def test_a_workloads_check_is_read_by_its_jobs_uid() -> None:
    jobs = [kueue_job(0), kueue_job(1), kueue_job(2)]
    found = checks_by_job([workload(jobs[0]), workload(jobs[1], "Ready"),
                           workload(jobs[2], None, reserved=False)])
    assert found[jobs[0]["metadata"]["uid"]] == SlotCheck(
        f"job-{jobs[0]['metadata']['name']}-1a2b3", "Pending", True)
    assert found[jobs[0]["metadata"]["uid"]].waiting
    assert not found[jobs[1]["metadata"]["uid"]].waiting  # Ready already
    assert found[jobs[2]["metadata"]["uid"]].state is None  # its queue has no such check
    assert checks_by_job([{"metadata": {"name": "not-a-jobs"}}]) == {}


def test_queued_jobs_hold_no_slot_and_the_queue_fills_to_max_concurrent_rows() -> None:
    """With the check, Proctor creates Jobs up to maxConcurrentRows whatever the agent's
    slots: Kueue holds them until the operator says a slot is free."""
    ev = agent_eval(maxConcurrentRows=5)
    jobs = [kueue_job(0), kueue_job(1)]
    views = views_of(jobs, [workload(j, reserved=False) for j in jobs])
    decision = decide(ev, views, NOW, agent_slots=1)
    assert decision.agent_tasks == 0 and decision.grant == []
    assert decision.start == ITEMS[2:5]  # not bounded by the agent's one slot
    assert decision.watch_workloads  # quota reserved later comes with no Job event
    # Without the check (the same Jobs, Workloads that do not list it): a slot at creation.
    plain = views_of(jobs, [workload(j, None) for j in jobs])
    assert decide(ev, plain, NOW, agent_slots=1).start == []
    assert decide(ev, plain, NOW, agent_slots=3).start == [ITEMS[2]]


def test_workloads_with_quota_are_admitted_as_the_agents_free_slots_allow() -> None:
    ev = agent_eval(maxConcurrentRows=5)
    admitted = kueue_job(0, suspended=False)  # asking the agent now: one slot
    jobs = [admitted, kueue_job(1), kueue_job(2), kueue_job(3)]
    loads = [workload(admitted, "Ready"), workload(jobs[1]), workload(jobs[2]),
             workload(jobs[3])]
    views = views_of(jobs, loads, [solving(admitted, ended=False)])
    decision = decide(ev, views, NOW, agent_slots=3)
    assert [v.item for v in decision.grant] == ITEMS[1:3]  # plan order, 2 slots free
    assert decision.agent_tasks == 3 and decision.watch_workloads  # ITEMS[3] waits
    # Granted but not unsuspended yet: it holds its slot, so no second grant for it.
    granted = [admitted, *jobs[1:]]
    loads = [workload(admitted, "Ready"), workload(jobs[1], "Ready"),
             workload(jobs[2], "Ready"), workload(jobs[3])]
    again = decide(ev, views_of(granted, loads, [solving(admitted, ended=False)]), NOW,
                   agent_slots=3)
    assert again.grant == [] and again.agent_tasks == 3
    # Its solve step over, the admitted Job gives its slot back: the next is admitted.
    loads[0] = workload(admitted, "Ready")
    after = decide(ev, views_of(granted, loads, [solving(admitted, ended=True)]), NOW,
                   agent_slots=3)
    assert [v.item for v in after.grant] == [ITEMS[3]]


def test_a_job_without_quota_or_asking_nothing_or_preempted_is_handled_apart() -> None:
    ev = agent_eval(maxConcurrentRows=5)
    jobs = [kueue_job(0), kueue_job(1, asks=False), kueue_job(2)]
    loads = [workload(jobs[0], reserved=False), workload(jobs[1]), workload(jobs[2])]
    # The agent's slots all taken elsewhere: the Job that reuses a kept patch needs none.
    decision = decide(ev, views_of(jobs, loads), NOW, agent_slots=0)
    assert [v.item for v in decision.grant] == [ITEMS[1]]
    assert decision.agent_tasks == 0
    # Not reserved: Kueue has not chosen it yet, so it is not admitted by the operator.
    free = decide(ev, views_of(jobs, loads), NOW, agent_slots=5)
    assert [v.item for v in free.grant] == [ITEMS[1], ITEMS[2]]
    # Preempted after asking the agent (Kueue set the check back to Pending): replaced by
    # its next attempt with the kept patch, not admitted again as it is.
    views = views_of(jobs, loads)
    views[2].asked = True
    preempted = decide(ev, views, NOW, agent_slots=5)
    assert [v.item for v in preempted.preempted] == [ITEMS[2]]
    assert ITEMS[2] not in [v.item for v in preempted.grant]


def test_nothing_is_admitted_while_suspended_or_while_the_agent_is_not_ready() -> None:
    jobs = [kueue_job(0)]
    views = views_of(jobs, [workload(jobs[0])])
    assert decide(agent_eval(suspend=True), views, NOW, agent_slots=2).grant == []
    assert decide(agent_eval(), views, NOW, agent_slots=2, agent_ready=False).grant == []
    assert [v.item for v in decide(agent_eval(), views, NOW, agent_slots=2).grant] == [ITEMS[0]]


def test_the_check_state_and_active_status_are_server_side_apply_bodies() -> None:
    body = kueue.check_state("w", "team-a", "Ready", "a slot", ts(0))
    assert body["metadata"] == {"name": "w", "namespace": "team-a"}
    assert body["status"]["admissionChecks"] == [
        {"name": CHECK, "state": "Ready", "lastTransitionTime": ts(0), "message": "a slot"}]
    active = kueue.active(ts(0))["status"]["conditions"][0]
    assert (active["type"], active["status"]) == ("Active", "True")
    assert kueue.admission_check()["spec"]["controllerName"] == kueue.CONTROLLER
