"""The kopf operator: thin handlers around one level-based reconcile per Evaluation.

Every trigger (the Evaluation seen or changed, a timer, a change of one of its Jobs, one
of its pods ending) only *kicks* `Reconciler.reconcile` for that Evaluation; a kick
during a pass makes one more pass after it (at least `PASS_SECONDS` after the last
began), never two at once. A pass reads the world from caches that watches keep current
(kopf's indexes of Evaluations and AgentUnderTests; `Informer`s of the Jobs, pods, kept
results and Warning events, too many changes for kopf's per-event handling),
asks the pure `proctor.k8s.reconcile.decide` what to do, and sets it going: each item's
API calls (create its Job, read its logs and keep its result, retry it, delete its Job)
run beside the passes, and `Recent` makes what was just written count before the
watches show it. Between passes, a Job that succeeds, or is deleted with its result kept,
hands its slot to the next item in line at once (`Handoff`). The status, rebuilt from
every item as observed, is built and written beside the passes (`_publish`), at most
every `STATUS_SECONDS`. See `proctor.k8s.reconcile` for the rules.

Run it with `proctor operator` (in the chart's Deployment) or `kopf run -m
proctor.k8s.operator`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import gc
import logging
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Set
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

import kopf

from proctor import __version__, dataset
from proctor.exporter import Metrics
from proctor.k8s.api import Kube, load_config
from proctor.k8s.conditions import (
    SERVICE_MODE_UNSUPPORTED,
    agent_conditions,
    agent_mode,
    agent_status,
    set_condition,
)
from proctor.k8s.handoff import Handoff
from proctor.k8s.informer import Informer
from proctor.k8s.manifests import (
    COMPONENT,
    LABEL_EVALUATION,
    MANAGED_BY,
    desired_job,
    owner_labels,
    patch_configmap,
    task_configmap,
)
from proctor.k8s.names import job_name
from proctor.k8s.podstatus import (
    PodsOfJob,
    StateMemo,
    item_state,
    job_finished,
    job_name_of,
    pod_ended,
)
from proctor.k8s.recent import Recent
from proctor.k8s.reconcile import (
    Decision,
    ItemView,
    Settings,
    build_status,
    conditions_for,
    decide,
    failure_result,
    harvested_result,
    in_play,
    invalid_conditions,
    item_of,
    observe,
)
from proctor.k8s.store import RESULT_KIND, read_result, result_configmap
from proctor.manifest import ManifestError, parse_resource
from proctor.metrics import aggregate
from proctor.model import Instance, RunResult, WorkItem
from proctor.prepare import Refusal, agent_label, check_runnable, load_selection, plan_items
from proctor.runner.artifacts import parse_grade_log
from proctor.runner.solve import patch_from_log
from proctor.spec import AgentUnderTest, Evaluation

log = logging.getLogger("proctor.operator")
Obj = dict[str, Any]
Key = tuple[str, str]


Unusable = Refusal


def _iso(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


class Reconciler:
    """Runs passes, one at a time per Evaluation, with the operator's shared state."""

    def __init__(self, kube: Kube, metrics: Metrics, settings: Settings,
                 runner_image: str | None = None):
        self.kube, self.metrics, self.settings = kube, metrics, settings
        self.runner_image = runner_image
        self._running: dict[Key, asyncio.Task] = {}
        self._dirty: set[Key] = set()
        self._datasets: dict[tuple, dataset.Selection] = {}
        self._plans: dict[str, tuple[tuple, list[WorkItem]]] = {}
        """Per Evaluation uid, its items, planned for its latest spec generation."""
        self._tasks: dict[str, tuple[Any, dict[str, Obj]]] = {}
        """Per Evaluation uid, its task ConfigMaps by instance, for its latest generation."""
        self._parsed: dict[str, tuple[int | None, Any]] = {}
        """Per Evaluation or AgentUnderTest uid, its latest spec generation, parsed."""
        self.indexes: Mapping[str, Any] | None = None
        """kopf's live indexes of Evaluations and AgentUnderTests (below)."""
        self.kopf_context = contextvars.copy_context()
        """The context kopf runs handlers in (set by the first handler; see `_attach`)."""
        self._informers: dict[Key, Informer] = {}
        """Per (namespace, kind), caches of the items' Jobs, pods and kept results and of
        Warning events (see `_new_informer`)."""
        self._started: dict[Key, asyncio.Future] = {}
        self._evaluations: dict[Key, Key] = {}
        """(namespace, Evaluation label) of the children -> (namespace, name) to reconcile."""
        self._states: dict[Key, StateMemo] = {}
        self._status_states: dict[Key, StateMemo] = {}
        """Per Evaluation, its items' states as last read by a pass, and by `_publish`."""
        self._publishing: set[Key] = set()
        self._publish_again: set[Key] = set()
        self._recent: dict[Key, tuple[str, Recent]] = {}
        """Per Evaluation (and its uid), what this process wrote that watches may not show."""
        self._work: set[asyncio.Task] = set()
        """Job creations, harvests, retries and clean-ups going on beside the passes."""
        self._chores = asyncio.Semaphore(CHORES_AT_ONCE)
        self._began: dict[Key, float] = {}
        self._status_at: dict[Key, float] = {}
        self._written: dict[Key, Obj] = {}
        self._later: set[Key] = set()
        self._in_flight: dict[Key, dict[Key, int]] = {}
        """Per AgentUnderTest, its tasks in flight per Evaluation."""
        self._handoffs: dict[Key, Handoff] = {}
        """Per Evaluation, the items next in line for the slots of Jobs that end well."""

    def kick(self, key: Key) -> None:
        """Reconcile `key` soon; once more after the current pass if one is running."""
        if key in self._running:
            self._dirty.add(key)
            return
        # Passes run in kopf's context (kopf.warn needs it), whoever kicks them: a handler,
        # a timer, or a watch thread of ours.
        self._running[key] = asyncio.get_running_loop().create_task(
            self._passes(key), context=self.kopf_context.copy())

    async def _passes(self, key: Key) -> None:
        try:
            while True:
                # Changes keep coming while Jobs run: one pass takes in all that came
                # since the last, and the gap leaves the loop to kopf's watches.
                await asyncio.sleep(max(0.0, self._began.get(key, 0.0) + PASS_SECONDS
                                        - time.monotonic()))
                self._dirty.discard(key)
                self._began[key] = time.monotonic()
                await self.reconcile(*key)
                if key not in self._dirty:
                    return
        finally:
            self._running.pop(key, None)

    async def idle(self) -> None:
        """Wait until no pass and no work is under way (tests, shutdown)."""
        while self._running or self._work:
            await asyncio.gather(*self._running.values(), *self._work, return_exceptions=True)

    def forget_object(self, uid: str) -> None:
        """An Evaluation or AgentUnderTest is gone: so are its parsed spec and plan."""
        self._parsed.pop(uid, None)
        self._plans.pop(uid, None)
        self._tasks.pop(uid, None)

    async def forget(self, key: Key, uid: str) -> None:
        """The Evaluation is gone (its agent has its tasks no more)."""
        self.forget_object(uid)
        for memo in (self._recent, self._states, self._status_states, self._status_at,
                     self._written, self._began, self._handoffs):
            memo.pop(key, None)
        for agent, busy in list(self._in_flight.items()):
            if busy.pop(key, None):
                await self.write_agent_status(*agent)

    async def _agent_busy(self, evaluation: Key, agent: Key, in_flight: int) -> None:
        """Note the Evaluation's tasks in flight on its agent; its status says their sum."""
        busy = self._in_flight.setdefault(agent, {})
        if busy.get(evaluation) != in_flight:
            busy[evaluation] = in_flight
            await self.write_agent_status(*agent)

    async def write_agent_status(self, namespace: str, name: str) -> None:
        """An AgentUnderTest's status: mode, endpoint, tasks in flight over every
        Evaluation this operator runs, and Ready."""
        body = self._latest("proctor_agents", (namespace, name))
        if body is None:
            return
        generation = body["metadata"].get("generation")
        old = (body.get("status") or {}).get("conditions") or []
        now = _iso(datetime.now(UTC))
        try:
            agent = self._parse(body)
        except ManifestError as exc:
            status = {"conditions": set_condition(old, "Ready", False, "InvalidSpec",
                                                  str(exc)[:1000], now=now,
                                                  observed_generation=generation),
                      "observedGeneration": generation}
        else:
            status = agent_status(agent, generation=generation,
                                  tasks_in_flight=sum(self._in_flight.get((namespace, name),
                                                                          {}).values()),
                                  conditions=agent_conditions(old, agent, now=now,
                                                              generation=generation))
        if not _same(body.get("status") or {}, status):
            await asyncio.to_thread(self.kube.patch_status, "agentundertests", namespace, name,
                                    status)

    def kick_later(self, key: Key, delay: float) -> None:
        """A pass in `delay` seconds (once, however often asked meanwhile)."""
        if key not in self._later:
            self._later.add(key)
            asyncio.get_running_loop().call_later(delay, self._kick_now, key)

    def _kick_now(self, key: Key) -> None:
        self._later.discard(key)
        self.kick(key)

    def _recent_for(self, key: Key, uid: str) -> Recent:
        known = self._recent.get(key)
        if known is None or known[0] != uid:  # a new Evaluation of the same name
            known = self._recent[key] = (uid, Recent())
        return known[1]

    async def reconcile(self, namespace: str, name: str) -> None:
        started = time.perf_counter()
        try:
            await self._reconcile(namespace, name)
        except Exception:
            self.metrics.reconcile_errors.inc()
            log.exception("Reconcile failed evaluation=%s/%s", namespace, name)
        finally:
            took = time.perf_counter() - started
            self.metrics.reconcile_seconds.observe(took)
            log.debug("Reconciled evaluation=%s/%s in %.0f ms", namespace, name, 1000 * took)

    # --- one pass --------------------------------------------------------------------

    async def _reconcile(self, namespace: str, name: str) -> None:
        body = self._latest("proctor_evaluations", (namespace, name))
        if body is None:
            return
        now = datetime.now(UTC)
        generation = body["metadata"].get("generation")
        old = (body.get("status") or {}).get("conditions") or []
        key = (namespace, name)
        selection = None
        try:
            evaluation = self._parse(body)
            check_runnable(evaluation, on_cluster=True)
            selection = await self._dataset(evaluation)
            agent = await self._agent(evaluation)
        except (ManifestError, Unusable) as exc:
            self._handoffs.pop(key, None)  # its line is no longer to start
            reason, message = (exc.reason, exc.message) if isinstance(exc, Unusable) \
                else ("InvalidSpec", str(exc))
            await self._write_status(key, body, {
                "conditions": invalid_conditions(old, reason, message, _iso(now), generation),
                "observedGeneration": generation})
            if selection is not None:  # only its agent is missing: keep what ran
                await self._wind_down(key, body, evaluation, selection, now)
            return
        items, recent, views, decision = await self._decide(key, body, evaluation, selection,
                                                            now)
        self._act(key, body, evaluation, agent, selection.by_id, views, decision, recent)
        wait = self._status_at.get(key, 0.0) + STATUS_SECONDS - time.monotonic()
        if wait > 0:  # the status and metrics of a busy Evaluation: once a second at most
            self.kick_later(key, wait)
        elif key in self._publishing:  # one at a time; the pass after it writes the next
            self._publish_again.add(key)
        else:
            self._status_at[key] = time.monotonic()
            self._publishing.add(key)
            self._spawn(self._publish(key, body, evaluation, agent, selection, items, recent,
                                      decision))

    async def _decide(self, key: Key, body: Obj, evaluation: Evaluation,
                      selection: dataset.Selection, now: datetime
                      ) -> tuple[list[WorkItem], Recent, list[ItemView], Decision]:
        """The items, what this process wrote, the items in play as observed, and what to
        do with them."""
        items = self._plan(evaluation, body, selection)
        recent = self._recent_for(key, body["metadata"].get("uid", ""))
        world = await self._observe(evaluation, recent)
        views, _ = _views(items, world, self._states.setdefault(key, StateMemo()),
                          in_play_of=(recent.busy, evaluation.spec.max_concurrent_rows))
        return items, recent, views, decide(evaluation, views, now, self.settings, recent.busy)

    async def _wind_down(self, key: Key, body: Obj, evaluation: Evaluation,
                         selection: dataset.Selection, now: datetime) -> None:
        """The Evaluation cannot go on (its agent is gone, say): start and retry nothing,
        but keep the results of the Jobs that run to their end meanwhile, and give up on
        those that fail for good, so that nothing already obtained is lost. (Its hand-off
        line is left empty: a Job that ends hands its slot to no one.)"""
        _, recent, views, decision = await self._decide(key, body, evaluation, selection, now)
        self._act(key, body, evaluation, None, selection.by_id, views,
                  replace(decision, start=[], ahead=[], retry=[]), recent)

    async def _publish(self, key: Key, body: Obj, evaluation: Evaluation,
                       agent: AgentUnderTest | None, selection: dataset.Selection,
                       items: list[WorkItem], recent: Recent, decision: Decision) -> None:
        """Rebuild the status and metrics from every item as observed now, and write them.
        Beside the passes, so that refilling a slot never waits for it: at 2,000 items it
        costs some tens of milliseconds, and the write as long again. The pure part runs in
        a thread, which leaves the event loop (and the watches, and the Jobs' creations)
        free to go on meanwhile."""
        try:
            world = await self._observe(evaluation, recent)  # with the Jobs just created
            memo = self._status_states.setdefault(key, StateMemo())
            status, summary = await asyncio.to_thread(
                _status_of, evaluation, body, items, world, memo, decision, selection)
            await self._write_status(key, body, status)
            self.metrics.publish(*key, agent_label(evaluation), summary, status["items"])
            if agent is not None:
                await self._agent_busy(key, (agent.namespace, agent.name),
                                       status["items"]["running"] + status["items"]["pending"])
        except Exception:
            self.metrics.reconcile_errors.inc()
            log.exception("Writing the status failed evaluation=%s/%s", *key)
        finally:
            self._publishing.discard(key)
            if key in self._publish_again:
                self._publish_again.discard(key)
                self.kick(key)

    def _parse(self, body: Obj) -> Any:
        """An Evaluation or AgentUnderTest, checked against its CRD's schema (and CEL rules)
        once per uid and spec generation, not on every pass."""
        meta = body["metadata"]
        return _once_per(self._parsed, meta.get("uid", ""), meta.get("generation"),
                         lambda: parse_resource(body))

    def _latest(self, index: str, key: Key) -> Obj | None:
        """The object as kopf's watch last delivered it (an index of one per key)."""
        assert self.indexes is not None, "passes are kicked by handlers, which attach them"
        found = self.indexes[index].get(key)
        return next(iter(found), None) if found is not None else None

    def _plan(self, evaluation: Evaluation, body: Obj, selection: dataset.Selection
              ) -> list[WorkItem]:
        """The items (pure `plan`), computed once per spec generation and dataset."""
        meta = body["metadata"]
        return _once_per(self._plans, meta.get("uid", ""),
                         (meta.get("generation"), selection.fingerprint),
                         lambda: plan_items(evaluation, selection))

    async def _agent(self, evaluation: Evaluation) -> AgentUnderTest | None:
        if evaluation.spec.predictions.source != "agent":
            return None
        ref = evaluation.spec.agent_ref.name if evaluation.spec.agent_ref else ""
        body = self._latest("proctor_agents", (evaluation.namespace, ref))
        if body is None:
            raise Unusable("AgentNotFound", f"AgentUnderTest {ref!r} does not exist in "
                                            f"namespace {evaluation.namespace}")
        try:
            agent = self._parse(body)
        except ManifestError as exc:
            raise Unusable("InvalidAgent", str(exc)) from exc
        if agent_mode(agent) == "service":
            raise Unusable("AgentModeUnsupported", SERVICE_MODE_UNSUPPORTED)
        return agent

    async def _dataset(self, evaluation: Evaluation) -> dataset.Selection:
        ds = evaluation.spec.dataset
        key = (ds.name, ds.split, ds.revision, ds.instance_ids, ds.max_rows)
        if key not in self._datasets:
            self._datasets[key] = await asyncio.to_thread(load_selection, evaluation)
        return self._datasets[key]

    async def _observe(self, evaluation: Evaluation, recent: Recent) -> dict[str, Any]:
        """The Evaluation's children, from caches kept current by watches, and what this
        process wrote that they may not show yet."""
        key = (evaluation.namespace, owner_labels(evaluation)[LABEL_EVALUATION])
        self._evaluations[key] = (evaluation.namespace, evaluation.name)
        jobs = await self._informer(evaluation.namespace, "jobs")
        pods = await self._informer(evaluation.namespace, "pods")
        events = await self._informer(evaluation.namespace, "events")
        results = await self._informer(evaluation.namespace, "results")
        version = events.version  # before the snapshot: a change between them shows next time
        return {"jobs": recent.with_jobs(jobs.get(key)),
                "results": recent.with_results(results.get(key)),
                "pods": _pods_by_job(pods, key),
                "events": events.get(evaluation.namespace),
                "events_version": version}

    async def _informer(self, namespace: str, kind: str) -> Informer:
        """The namespace's cache of the items' Jobs, pods, kept results or Warning events,
        started once."""
        key = (namespace, kind)
        if key not in self._informers:
            self._informers[key] = informer = self._new_informer(namespace, kind)
            self._started[key] = asyncio.ensure_future(asyncio.to_thread(informer.start))
        try:
            await asyncio.shield(self._started[key])
        except Exception:
            self._informers.pop(key, None), self._started.pop(key, None)  # the next pass retries
            raise
        return self._informers[key]

    def _new_informer(self, namespace: str, kind: str) -> Informer:
        loop = asyncio.get_running_loop()
        labels = {MANAGED_BY: "proctor"}
        if kind == "jobs":
            return Informer(f"Jobs of {namespace}", partial(self.kube.list_jobs, namespace, labels),
                            partial(self.kube.watch_jobs, namespace, labels), _owner_key,
                            on_change=lambda change, job: loop.call_soon_threadsafe(
                                self._job_changed, change, job))
        if kind == "pods":
            return Informer(f"pods of {namespace}", partial(self.kube.list_pods, namespace, labels),
                            partial(self.kube.watch_pods, namespace, labels),
                            lambda pod: (*_owner_key(pod), job_name_of(pod)),  # a Job's pods
                            on_change=lambda change, pod: pod_ended(pod) and
                            loop.call_soon_threadsafe(self._kick_for_pod, pod))
        if kind == "results":
            labels = {MANAGED_BY: "proctor", COMPONENT: RESULT_KIND}
            return Informer(f"kept results of {namespace}",
                            partial(self.kube.list_configmaps, namespace, labels),
                            partial(self.kube.watch_configmaps, namespace, labels), _owner_key,
                            keep=read_result)  # only the result: the logs stay on the server
        fields = {"type": "Warning"}
        return Informer(f"Warning events of {namespace}",
                        partial(self.kube.list_events, namespace, fields),
                        partial(self.kube.watch_events, namespace, fields),
                        lambda event: namespace if (event.get("involvedObject") or {}).get(
                            "kind") in ("Job", "Pod") else None)

    def _job_changed(self, change: str, job: Obj) -> None:
        """A Job that ended or went away frees its slot: a pass now, and if it succeeded,
        its slot goes to the next item at once (`Handoff`). Other changes (it started, its
        pod got ready) only move the status's counts: a pass within a second, however many
        come."""
        key = self._evaluations.get(_owner_key(job))
        if key is None:
            return
        handoff = self._handoffs.get(key)
        if change == "DELETED":
            known = self._recent.get(key)
            if known is not None and job["metadata"]["name"] in known[1].freeing:
                self._hand_on(key, job, known[1])
            if handoff is not None:
                handoff.gone(job)
            self.kick(key)
        elif job_finished(job):
            if handoff is not None:
                self._hand_off(key, handoff, job)
            self.kick(key)
        else:
            self.kick_later(key, STATUS_SECONDS)

    def _hand_off(self, key: Key, handoff: Handoff, job: Obj) -> None:
        """Start the next item in the slot of ``job``, if it succeeded and no pass gave its
        slot out yet (see `Handoff`)."""
        body = self._latest("proctor_evaluations", key)
        known = self._recent.get(key)
        pods = self._informers.get((job["metadata"].get("namespace", ""), "pods"))
        if body is None or known is None or pods is None or known[1].was_deleted(job):
            return
        state = item_state(job, _pods_by_job(pods, _owner_key(job)).of(job))
        self._give(handoff, job, handoff.take(job, state, _spec_version(body), known[1].busy))

    def _hand_on(self, key: Key, job: Obj, recent: Recent) -> None:
        """The slot of ``job``, just deleted with its result kept, to the next item (see
        `Handoff.free`)."""
        handoff = self._handoffs.get(key)
        body = self._latest("proctor_evaluations", key)
        if handoff is not None and body is not None:
            self._give(handoff, job, handoff.free(job, _spec_version(body), recent.busy))

    @staticmethod
    def _give(handoff: Handoff, job: Obj, item: WorkItem | None) -> None:
        if item is not None and handoff.start is not None:
            log.debug("Handing the slot of Job %s to item=%s", job["metadata"]["name"],
                      item.key)
            handoff.started(handoff.start(item))

    def _kick_for_pod(self, pod: Obj) -> None:
        """A pod that ended has a result to read: a pass now (its Job's end comes later).
        The pod's other changes wake nobody: a pass reads them from the cache."""
        key = self._evaluations.get(_owner_key(pod))
        if key is not None:
            self.kick(key)

    def close(self) -> None:
        """Stop following the watches (shutdown)."""
        for informer in self._informers.values():
            informer.stop()
        self._informers.clear()
        self._started.clear()

    # --- acting on a decision ------------------------------------------------------------

    def _act(self, key: Key, body: Obj, evaluation: Evaluation, agent: AgentUnderTest | None,
             instances: Mapping[str, Instance], views: list[ItemView], decision: Decision,
             recent: Recent) -> None:
        """Set the decision going: each item's API calls go on beside the passes (one task
        per item), so that a pass never waits on the API server and the next one refills
        slots at once. A Job counts as created from here on (see `_start`)."""
        busy = recent.busy  # items whose earlier actions are under way are left to them
        retry = [view for view in decision.retry if view.item.id not in busy]
        nodes = {v.item.instance_id: v.state.node for v in views if v.state and v.state.node
                 } if decision.start or retry or decision.ahead else {}
        work: dict[str, list[Callable[[], Awaitable[None]]]] = {
            item.id: [self._start(body, evaluation, agent, instances[item.instance_id], item,
                                  nodes, recent)]
            for item in decision.start}  # never busy (see `decide`)
        for job in decision.stop:
            item_id = item_of(job)
            if item_id not in busy and not recent.was_deleted(job):
                work.setdefault(item_id, []).append(partial(self._delete, evaluation, job, recent))
        for view in decision.harvest:
            if view.item.id not in busy:
                work.setdefault(view.item.id, []).append(
                    partial(self._harvest, body, evaluation, instances, view, recent))
        for view, result in decision.give_up:
            if view.item.id not in busy:
                work.setdefault(view.item.id, []).append(partial(
                    self._give_up, body, evaluation, instances, view, result, recent))
        for view in retry:
            work.setdefault(view.item.id, []).append(
                partial(self._retry, body, evaluation, agent, instances, view, nodes, recent))
        starting = {item.id for item in decision.start}
        for item_id, steps in work.items():
            self._in_background(key, recent, item_id, steps, urgent=item_id in starting)
        for item in decision.ahead:
            if item.instance_id not in recent.tasks and item.instance_id not in recent.preparing:
                self._prepare(body, evaluation, instances[item.instance_id], recent)
        handoff = self._handoffs.setdefault(key, Handoff())
        handoff.renew(_spec_version(body), decision.ahead,
                      (job for view in views for job in view.jobs),
                      partial(self._start_now, key, body, evaluation, agent, instances, nodes,
                              recent))
        for item in decision.start:
            handoff.started(job_name(evaluation.name, item.id))

    def _start_now(self, key: Key, body: Obj, evaluation: Evaluation,
                   agent: AgentUnderTest | None, instances: Mapping[str, Instance],
                   nodes: Mapping[str, str], recent: Recent, item: WorkItem) -> str:
        """Start an item's Job beside the passes (a slot handed on, see `Handoff`); answers
        the Job's name."""
        self._in_background(key, recent, item.id, [self._start(
            body, evaluation, agent, instances[item.instance_id], item, nodes, recent)],
            urgent=True)
        return job_name(evaluation.name, item.id)

    def _prepare(self, body: Obj, evaluation: Evaluation, instance: Instance,
                 recent: Recent) -> None:
        """Make an instance's task ConfigMap before a slot frees up for it: a failure only
        leaves the work to its Job's creation. Part of refilling slots, so it does not wait
        behind the harvests (`CHORES_AT_ONCE`); there are at most maxConcurrentRows."""
        task = self._task(body, evaluation, instance)
        recent.preparing.add(instance.instance_id)

        async def run() -> None:
            try:
                await self._make_task(task, instance, recent)
            except Exception:
                log.debug("Making the task data of %s ahead failed", instance.instance_id,
                          exc_info=True)
            finally:
                recent.preparing.discard(instance.instance_id)

        self._spawn(run())

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` beside the passes (`idle` waits for it)."""
        task = asyncio.get_running_loop().create_task(work)
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    def _in_background(self, key: Key, recent: Recent, item_id: str,
                       steps: list[Callable[[], Awaitable[None]]], urgent: bool) -> None:
        """Run one item's steps in order; a pass follows when they are done, unless they
        only started a Job (`urgent`): that Job counted from the pass that chose it, so no
        decision changes, and its watch event brings the status's next write. A failure is
        left for a later pass (the timer's) to try again. Only `CHORES_AT_ONCE` items that
        are not `urgent` call the API server at once: a wave of finished Jobs to harvest
        must not queue up in front of the Jobs that refill their slots."""
        recent.busy.add(item_id)

        async def run() -> None:
            try:
                async with contextlib.nullcontext() if urgent else self._chores:
                    for step in steps:
                        await step()
            except Exception:
                self.metrics.reconcile_errors.inc()
                log.exception("Work on item %s of evaluation=%s/%s failed", item_id, *key)
                return
            finally:
                recent.busy.discard(item_id)
            if not urgent:
                self.kick(key)

        self._spawn(run())

    async def _delete(self, evaluation: Evaluation, job: Obj, recent: Recent) -> None:
        await asyncio.to_thread(self.kube.delete_job, evaluation.namespace,
                                job["metadata"]["name"])
        recent.delete(job)

    async def _keep(self, body: Obj, evaluation: Evaluation, view: ItemView,
                    result: RunResult, artifacts: Mapping[str, str], recent: Recent,
                    hand_on: bool = False) -> None:
        """Keep the item's result, then delete its Jobs (their pods and logs go with them):
        at once, in the same chore, rather than on a later pass, so that a finished Job does
        not wait its turn twice (see `Recent.with_jobs`). ``hand_on``: its pod ended well,
        so once deleted its Job holds no slot: the next item gets it at once."""
        configmap = result_configmap(evaluation, result, artifacts)
        kopf.adopt(configmap, owner=body)
        await asyncio.to_thread(self.kube.create, configmap)
        recent.kept(result)
        key = (evaluation.namespace, evaluation.name)
        for job in view.jobs:
            if recent.was_deleted(job):
                continue
            name = job["metadata"]["name"]
            if hand_on:
                recent.freeing.add(name)
            try:
                await self._delete(evaluation, job, recent)
                if hand_on:
                    self._hand_on(key, job, recent)
            finally:
                recent.freeing.discard(name)

    async def _give_up(self, body: Obj, evaluation: Evaluation,
                       instances: Mapping[str, Instance], view: ItemView, result: RunResult,
                       recent: Recent) -> None:
        result = result.model_copy(update={"repo": instances[view.item.instance_id].repo})
        await self._keep(body, evaluation, view, result, {}, recent)
        kopf.warn(body, reason="ItemFailed", message=f"{view.item.key}: {result.error_message}")

    async def _harvest(self, body: Obj, evaluation: Evaluation,
                       instances: Mapping[str, Instance], view: ItemView,
                       recent: Recent) -> None:
        state = view.state
        assert state is not None and state.pod
        text = await asyncio.to_thread(self.kube.pod_log, evaluation.namespace, state.pod,
                                       "grade")
        full, artifacts = parse_grade_log(text)
        result = harvested_result(evaluation, view, full,
                                  instances[view.item.instance_id].repo)
        await self._keep(body, evaluation, view, result, artifacts, recent, hand_on=True)
        if result.timings.total_seconds is not None:
            self.metrics.job_seconds.labels(evaluation.namespace,
                                            agent_label(evaluation)).observe(
                result.timings.total_seconds)
        log.info("Kept result evaluation=%s item=%s outcome=%s", evaluation.name,
                 view.item.key, result.outcome.value)

    async def _kept_patch(self, evaluation: Evaluation, view: ItemView) -> str | None:
        """The patch the failed attempt got, from its solve step's log (None: not asked)."""
        state = view.state
        assert state is not None
        if state.pod is None or not _solve_started(view):
            return None
        text = await asyncio.to_thread(self.kube.pod_log, evaluation.namespace, state.pod,
                                       "solve")
        return patch_from_log(text)

    async def _retry(self, body: Obj, evaluation: Evaluation, agent: AgentUnderTest | None,
                     instances: Mapping[str, Instance], view: ItemView,
                     nodes: Mapping[str, str], recent: Recent) -> None:
        item, instance = view.item, instances[view.item.instance_id]
        patch = await self._kept_patch(evaluation, view)
        asked = _solve_started(view)
        if patch is None and asked and evaluation.spec.predictions.source == "agent":
            # The agent was asked and its answer is lost: asking again is not allowed.
            result = failure_result(evaluation, view).model_copy(
                update={"repo": instance.repo, "error_message": "the agent's answer was lost "
                        f"with its pod ({view.state.reason}); not asked again"})
            await self._keep(body, evaluation, view, result, {}, recent)
            return
        kept_cm = None
        if patch is not None:
            kept_cm = patch_configmap(evaluation, item, patch)
            kopf.adopt(kept_cm, owner=body)
            await asyncio.to_thread(self.kube.create, kept_cm)
        attempt = view.attempt + 1
        await self._start(body, evaluation, agent, instance, item, nodes, recent, kept_cm,
                          attempt)()
        self.metrics.retries.labels(evaluation.namespace, evaluation.name,
                                    agent_label(evaluation)).inc()
        reuse = ", reusing the patch it got" if patch is not None else ""
        kopf.warn(body, reason="Retrying",
                  message=f"{item.key}: {view.state.reason}; attempt {attempt + 1}{reuse}")

    def _start(self, body: Obj, evaluation: Evaluation, agent: AgentUnderTest | None,
               instance: Instance, item: WorkItem, nodes: Mapping[str, str], recent: Recent,
               kept_cm: Obj | None = None, attempt: int = 0) -> Callable[[], Awaitable[None]]:
        """Count the item's Job as created now (so no pass gives its slot away), and return
        the API calls that create it (its task ConfigMap first). When the task ConfigMap is
        there already (made ahead, or by a repeat), the Job's request is sent at once: a slot
        handed on (`Handoff`) would otherwise wait a turn of the loop, behind whatever it
        does next, before the call even began (the returned calls only wait for it)."""
        task = self._task(body, evaluation, instance)
        job = desired_job(evaluation, agent, item, instance, task, runner_version=__version__,
                          runner_image_default=self.runner_image,
                          preferred_node=nodes.get(instance.instance_id), kept_patch=kept_cm,
                          attempt=attempt)
        kopf.adopt(job, owner=body)
        recent.created(job)
        sent = None
        if instance.instance_id in recent.tasks:
            sent = asyncio.get_running_loop().run_in_executor(None, self.kube.create, job)

        async def create() -> None:
            try:
                if sent is None:
                    await self._make_task(task, instance, recent)
                    made = await asyncio.to_thread(self.kube.create, job)
                else:
                    made = await sent
                if made:
                    log.info("Created Job %s item=%s", job["metadata"]["name"], item.key)
            except Exception:
                recent.uncreated(job)  # a later pass tries again
                raise
        return create

    def _task(self, body: Obj, evaluation: Evaluation, instance: Instance) -> Obj:
        """The instance's task ConfigMap, owned by the Evaluation: built (and its content
        hashed for its name) once per spec generation, not on every start."""
        meta = body["metadata"]
        tasks = _once_per(self._tasks, meta.get("uid", ""), meta.get("generation"), dict)
        task = tasks.get(instance.instance_id)
        if task is None:
            task = tasks[instance.instance_id] = task_configmap(evaluation, instance, {})
            kopf.adopt(task, owner=body)
        return task

    async def _make_task(self, task: Obj, instance: Instance, recent: Recent) -> None:
        """Create an instance's task ConfigMap (named by its content: a 409 means it is
        there already) and remember that it exists."""
        await asyncio.to_thread(self.kube.create, task)
        recent.tasks.add(instance.instance_id)

    async def _write_status(self, key: Key, body: Obj, status: Obj) -> None:
        self._status_at[key] = time.monotonic()
        if _same(body.get("status") or {}, status) or self._written.get(key) == status:
            return  # an unchanged status is not written: no event storm
        meta = body["metadata"]
        await asyncio.to_thread(self.kube.patch_status, "evaluations", meta["namespace"],
                                meta["name"], status)
        self._written[key] = status


def _spec_version(body: Obj) -> tuple[str, Any]:
    """The object's uid and spec generation: what a hand-off line was drawn up for."""
    meta = body["metadata"]
    return meta.get("uid", ""), meta.get("generation")


def _once_per(memo: dict[str, tuple[Any, Any]], uid: str, version: Any,
              build: Callable[[], Any]) -> Any:
    """What ``build`` made for the object ``uid`` at ``version`` (its spec generation),
    remembered until the version moves: one entry per object, the latest."""
    known = memo.get(uid)
    if known is None or known[0] != version:
        known = memo[uid] = (version, build())
    return known[1]


def _views(items: list[WorkItem], world: Mapping[str, Any], memo: StateMemo,
           in_play_of: tuple[Set[str], int] | None = None
           ) -> tuple[list[ItemView], dict[str, RunResult]]:
    """Each item as `world` shows it (or, given the busy items and maxConcurrentRows, only
    those in play: enough to decide), and the kept results by item id."""
    kept = {r.item_id: r for r in world["results"]}
    if in_play_of is not None:
        items = in_play(items, world["jobs"], kept.keys(), *in_play_of)
    events, version = world["events"], world["events_version"]
    views = observe(items, world["jobs"], world["pods"], events, kept,
                    lambda job: memo.state(job, world["pods"], events, version))
    memo.prune()
    return views, kept


def _status_of(evaluation: Evaluation, body: Obj, items: list[WorkItem],
               world: Mapping[str, Any], memo: StateMemo, decision: Decision,
               selection: dataset.Selection) -> tuple[Obj, Any]:
    """The Evaluation's status and its results' summary, from every item in `world`."""
    views, kept = _views(items, world, memo)
    results = [kept[i.id] for i in items if i.id in kept]
    generation = body["metadata"].get("generation")
    old = (body.get("status") or {}).get("conditions") or []
    conditions = conditions_for(old, views, decision, _iso(datetime.now(UTC)), generation)
    status = build_status(evaluation, agent_label(evaluation), views, results, conditions,
                          generation=generation, fingerprint=selection.fingerprint)
    return status, aggregate(results, selection.by_id)


def _solve_started(view: ItemView) -> bool:
    """Whether the attempt's solve step started (so the agent may have been asked)."""
    steps = view.state.steps if view.state else ()
    return any(s.name == "solve" and s.started_at for s in steps)


def _same(old: Obj, new: Obj) -> bool:
    return all(old.get(k) == v for k, v in new.items())


# --- kopf wiring (thin) ----------------------------------------------------------------------

RECONCILER: Reconciler | None = None
_METRICS: Metrics | None = None  # one per process: a registry refuses the same metric twice
TIMER_SECONDS = float(os.environ.get("PROCTOR_RECONCILE_SECONDS", "10"))
API_THREADS = 32
"""Threads that call the API server at once (each holds a connection while it does)."""
CHORES_AT_ONCE = 8
"""Items whose harvest, retry or clean-up may call the API server at once."""
PASS_SECONDS = 0.05
"""Least time from the start of one pass of an Evaluation to the start of the next."""
GC_THRESHOLD = 50_000
"""Allocations between two runs of the cyclic garbage collector's youngest generation."""
STATUS_SECONDS = 1.0
"""Least time between two status writes of one Evaluation (its passes run more often)."""


class NoEssence(kopf.DiffBaseStorage):
    """kopf's diff-base for an operator with no change-detecting handlers (no on.create,
    on.update, on.field): nothing to compare, so nothing is copied or stored. kopf's
    default deep-copies every watched object on every event to find what changed, the
    largest part of its work per Job event."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        pass


@kopf.on.startup()
async def _startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    global RECONCILER, _METRICS
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    # Only while no change-detecting handler is registered (a process may add its own).
    if not kopf.get_default_registry()._changing.get_all_handlers():
        settings.persistence.diffbase_storage = NoEssence()
    load_config()
    # The caches hold hundreds of thousands of small dicts (Jobs, pods, events, results);
    # with Python's default threshold (700) the cyclic collector ran every few hundred
    # allocations and took a quarter of the operator's CPU in `benchmarks/operator_sim.py`.
    # Plain reference counting frees almost everything here; cycles wait a little longer.
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
    # API calls run in threads; the default pool (cores + 4) is too small to overlap them.
    asyncio.get_running_loop().set_default_executor(
        concurrent.futures.ThreadPoolExecutor(max_workers=API_THREADS,
                                              thread_name_prefix="proctor-api"))
    _METRICS = _METRICS or Metrics()
    kube = Kube(connections=API_THREADS + 8)  # and the informers' watches (3 a namespace)
    RECONCILER = Reconciler(
        kube, _METRICS, Settings(image_pull_timeout_s=float(
            os.environ.get("PROCTOR_IMAGE_PULL_TIMEOUT_SECONDS", "600"))),
        runner_image=os.environ.get("PROCTOR_RUNNER_IMAGE") or None)


@kopf.on.cleanup()
async def _cleanup(**_: Any) -> None:
    if RECONCILER:
        with contextlib.suppress(TimeoutError):  # what is left is done again after a restart
            await asyncio.wait_for(RECONCILER.idle(), timeout=20)
        RECONCILER.close()


def _pods_by_job(pods: Informer, owner: Key) -> PodsOfJob:
    """An Evaluation's pods by their Job, from the namespace's pods cache (which keeps
    them by (namespace, Evaluation label, Job name))."""
    return PodsOfJob(lambda job: pods.get((*owner, job)),
                     lambda job: pods.version_of((*owner, job)))


def _owner_key(obj: Mapping[str, Any]) -> Key:
    """(namespace, evaluation label) of a child object: how the indexes are keyed."""
    meta = obj.get("metadata") or {}
    return meta.get("namespace"), (meta.get("labels") or {}).get(LABEL_EVALUATION)


# kopf keeps these current from watches, so a reconcile pass lists nothing.
@kopf.index("proctor.dev", "v1alpha1", "evaluations")
def proctor_evaluations(namespace: str, name: str, body: Mapping[str, Any], **_: Any
                        ) -> dict[Key, Obj]:
    return {(namespace, name): dict(body)}


@kopf.index("proctor.dev", "v1alpha1", "agentundertests")
def proctor_agents(namespace: str, name: str, body: Mapping[str, Any], **_: Any
                   ) -> dict[Key, Obj]:
    return {(namespace, name): dict(body)}


def _attach(kwargs: Mapping[str, Any]) -> Reconciler | None:
    """Hand kopf's live indexes to the reconciler (they come as handler arguments)."""
    if RECONCILER is not None and RECONCILER.indexes is None:
        RECONCILER.kopf_context = contextvars.copy_context()
        RECONCILER.indexes = {name: kwargs[name] for name in (
            "proctor_evaluations", "proctor_agents")}
    return RECONCILER


@kopf.on.event("proctor.dev", "v1alpha1", "evaluations")
async def _evaluation_event(event: Mapping[str, Any], body: Mapping[str, Any],
                            **kwargs: Any) -> None:
    reconciler = _attach(kwargs)
    meta = body.get("metadata", {})
    key = (meta.get("namespace"), meta.get("name"))
    if event.get("type") == "DELETED":
        status = body.get("status") or {}
        reconciler.metrics.forget(key[0], key[1], status.get("agent", ""))
        await reconciler.forget(key, meta.get("uid", ""))
        return
    # Only spec changes (or first sight) call for a pass: our own status writes do not.
    if event.get("type") in (None, "ADDED") or \
            meta.get("generation") != (body.get("status") or {}).get("observedGeneration"):
        reconciler.kick(key)


@kopf.on.event("proctor.dev", "v1alpha1", "agentundertests")
async def _agent_event(event: Mapping[str, Any], namespace: str, name: str,
                       body: Mapping[str, Any], **kwargs: Any) -> None:
    reconciler = _attach(kwargs)
    if reconciler is None:
        return
    if event.get("type") == "DELETED":
        reconciler.forget_object(body.get("metadata", {}).get("uid", ""))
        return
    # First sight or a spec change; the status writes of its own come back here too, and
    # find nothing to change.
    await reconciler.write_agent_status(namespace, name)


@kopf.timer("proctor.dev", "v1alpha1", "evaluations", interval=TIMER_SECONDS)
async def _timer(namespace: str, name: str, **kwargs: Any) -> None:
    _attach(kwargs).kick((namespace, name))


@kopf.on.probe(id="reconciling")
def _probe(**_: Any) -> dict[str, int]:
    return {"evaluations_in_pass": len(RECONCILER._running) if RECONCILER else 0}
