"""The agent's task slots (maxConcurrentTasks over every Evaluation that uses it), finished
Jobs left for `kubectl logs`, and the Events a status calls for (pure: `reconcile`)."""

from __future__ import annotations

from proctor.k8s.evaluation import reconcile
from proctor.k8s.evaluation.reconcile import Settings, decide
from support.reconcile_views import ITEMS, NOW, evaluation, job, observe, pod_for, result, ts

ASKING = {"initContainers": [{"name": "solve", "command": [
    "proctor", "runner", "solve", "--endpoint", "http://agent:9009/"]}]}
GIVEN = {"initContainers": [{"name": "solve", "command": [
    "proctor", "runner", "solve", "--patch-file", "/task/patch.diff"]}]}


def asking_job(item, pod_spec=ASKING, attempt: int = 0) -> dict:
    j = job(item, attempt)
    j["spec"] = {"template": {"spec": pod_spec}}
    return j


def solve_status(state: str) -> dict:
    states = {"running": {"running": {"startedAt": ts(5)}},
              "done": {"terminated": {"exitCode": 0, "reason": "Completed",
                                      "startedAt": ts(20), "finishedAt": ts(5)}}}
    return {"name": "solve", "image": "runner", "imageID": "", "ready": False,
            "restartCount": 0, "state": states[state]}


def agent_evaluation(rows: int = 5):
    return evaluation(predictions={"source": "agent"}, agentRef={"name": "a"},
                      maxConcurrentRows=rows)


def test_the_agent_slots_cap_what_starts_below_max_concurrent_rows() -> None:
    views = observe(ITEMS, [], [], [], {})
    decision = decide(agent_evaluation(), views, NOW, agent_slots=2)
    assert len(decision.start) == 2 and decision.agent_tasks == 2
    # The other Evaluations hold them all: nothing starts, however many rows are free.
    assert decide(agent_evaluation(), views, NOW, agent_slots=0).start == []
    assert len(decide(agent_evaluation(), views, NOW, agent_slots=None).start) == 5


def test_an_item_holds_its_slot_until_its_solve_step_ends() -> None:
    jobs = [asking_job(ITEMS[0]), asking_job(ITEMS[1])]
    pods = [pod_for(jobs[0], "Pending"),  # created, its pull step not done: it holds one
            pod_for(jobs[1], "Running", initContainerStatuses=[solve_status("running")])]
    views = observe(ITEMS, jobs, pods, [], {})
    decision = decide(agent_evaluation(), views, NOW, agent_slots=3)
    assert decision.agent_tasks == 3 and [i.id for i in decision.start] == [ITEMS[2].id]
    # Once the solve step has ended (the tests run), the agent is free for another item.
    pods[1] = pod_for(jobs[1], "Running", initContainerStatuses=[solve_status("done")])
    decision = decide(agent_evaluation(), observe(ITEMS, jobs, pods, [], {}), NOW,
                      agent_slots=3)
    assert [i.id for i in decision.start] == [ITEMS[2].id, ITEMS[3].id]


def test_an_attempt_with_a_given_patch_holds_no_agent_slot() -> None:
    jobs = [asking_job(ITEMS[0], GIVEN)]
    views = observe(ITEMS, jobs, [pod_for(jobs[0], "Running")], [], {})
    assert not reconcile.holds_agent_slot(views[0])
    assert len(decide(agent_evaluation(), views, NOW, agent_slots=1).start) == 1


def test_finished_jobs_stay_when_the_operator_keeps_them() -> None:
    jobs = [asking_job(ITEMS[0])]
    views = observe(ITEMS[:1], jobs, [], [], {ITEMS[0].id: result(ITEMS[0])})
    assert decide(agent_evaluation(), views, NOW).stop == jobs
    kept = decide(agent_evaluation(), views, NOW, Settings(keep_finished_jobs=True))
    assert kept.stop == [] and kept.start == []


def test_events_success_once_and_degraded_once() -> None:
    def status(succeeded: str, degraded: str) -> dict:
        return {"resolvedPercent": "40.0%", "conditions": [
            {"type": "Succeeded", "status": succeeded, "reason": "AllItemsDone",
             "message": "5 of 5 items done"},
            {"type": "Degraded", "status": degraded, "reason": "ImagePullBackOff",
             "message": "t-1: not pulled"}]}
    running, done = status("False", "False"), status("True", "False")
    assert reconcile.status_events(running["conditions"], done) == [
        {"type": "Normal", "reason": "Succeeded",
         "message": "5 of 5 items done; resolved 40.0%"}]
    assert reconcile.status_events(done["conditions"], done) == []
    assert reconcile.status_events(running["conditions"], status("False", "True")) == [
        {"type": "Warning", "reason": "Degraded",
         "message": "ImagePullBackOff: t-1: not pulled"}]
