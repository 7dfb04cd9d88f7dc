"""Kueue: work-item Jobs created suspended in a queue, queued vs running items, the agent's
slots with queued Jobs, the patch kept at the end of the solve step, and a Job Kueue
suspends again (preempted) replaced by its next attempt without asking the agent twice.

Jobs and pods are shaped as the API returns them once Kueue (v0.17) and the Job controller
have acted: Kueue admits a Job by setting spec.suspend false and preempts it by setting it
true again; the Job controller then deletes its pods and sets its Suspended condition."""

from __future__ import annotations

import asyncio
import json
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from proctor.core.labels import KUEUE_QUEUE_NAME, LABEL_ATTEMPT, LABEL_ITEM
from proctor.core.model import Instance
from proctor.k8s.children import manifests as m
from proctor.k8s.children.podstatus import Phase, PodsByJob, item_state
from proctor.k8s.evaluation import reconcile
from proctor.k8s.evaluation.act import Pass, Tracked, restore_answers
from proctor.k8s.evaluation.metrics import Metrics
from proctor.k8s.evaluation.reconcile import (
    Decision,
    ItemView,
    build_status,
    conditions_for,
    decide,
)
from proctor.k8s.evaluation.status import status_reason
from proctor.k8s.features.kueue import Queued
from proctor.runner.solve import PATCH_BEGIN, PATCH_END, task_line
from support.api_servers import StandInApi, answer, read_json
from support.job_manifests import agent, evaluation, item_of, job_for, validate
from support.kueue_jobs import QUEUE, agent_eval, kueue_job, solving
from support.reconcile_views import ITEMS, NOW, job, ts

# --- The Jobs ------------------------------------------------------------------------------


def test_a_queue_name_makes_jobs_suspended_with_kueues_label(task) -> None:
    _, queued = job_for(evaluation(queueName=QUEUE), agent(), task)
    assert queued["metadata"]["labels"][KUEUE_QUEUE_NAME] == QUEUE
    assert queued["spec"]["suspend"] is True
    validate(queued)
    # The chart's default, when the spec names none; the spec's own wins.
    defaults = m.JobDefaults(queue_name="shared")
    _, by_default = job_for(evaluation(), agent(), task, defaults=defaults)
    assert by_default["metadata"]["labels"][KUEUE_QUEUE_NAME] == "shared"
    _, own = job_for(evaluation(queueName=QUEUE), agent(), task, defaults=defaults)
    assert own["metadata"]["labels"][KUEUE_QUEUE_NAME] == QUEUE
    # Without a queue: the Job as before, run at once.
    _, plain = job_for(evaluation(), agent(), task)
    assert "suspend" not in plain["spec"] and KUEUE_QUEUE_NAME not in plain["metadata"]["labels"]
    # Only the Job carries the label: Kueue manages the Job, not its pods.
    assert KUEUE_QUEUE_NAME not in queued["spec"]["template"]["metadata"]["labels"]


def test_the_operators_default_queue_is_read_and_a_bad_one_is_one_line() -> None:
    assert m.JobDefaults.from_env({"PROCTOR_JOB_QUEUE_NAME": "shared"}).queue_name == "shared"
    assert m.JobDefaults.from_env({"PROCTOR_JOB_QUEUE_NAME": ""}).queue_name == ""
    with pytest.raises(ValueError, match=r"^PROCTOR_JOB_QUEUE_NAME is 'Team A': give a "):
        m.JobDefaults.from_env({"PROCTOR_JOB_QUEUE_NAME": "Team A"})


# --- Queued vs running (pure) ---------------------------------------------------------------


def observe(jobs: list[dict], pods: list[dict], answers: dict[str, Any] | None = None,
            items=ITEMS) -> list[ItemView]:
    by_job = PodsByJob(pods)
    return reconcile.observe(items, jobs, {}, lambda j: item_state(j, by_job.of(j)),
                             {} if answers is None else answers)


def test_a_suspended_job_is_queued_and_an_admitted_one_runs() -> None:
    queued = item_state(kueue_job(0))
    assert (queued.phase, queued.reason, queued.since) == (Phase.QUEUED, "Queued", ts(30))
    assert QUEUE in queued.message
    admitted = kueue_job(0, suspended=False)
    assert item_state(admitted, [solving(admitted, ended=False)]).phase == Phase.RUNNING
    # Preempted: suspended again while its pod is still being deleted.
    again = kueue_job(0)
    assert item_state(again, [solving(again, ended=False)]).phase == Phase.QUEUED


def test_the_status_counts_queued_items_apart_from_running_ones() -> None:
    admitted = kueue_job(1, suspended=False)
    views = observe([kueue_job(0), admitted], [solving(admitted, ended=False)])
    tally = reconcile.counts(views)
    assert (tally.queued, tally.running, tally.pending, tally.waiting) == (1, 1, 0, 3)
    ev = agent_eval()
    decision = decide(ev, views, NOW)
    conditions = conditions_for([], views, decision, ts(0), 1)
    status = build_status(ev, "agent", views, [], conditions, generation=1, fingerprint="f")
    assert status["items"]["queued"] == 1 and status["items"]["running"] == 1
    running = next(c for c in conditions if c["type"] == "Running")
    assert "1 running, 0 pending, 1 queued in Kueue" in running["message"]
    # Only queued: nothing runs, and `kubectl get` says why.
    only = observe([kueue_job(0)], [])
    conditions = conditions_for([], only, decide(ev, only, NOW), ts(0), 1)
    running = next(c for c in conditions if c["type"] == "Running")
    assert (running["status"], running["reason"]) == ("False", "ItemsQueued")
    assert status_reason(conditions) == "ItemsQueued"


def test_queued_jobs_count_against_max_concurrent_rows() -> None:
    views = observe([kueue_job(0), kueue_job(1)], [])
    assert decide(agent_eval(maxConcurrentRows=2), views, NOW).start == []
    assert decide(agent_eval(maxConcurrentRows=3), views, NOW).start == [ITEMS[2]]


def test_a_queued_job_that_asks_the_agent_reserves_one_of_its_slots() -> None:
    """Kueue admits by quota and knows nothing of maxConcurrentTasks: the queued Jobs that
    ask the agent and the admitted ones never outnumber its slots."""
    ev = agent_eval(maxConcurrentRows=5)
    views = observe([kueue_job(0), kueue_job(1)], [])
    decision = decide(ev, views, NOW, agent_slots=3)
    assert decision.start == [ITEMS[2]] and decision.agent_tasks == 3
    assert decide(ev, views, NOW, agent_slots=2).start == []
    # A queued Job with a kept patch does not ask the agent: it reserves none.
    given = observe([kueue_job(0, asks=False), kueue_job(1)], [])
    assert decide(ev, given, NOW, agent_slots=2).start == [ITEMS[2]]


def test_a_queued_jobs_solve_step_ending_keeps_the_patch_once() -> None:
    admitted = kueue_job(0, suspended=False)
    pod = solving(admitted, ended=True)
    answers: dict[str, Any] = {}
    (view, *_) = observe([admitted], [pod], answers)
    assert view.asked and decide(agent_eval(), [view], NOW).keep_patch == [view]
    # Kept (or read and found empty): not again.
    uid = admitted["metadata"]["uid"]
    for kept in ({"metadata": {"name": "ev-patch-1"}}, {}):
        (view, *_) = observe([admitted], [pod], {uid: kept})
        assert decide(agent_eval(), [view], NOW).keep_patch == []
    # Still solving: nothing to keep yet. Not in a queue: as before, nothing kept early.
    (view, *_) = observe([admitted], [solving(admitted, ended=False)], answers)
    assert view.asked and decide(agent_eval(), [view], NOW).keep_patch == []
    plain = job(ITEMS[0])
    (view, *_) = observe([plain], [solving(plain, ended=True)], answers)
    assert not view.asked and decide(agent_eval(), [view], NOW).keep_patch == []


def test_a_queued_job_waiting_for_the_agent_has_its_task_noted_once() -> None:
    admitted = kueue_job(0, suspended=False)
    uid = admitted["metadata"]["uid"]
    (view, *_) = observe([admitted], [solving(admitted, ended=False)], {})
    assert view.asked and decide(agent_eval(), [view], NOW).read_task == [view]
    # Noted: not read again. Ended: its patch is kept instead. Not queued: never read.
    noted = reconcile.observe(ITEMS[:1], [admitted], {}, lambda j: item_state(
        j, [solving(j, ended=False)]), {}, {uid: "task-1"})
    assert noted[0].agent_task == "task-1" and decide(agent_eval(), noted, NOW).read_task == []
    (ended, *_) = observe([admitted], [solving(admitted, ended=True)], {})
    assert decide(agent_eval(), [ended], NOW).read_task == []
    plain = job(ITEMS[0])
    (view, *_) = observe([plain], [solving(plain, ended=False)], {})
    assert decide(agent_eval(), [view], NOW).read_task == []


def test_a_job_suspended_again_after_asking_the_agent_is_preempted() -> None:
    uid = kueue_job(0)["metadata"]["uid"]
    # Seen asking while admitted; now suspended, its pod deleted.
    (view, *_) = observe([kueue_job(0)], [], {uid: {"metadata": {"name": "ev-patch-1"}}})
    decision = decide(agent_eval(maxConcurrentRows=1), [view], NOW)
    assert decision.preempted == [view] and decision.start == []
    assert view.kept_patch == {"metadata": {"name": "ev-patch-1"}}
    # Preempted before the solve step started (never seen asking): Kueue runs it again.
    (fresh, *_) = observe([kueue_job(0)], [], {})
    assert decide(agent_eval(), [fresh], NOW).preempted == []


# --- The shell: keeping the patch, the next attempt -----------------------------------------


class ApiServer(StandInApi):
    """The API server: it records each call, answers a write with its body, a list of
    ConfigMaps with ``configmaps`` and the solve step's log with ``solve_log``."""

    def __init__(self, solve_log: str = "", configmaps: list[dict[str, Any]] = ()) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.solve_log, self.configmaps = solve_log, configmaps
        super().__init__(("GET", "POST", "DELETE"))

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        if request.command == "GET":
            self.calls.append(("GET", request.path, {}))
            if request.path.split("?")[0].endswith("/configmaps"):
                listed = {"kind": "ConfigMapList", "apiVersion": "v1",
                          "items": list(self.configmaps)}
                return answer(request, 200, json.dumps(listed).encode())
            return answer(request, 200, self.solve_log.encode(), "text/plain")
        body = read_json(request)
        self.calls.append((request.command, request.path, body))
        answer(request, 201 if request.command == "POST" else 200, json.dumps(body).encode())

    def created(self, kind: str) -> list[dict[str, Any]]:
        return [body for method, path, body in self.calls
                if method == "POST" and path.split("?")[0].endswith(f"/{kind}")]


def act(server: ApiServer, instance: Instance, tracked: Tracked, decision: Decision
        ) -> list[tuple[str, str]]:
    """Carry out ``decision`` as a pass does; the Events it posted (reason, message)."""
    ev = evaluation("demo", queueName=QUEUE)
    body = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
            "metadata": {"name": "demo", "namespace": "evals", "uid": "uid-1"}}
    events: list[tuple[str, str]] = []
    p = Pass(server.kube(), Metrics(CollectorRegistry()), None, body, tracked, ev, agent(),
             {instance.instance_id: instance},
             post=lambda _body, _type, reason, message: events.append((reason, message)))
    assert asyncio.run(p.act(decision)) == []
    return events


def item_job(instance: Instance, *, suspended: bool, kept: dict | None = None) -> dict:
    """The item's first attempt as the API server has it (a uid), admitted or suspended."""
    _, j = job_for(evaluation("demo", queueName=QUEUE), agent(), instance,
                   kept_patch=kept)
    j["metadata"]["uid"] = "job-uid-0"
    j["spec"]["suspend"] = suspended
    return j


def solving_view(task: Instance, tracked: Tracked, *, ended: bool) -> ItemView:
    """The item's first attempt, admitted, its solve step running or ended (`solving`),
    observed with what ``tracked`` remembers of the agent's answers."""
    admitted = item_job(task, suspended=False)
    (view,) = reconcile.observe([item_of(task)], [admitted], {},
                                lambda j: item_state(j, [solving(j, ended=ended)]),
                                tracked.queued.answers)
    return view


def test_the_patch_is_kept_when_the_solve_step_ends(task) -> None:
    tracked = Tracked("uid-1", "demo", queued=Queued(answers={"job-uid-0": None}))
    view = solving_view(task, tracked, ended=True)
    solve_log = f"asking the agent\n{PATCH_BEGIN}\n--- a/x\n+++ b/x\n{PATCH_END}\n"
    with ApiServer(solve_log) as server:
        assert act(server, task, tracked, Decision(keep_patch=[view])) == []
    (log_call,) = [c for c in server.calls if c[0] == "GET"]
    assert "/log?" in log_call[1] and "container=solve" in log_call[1]
    (kept,) = server.created("configmaps")
    assert kept["data"] == {"patch.diff": "--- a/x\n+++ b/x\n"}
    assert kept["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert tracked.queued.answers["job-uid-0"]["metadata"]["name"] == kept["metadata"]["name"]
    assert server.created("jobs") == []  # the Job goes on: nothing else is done


def act_preempted(task: Instance, view: ItemView
                  ) -> tuple[ApiServer, list[tuple[str, str]]]:
    """Carry out the preemption of ``view``'s attempt; the server (its calls) and the Events."""
    with ApiServer() as server:
        events = act(server, task, Tracked("uid-1", "demo"), Decision(preempted=[view]))
    return server, events


def preempted_view(task: Instance, kept: dict | None) -> ItemView:
    suspended = item_job(task, suspended=True)
    (view,) = reconcile.observe([item_of(task)], [suspended], {}, item_state,
                                {"job-uid-0": kept})
    return view


def test_a_preempted_job_is_replaced_with_the_kept_patch(task) -> None:
    patch = m.patch_configmap(evaluation("demo"), item_of(task), "--- a/x\n+++ b/x\n")
    view = preempted_view(task, patch)
    assert view.state is not None and view.state.phase == Phase.QUEUED
    server, events = act_preempted(task, view)
    (job_made,) = server.created("jobs")
    assert job_made["metadata"]["labels"][LABEL_ATTEMPT] == "1"
    assert job_made["metadata"]["labels"][KUEUE_QUEUE_NAME] == QUEUE
    assert job_made["spec"]["suspend"] is True
    assert not m.job_asks_agent(job_made)  # the agent is not asked twice
    sources = next(v for v in job_made["spec"]["template"]["spec"]["volumes"]
                   if v["name"] == "task")["projected"]["sources"]
    assert {"configMap": {"name": patch["metadata"]["name"],
                          "items": [{"key": "patch.diff", "path": "patch.diff"}]}} in sources
    assert [c[1].split("/")[-1] for c in server.calls if c[0] == "DELETE"] == [
        view.jobs[0]["metadata"]["name"]]
    assert not [c for c in server.calls if c[0] == "GET"]  # no log read: the patch was kept
    ((reason, message),) = events
    assert reason == "Preempted" and "attempt 2" in message and "reusing" in message


def test_a_job_preempted_before_the_agent_answered_asks_it_again(task) -> None:
    view = preempted_view(task, None)
    server, events = act_preempted(task, view)
    (job_made,) = server.created("jobs")
    assert job_made["metadata"]["labels"][LABEL_ATTEMPT] == "1" and m.job_asks_agent(job_made)
    ((reason, message),) = events
    assert reason == "Preempted" and "answer never arrived" in message


def test_a_restarted_operator_knows_the_answers_kept_before(task) -> None:
    """Its memory gone, the kept patches say which queued Jobs got their answer: one of
    them preempted after the restart is still not run again as it is."""
    patch = m.patch_configmap(evaluation("demo"), item_of(task), "--- a/x\n+++ b/x\n")
    asking = item_job(task, suspended=True)
    retried = item_job(task, suspended=True, kept=patch)  # reuses a patch: asks nothing
    retried["metadata"]["uid"] = "job-uid-1"
    other = item_job(task, suspended=True)
    other["metadata"] |= {"uid": "job-uid-2", "labels": {
        **other["metadata"]["labels"], LABEL_ITEM: "f" * 32}}
    assert reconcile.restored_answers([asking, retried, other], [patch]) == {
        "job-uid-0": patch}
    tracked = Tracked("uid-1", "demo")
    with ApiServer(configmaps=[patch]) as server:
        for _ in range(2):  # listed once
            asyncio.run(restore_answers(server.kube(), evaluation("demo", queueName=QUEUE),
                                        tracked, [asking]))
    (listed,) = [path for method, path, _ in server.calls if method == "GET"]
    assert "labelSelector=" in listed and "kept-patch" in listed
    assert tracked.queued.answers == {"job-uid-0": patch}
    (view,) = reconcile.observe([item_of(task)], [asking], {}, item_state, tracked.queued.answers)
    assert reconcile.preempted(view) and view.kept_patch == patch


def test_the_agents_task_is_read_from_the_solve_log(task) -> None:
    tracked = Tracked("uid-1", "demo", queued=Queued(answers={"job-uid-0": None}))
    view = solving_view(task, tracked, ended=False)
    with ApiServer(f"{task_line('t-42')}\nwaiting for the agent\n") as server:
        assert act(server, task, tracked, Decision(read_task=[view])) == []
    (log_call,) = [c for c in server.calls if c[0] == "GET"]
    assert "container=solve" in log_call[1]
    assert tracked.queued.task_ids == {"job-uid-0": "t-42"} and server.created("jobs") == []


def test_a_job_preempted_while_the_agent_works_follows_its_task(task) -> None:
    suspended = item_job(task, suspended=True)
    (view,) = reconcile.observe([item_of(task)], [suspended], {}, item_state,
                                {"job-uid-0": None}, {"job-uid-0": "t-42"})
    server, events = act_preempted(task, view)
    (job_made,) = server.created("jobs")
    (solve,) = [c for c in job_made["spec"]["template"]["spec"]["initContainers"]
                if c["name"] == "solve"]
    assert "--resume-task=t-42" in solve["command"]  # the same task, not sent again
    ((reason, message),) = events
    assert reason == "Preempted" and "following the agent's task t-42" in message
