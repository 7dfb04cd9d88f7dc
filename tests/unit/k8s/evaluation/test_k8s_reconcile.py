"""The reconcile decision, pass by pass, on observed Jobs and pods (pure)."""

from __future__ import annotations

import json
import random
from datetime import timedelta

from proctor.core.model import ErrorKind, Outcome, WorkItem
from proctor.k8s.evaluation.reconcile import (
    Settings,
    build_status,
    conditions_for,
    counts,
    decide,
    in_play,
    invalid_conditions,
)
from proctor.k8s.evaluation.status import status_reason
from support.reconcile_views import (
    ITEMS,
    NOW,
    evaluation,
    job,
    observe,
    pod_for,
    pulling,
    result,
    ts,
)


def test_starts_no_more_than_max_concurrent_rows():
    views = observe(ITEMS, [], [], [], {})
    assert decide(evaluation(), views, NOW).start == ITEMS[:2]


def test_running_jobs_use_up_the_slots():
    jobs = [job(ITEMS[0])]
    views = observe(ITEMS, jobs, [pod_for(jobs[0], "Running")], [], {})
    assert decide(evaluation(), views, NOW).start == [ITEMS[1]]


def test_suspend_starts_nothing():
    views = observe(ITEMS, [], [], [], {})
    decision = decide(evaluation(suspend=True), views, NOW)
    assert decision.start == []
    conditions = conditions_for([], views, decision, ts(0), 1, suspended=True)
    running = next(c for c in conditions if c["type"] == "Running")
    assert (running["status"], running["reason"]) == ("False", "Suspended")
    assert status_reason(conditions) == "Suspended"


def test_the_status_reason_says_what_stops_it_first():
    views = observe(ITEMS, [], [], [], {})
    decision = decide(evaluation(), views, NOW)
    assert status_reason(conditions_for([], views, decision, ts(0), 1)) == "Idle"
    decision.degraded = ("FailedCreate", "forbidden")
    conditions = conditions_for([], views, decision, ts(0), 1, suspended=True)
    assert status_reason(conditions) == "FailedCreate"
    refused = invalid_conditions(conditions, "AgentNotFound", "no agent", ts(0), 2)
    assert status_reason(refused) == "AgentNotFound"
    done = observe(ITEMS, [], [], [], {i.id: result(i) for i in ITEMS})
    assert status_reason(conditions_for([], done, decide(evaluation(), done, NOW), ts(0),
                                        1)) == "AllItemsDone"


def test_kept_results_are_done_and_their_jobs_cleaned_up():
    jobs = [job(ITEMS[0], 0, "Complete")]
    views = observe(ITEMS, jobs, [], [], {ITEMS[0].id: result(ITEMS[0])})
    decision = decide(evaluation(), views, NOW)
    assert decision.stop == jobs and ITEMS[0] not in decision.start
    assert counts(views).done == 1 and counts(views).waiting == 4


def test_an_evicted_attempt_is_retried_then_given_up():
    first = job(ITEMS[0], 0, "Failed", reason="BackoffLimitExceeded")
    evicted = pod_for(first, "Failed", reason="Evicted", message="ephemeral storage")
    views = observe(ITEMS[:1], [first], [evicted], [], {})
    assert [v.item for v in decide(evaluation(), views, NOW).retry] == [ITEMS[0]]
    last = job(ITEMS[0], 2, "Failed", reason="BackoffLimitExceeded")
    views = observe(ITEMS[:1], [first, last], [pod_for(last, "Failed", reason="Evicted")], [],
                    {})
    decision = decide(evaluation(), views, NOW)
    assert decision.retry == []
    (_, failed), = decision.give_up
    assert (failed.outcome, failed.error_kind, failed.attempts) == (Outcome.ERROR,
                                                                   ErrorKind.INFRA, 3)
    assert "after 3 attempts" in failed.error_message


def test_an_image_pull_stuck_past_the_limit_is_stopped_and_retried():
    j = job(ITEMS[0])
    settings = Settings(image_pull_timeout_s=300)
    fresh = observe(ITEMS[:1], [j], [pulling(j, since=60)], [], {})
    decision = decide(evaluation(), fresh, NOW, settings)
    assert decision.retry == [] and decision.stop == []
    assert decision.degraded[0] == "ImagePullBackOff"
    stale = observe(ITEMS[:1], [j], [pulling(j, since=900)], [], {})
    decision = decide(evaluation(), stale, NOW, settings)
    assert decision.stop == [j] and [v.item for v in decision.retry] == [ITEMS[0]]


def test_a_failed_step_is_not_retried():
    j = job(ITEMS[0], 0, "Failed", reason="BackoffLimitExceeded")
    failed_pod = pod_for(j, "Failed", initContainerStatuses=[
        {"name": "test", "state": {"terminated": {"exitCode": 3, "reason": "Error",
                                                 "startedAt": ts(20), "finishedAt": ts(15)}}}])
    decision = decide(evaluation(), observe(ITEMS[:1], [j], [failed_pod], [], {}), NOW)
    (_, failed), = decision.give_up
    assert failed.error_kind == ErrorKind.SANDBOX and decision.retry == []


def test_failed_create_degrades_with_the_cause():
    j = job(ITEMS[0])
    event = {"type": "Warning", "reason": "FailedCreate",
             "message": 'pods "x" is forbidden: violates PodSecurity "restricted:latest"',
             "involvedObject": {"kind": "Job", "name": j["metadata"]["name"]},
             "lastTimestamp": ts(30)}
    views = observe(ITEMS[:1], [j], [], [event], {})
    decision = decide(evaluation(), views, NOW)
    assert decision.degraded[0] == "FailedCreate" and "PodSecurity" in decision.degraded[1]
    conditions = conditions_for([], views, decision, ts(0), 1)
    degraded = next(c for c in conditions if c["type"] == "Degraded")
    assert degraded["status"] == "True" and "PodSecurity" in degraded["message"]


def test_status_is_rebuilt_from_observations():
    kept = {i.id: result(i, o) for i, o in zip(ITEMS, [Outcome.RESOLVED, Outcome.NO_OP],
                                              strict=False)}
    views = observe(ITEMS, [], [], [], kept)
    decision = decide(evaluation(), views, NOW)
    status = build_status(evaluation(), "gold", views, list(kept.values()),
                          conditions_for([], views, decision, ts(0), 3), generation=3,
                          fingerprint="abc")
    assert status["items"]["done"] == 2 and status["items"]["total"] == 5
    assert status["results"]["resolvedPct"] == 0.5
    assert status["observedGeneration"] == 3 and "completionTime" not in status
    assert "proctor.dev/evaluation=ev" in status["resultsRef"]["labelSelector"]


def test_a_finished_job_whose_pod_is_not_seen_yet_is_waited_for():
    j = job(ITEMS[0], 0, "Complete")
    j["status"]["completionTime"] = ts(5)
    decision = decide(evaluation(), observe(ITEMS[:1], [j], [], [], {}), NOW)
    assert decision.harvest == decision.retry == decision.give_up == [] and not decision.start
    j["status"]["completionTime"] = ts(600)
    decision = decide(evaluation(), observe(ITEMS[:1], [j], [], [], {}), NOW)
    assert [v.item for v in decision.retry] == [ITEMS[0]]  # its result is lost: try again


def first_graded_second_running() -> tuple[list[dict], list[dict]]:
    """The Jobs of the first two items: the first's pod graded (resolved), the second's
    running."""
    jobs = [job(ITEMS[0]), job(ITEMS[1])]
    graded = {"name": "grade", "state": {"terminated": {
        "exitCode": 0, "reason": "Completed", "startedAt": ts(20), "finishedAt": ts(15),
        "message": json.dumps({"item": ITEMS[0].id, "outcome": "resolved"})}}}
    return jobs, [pod_for(jobs[0], "Succeeded", containerStatuses=[graded]),
                  pod_for(jobs[1], "Running")]


def test_a_job_whose_pod_ended_frees_its_slot_before_its_terminal_condition():
    # The pod watch tells of the end about a second before a real Job controller marks
    # the Job Complete (it batches pod updates): the slot is free from the pod's end.
    jobs, pods = first_graded_second_running()
    decision = decide(evaluation(), observe(ITEMS, jobs, pods, [], {}), NOW)
    assert [v.item for v in decision.harvest] == [ITEMS[0]] and decision.start == [ITEMS[2]]
    # A Job terminal before its pod's end is seen frees it too (and its pod is waited for).
    jobs[0] = job(ITEMS[0], 0, "SuccessCriteriaMet", "Complete")
    decision = decide(evaluation(), observe(ITEMS, jobs, pods, [], {}), NOW)
    assert [v.item for v in decision.harvest] == [ITEMS[0]] and decision.start == [ITEMS[2]]
    pods[1]["status"]["phase"] = "Failed"  # evicted, say: it keeps its slot for its retry
    pods[1]["status"]["reason"] = "Evicted"
    decision = decide(evaluation(), observe(ITEMS, jobs, pods, [], {}), NOW)
    assert [v.item for v in decision.retry] == [ITEMS[1]] and decision.start == [ITEMS[2]]


def test_while_the_agent_is_not_ready_nothing_starts_and_the_evaluation_says_why():
    """An unreachable agent: the Evaluation waits (Ready=False, AgentNotReady) instead of
    starting items that would each end as an agent error; what is in flight is kept as it
    ends; once the agent is ready again, items start."""
    jobs, pods = first_graded_second_running()
    views = observe(ITEMS, jobs, pods, [], {})
    decision = decide(evaluation(), views, NOW, agent_slots=8, agent_ready=False)
    assert decision.start == [] and [v.item for v in decision.harvest] == [ITEMS[0]]
    waiting = ("AgentNotReady", "AgentUnderTest mixed is not ready (Unreachable: agent "
                                "unreachable at http://mixed.agents:9009/)")
    conditions = conditions_for([], views, decision, ts(0), 1, agent_waiting=waiting)
    ready = next(c for c in conditions if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", *waiting)
    running = next(c for c in conditions if c["type"] == "Running")
    assert "waiting for the agent" in running["message"]
    assert status_reason(conditions) == "AgentNotReady"
    decision = decide(evaluation(), views, NOW, agent_slots=8)  # ready again
    assert decision.start == [ITEMS[2]]
    conditions = conditions_for(conditions, views, decision, ts(0), 1)
    assert status_reason(conditions) == "ItemsInFlight"
    assert next(c for c in conditions if c["type"] == "Ready")["status"] == "True"


def test_a_finished_evaluation_does_not_wait_for_its_agent():
    done = observe(ITEMS, [], [], [], {i.id: result(i) for i in ITEMS})
    decision = decide(evaluation(), done, NOW, agent_ready=False)
    conditions = conditions_for([], done, decision, ts(0), 1,
                                agent_waiting=("AgentNotReady", "gone"))
    assert status_reason(conditions) == "AllItemsDone"


def test_a_kept_result_frees_its_slot_and_its_jobs_are_deleted():
    jobs = [job(ITEMS[0]), job(ITEMS[1])]
    kept = {ITEMS[0].id: result(ITEMS[0])}
    pods = [pod_for(jobs[1], "Running")]
    decision = decide(evaluation(), observe(ITEMS, jobs, pods, [], kept), NOW)
    assert decision.stop == [jobs[0]] and decision.start == [ITEMS[2]]
    decision = decide(evaluation(), observe(ITEMS, jobs[1:], pods, [], kept), NOW)
    assert decision.stop == [] and decision.start == [ITEMS[2]]


def test_deciding_on_the_items_in_play_decides_as_on_every_item():
    items = [WorkItem(id=f"{i:032x}", instance_id=f"t-{i // 3}") for i in range(40)]
    kinds = ["none", "none", "running", "complete", "pod-done", "evicted", "pulling-stale",
             "kept", "kept-with-job"]
    rng, chosen_sizes = random.Random(7), []
    for world in range(300):
        rows, busyness = rng.choice([1, 2, 3, 5]), rng.random()
        jobs, pods, kept = [], [], {}
        for item in items:
            kind = rng.choice(kinds) if rng.random() < busyness else "none"
            j = job(item)
            if kind == "running":
                jobs.append(j), pods.append(pod_for(j, "Running"))
            elif kind in ("complete", "pod-done"):
                j = job(item, 0, *(("SuccessCriteriaMet", "Complete") if kind == "complete"
                                   else ()))
                jobs.append(j), pods.append(pod_for(j, "Succeeded"))
            elif kind == "evicted":
                j = job(item, rng.choice([0, 2]), "Failed", reason="BackoffLimitExceeded")
                jobs.append(j), pods.append(pod_for(j, "Failed", reason="Evicted"))
            elif kind == "pulling-stale":
                jobs.append(j), pods.append(pulling(j, since=900))
            elif kind in ("kept", "kept-with-job"):
                kept[item.id] = result(item)
                if kind == "kept-with-job":
                    jobs.append(job(item, 0, "Complete"))
        ev = evaluation(maxConcurrentRows=rows, suspend=world % 10 == 0)
        every = decide(ev, observe(items, jobs, pods, [], kept), NOW)
        chosen = in_play(items, jobs, set(kept), rows)
        chosen_sizes.append(len(chosen))
        some = decide(ev, observe(chosen, jobs, pods, [], kept), NOW)

        def ids(views):
            return [v.item.id for v in views]
        assert (some.start, some.stop, some.degraded) == (
            every.start, every.stop, every.degraded), world
        assert (ids(some.harvest), ids(some.retry), ids(v for v, _ in some.give_up)) == (
            ids(every.harvest), ids(every.retry), ids(v for v, _ in every.give_up)), world
    assert sum(chosen_sizes) < 0.8 * len(items) * len(chosen_sizes)  # fewer views to build


def test_the_running_condition_says_why_items_wait():
    nowhere = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    unschedulable = [job(ITEMS[i]) for i in range(2)]
    pods = [pod_for(j, "Pending", conditions=[{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": nowhere, "lastTransitionTime": ts(20)}]) for j in unschedulable]
    slow = job(ITEMS[2])
    views = observe(ITEMS[:3], [*unschedulable, slow], [*pods, pulling(slow, 10)], [], {})
    decision = decide(evaluation(), views, NOW)
    running = next(c for c in conditions_for([], views, decision, ts(0), 1)
                   if c["type"] == "Running")
    assert running["message"] == (f"0 running, 3 pending (2 Unschedulable, 1 ImagePullBackOff: "
                                  f"{nowhere})")
    # Nothing waits: the counts alone.
    done = observe(ITEMS[:1], [], [], [], {ITEMS[0].id: result(ITEMS[0])})
    idle = next(c for c in conditions_for([], done, decide(evaluation(), done, NOW), ts(0), 1)
                if c["type"] == "Running")
    assert idle["message"] == "0 running, 0 pending"


def unanswered_pod(j: dict, item: WorkItem, ended_ago: float, unanswered: bool = True) -> dict:
    """A pod whose agent error was (or was not) the transport failing: it never answered."""
    graded = {"name": "grade", "state": {"terminated": {
        "exitCode": 0, "reason": "Completed", "startedAt": ts(ended_ago + 5),
        "finishedAt": ts(ended_ago), "message": json.dumps({
            "item": item.id, "outcome": "error", "error_kind": "agent",
            "unanswered": unanswered})}}}
    return pod_for(j, "Succeeded", containerStatuses=[graded])


def test_an_item_the_agent_never_answered_waits_for_its_card_then_is_asked_again():
    """The agent went away mid-run: its item is not kept as an error. It waits, with a
    condition that says so, until the card answers after the attempt ended; then the next
    attempt asks the agent again, before any new item starts."""
    jobs = [job(ITEMS[0], 0, "Complete"), job(ITEMS[1])]
    pods = [unanswered_pod(jobs[0], ITEMS[0], 15), pod_for(jobs[1], "Running")]
    views = observe(ITEMS, jobs, pods, [], {})
    stale = NOW - timedelta(seconds=60)  # the card last answered before the failure
    decision = decide(evaluation(), views, NOW, agent_slots=8, card_at=stale)
    assert decision.harvest == [] and decision.give_up == [] and decision.ask_again == []
    assert [v.item for v in decision.awaiting_card] == [ITEMS[0]]
    conditions = conditions_for([], views, decision, ts(0), 1)
    ready = next(c for c in conditions if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "AgentNotAnswering")
    assert next(c for c in conditions if c["type"] == "Succeeded")["status"] == "False"
    assert counts(views).waiting == 4 and counts(views).done == 0
    assert decide(evaluation(), views, NOW, agent_ready=False, card_at=NOW).ask_again == []
    back = decide(evaluation(), views, NOW, agent_slots=8, card_at=NOW)
    assert [v.item for v in back.ask_again] == [ITEMS[0]] and back.start == []
    assert back.awaiting_card == [] and back.agent_tasks == 1  # the one asked again


def test_after_three_unanswered_items_nothing_new_starts_until_the_card_answers():
    """The engine's dead-agent rule on the cluster: three items the agent never answered
    since its card last did, and no new item starts; once it answers, they go first."""
    jobs = [job(i, 0, "Complete") for i in ITEMS[:3]]
    pods = [unanswered_pod(j, i, 15) for j, i in zip(jobs, ITEMS, strict=False)]
    views = observe(ITEMS, jobs, pods, [], {})
    spec = {"maxConcurrentRows": 4}
    two = decide(evaluation(**spec), views[:2] + views[3:], NOW, card_at=None)
    assert two.start == [ITEMS[3], ITEMS[4]]  # two failures: not yet the rule
    gone = decide(evaluation(**spec), views, NOW, card_at=None)
    assert gone.start == [] and len(gone.awaiting_card) == 3
    back = decide(evaluation(**spec), views, NOW, card_at=NOW)
    assert [v.item for v in back.ask_again] == ITEMS[:3] and back.start == [ITEMS[3]]


def test_an_unanswered_item_with_no_retries_left_and_a_real_agent_error_are_kept():
    """Asked as many times as an infrastructure failure is retried, then kept as an agent
    error; an error the agent answered is its answer, kept at once."""
    last = job(ITEMS[0], 2, "Complete")
    answered = job(ITEMS[1], 0, "Complete")
    pods = [unanswered_pod(last, ITEMS[0], 15),
            unanswered_pod(answered, ITEMS[1], 15, unanswered=False)]
    views = observe(ITEMS[:2], [last, answered], pods, [], {})
    decision = decide(evaluation(), views, NOW, card_at=None)
    assert [v.item for v in decision.harvest] == ITEMS[:2]
    assert decision.awaiting_card == [] and decision.ask_again == []
