"""The operator: one level-based reconcile per Evaluation, and the only kopf handlers.

A pass (`Controller.reconcile`), in ten lines:

    body = the Evaluation from kopf's index        gone or being deleted: forget it, stop
    evaluation, agent, dataset = parse, check      refused: Ready=False, reason, stop
    items = plan_items(evaluation, dataset)        once per spec generation
    jobs, pods, results, events = the indexes      + what this process wrote (expectations)
    views = observe(the items in play)             each item's attempts and `item_state`
    decision = decide(evaluation, views, now)      pure: harvest, retry, give up, stop, start
    act: keep results, delete Jobs, create Jobs    concurrently, awaited before the pass ends
    status = build_status(every item's view)      at most every STATUS_SECONDS
    write it; metrics; the agent's tasksInFlight   Events: Degraded, items ending in error

Where each rule lives:

* which items exist, refusals, the dataset: `proctor.prepare` (shared with `proctor run`);
* what an attempt's Job, pod and events say: `proctor.k8s.podstatus.item_state`;
* slots, retries, giving up, when to start: `proctor.k8s.reconcile.decide` (pure). An
  attempt holds its slot until its pod has ended or its Job is terminal, whichever first;
* the one place a Job is created: `Controller._create_job`, with the slots `decide` gave
  (never more than maxConcurrentRows), and never for an Evaluation deleted or being deleted;
* Job, ConfigMap and result objects: `manifests`, `store` (pure); names: `names`;
* conditions, the status and its `reason`, LocalEndpoint: `conditions`, `reconcile`;
* what was written but not yet seen: `expectations`; the queue of passes: `workqueue`.

Triggers: the Evaluation's spec changes, its Jobs' and pods' events, its agent's
changes: each puts the Evaluation into one deduplicated workqueue, and one pass per
Evaluation runs at a time. A resync every `RESYNC_SECONDS` (`PROCTOR_RECONCILE_SECONDS`)
covers what has no event of its own (an image pull past its time limit).

One concurrency model: kopf's asyncio loop (its handlers and indexes, and our asyncio
tasks: the queue's workers, the resync); the official client's blocking calls run in
asyncio's default executor. No finalizer: the operator keeps nothing outside the cluster,
and the Evaluation owns what it made, so Kubernetes' garbage collector removes it, with or
without an operator running (kopf would add one for a timer: hence no kopf timer).

Run it with `proctor operator` (the chart's Deployment) or `kopf run -m
proctor.k8s.controller` (then PROCTOR_ALLOW_LOCAL_ENDPOINTS=1 stands for the flag).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf

from proctor import __version__, dataset
from proctor.exporter import Metrics
from proctor.k8s.api import Kube, load_config
from proctor.k8s.conditions import (
    agent_conditions,
    agent_refusal,
    agent_status,
    find_condition,
    set_condition,
)
from proctor.k8s.expectations import Expectations
from proctor.k8s.manifests import (
    COMPONENT,
    LABEL_EVALUATION,
    MANAGED_BY,
    desired_job,
    patch_configmap,
    task_configmap,
)
from proctor.k8s.names import label_value
from proctor.k8s.podstatus import PodsByJob, item_state
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
from proctor.k8s.workqueue import WorkQueue
from proctor.manifest import ManifestError, parse_resource
from proctor.metrics import aggregate
from proctor.model import Instance, Outcome, RunResult, WorkItem
from proctor.prepare import Refusal, agent_label, check_runnable, load_selection, plan_items
from proctor.runner.artifacts import parse_grade_log
from proctor.runner.solve import patch_from_log
from proctor.spec import AgentUnderTest, Evaluation

log = logging.getLogger("proctor.controller")
Obj = dict[str, Any]
Key = tuple[str, str]
"""(namespace, the Evaluation's label value): how every index keys an Evaluation's objects."""
RESYNC_SECONDS = float(os.environ.get("PROCTOR_RECONCILE_SECONDS", "10"))
STATUS_SECONDS = 1.0
"""Least time between two status builds (and writes) of one Evaluation."""
RETRY_SECONDS = 1.0
"""A pass that failed (the API server refused a write, say) is made again this much later."""
PROCTOR = {MANAGED_BY: "proctor"}


def _iso(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Tracked:
    """What this process keeps about one Evaluation (dropped with `Controller.forget`)."""

    uid: str
    name: str
    agent_label: str = ""
    expectations: Expectations = field(default_factory=Expectations)
    plan: tuple[Any, list[WorkItem]] = (None, [])
    """(spec generation, dataset fingerprint) and the items planned for them."""
    tasks: dict[str, Obj] = field(default_factory=dict)
    """This generation's task ConfigMaps by instance (built, and hashed, once)."""
    status_at: float = float("-inf")
    written: Obj | None = None
    agent: Key | None = None
    in_flight: int = 0


class Controller:
    def __init__(self, kube: Kube, metrics: Metrics, settings: Settings,
                 indexes: Mapping[str, Any], runner_image: str | None = None,
                 allow_local: bool = False):
        self.kube, self.metrics, self.settings, self.indexes = kube, metrics, settings, indexes
        self.runner_image, self.allow_local = runner_image, allow_local
        self.queue = WorkQueue(self.reconcile)
        self.tracked: dict[Key, Tracked] = {}
        self._datasets: dict[tuple, dataset.Selection] = {}
        self._parsed: dict[tuple, Any] = {}
        self._resync: asyncio.Task | None = None

    def start(self) -> None:
        """Start the resync (from a handler: kopf.warn needs kopf's context, which the
        tasks started here and by the queue inherit)."""
        if self._resync is None:
            self._resync = asyncio.get_running_loop().create_task(self._resync_forever())

    async def _resync_forever(self) -> None:
        while True:
            await asyncio.sleep(RESYNC_SECONDS)
            for key in list(self.indexes["evaluations"]):
                self.queue.add(key)
            for key in set(self.tracked) - set(self.indexes["evaluations"]):
                await self.forget(key)

    def stop(self) -> None:
        self.queue.stop()
        if self._resync is not None:
            self._resync.cancel()

    async def forget(self, key: Key) -> None:
        """The Evaluation is gone or being deleted: drop all that is kept about it."""
        tracked = self.tracked.pop(key, None)
        if tracked is None:
            return
        self.metrics.forget(key[0], tracked.name, tracked.agent_label)
        if tracked.agent is not None:
            await self.write_agent_status(*tracked.agent)

    def _one(self, index: str, key: Any) -> Obj | None:
        found = self.indexes[index].get(key)
        return next(iter(found), None) if found is not None else None

    def _all(self, index: str, key: Any) -> list[Any]:
        return list(self.indexes[index].get(key) or ())

    def _parse(self, body: Obj) -> Any:
        """An Evaluation or AgentUnderTest checked against its CRD (once per generation)."""
        meta = body["metadata"]
        version = (meta.get("uid"), meta.get("generation"))
        if version not in self._parsed:
            if len(self._parsed) > 1000:
                self._parsed.clear()
            self._parsed[version] = parse_resource(body)
        return self._parsed[version]

    async def reconcile(self, key: Key) -> None:
        started = time.perf_counter()
        try:
            await self._reconcile(key)
        except Exception:
            self.metrics.reconcile_errors.inc()
            log.exception("Reconcile failed evaluation=%s/%s", *key)
            self.queue.add_after(key, RETRY_SECONDS)
        finally:
            self.metrics.reconcile_seconds.observe(time.perf_counter() - started)

    async def _reconcile(self, key: Key) -> None:
        body = self._one("evaluations", key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            await self.forget(key)  # its Jobs are left to the garbage collector
            return
        meta = body["metadata"]
        tracked = self.tracked.get(key)
        if tracked is None or tracked.uid != meta.get("uid"):
            tracked = self.tracked[key] = Tracked(meta.get("uid", ""), meta["name"])
        selection = None
        try:
            evaluation = self._parse(body)
            tracked.agent_label = agent_label(evaluation)
            check_runnable(evaluation, on_cluster=True)
            selection = await self._dataset(evaluation)
            agent = self._agent(evaluation)
        except (ManifestError, Refusal) as exc:
            reason, message = (exc.reason, exc.message) if isinstance(exc, Refusal) \
                else ("InvalidSpec", str(exc))
            generation, old = meta.get("generation"), (body.get("status") or {}).get(
                "conditions") or []
            conditions = invalid_conditions(old, reason, message, _iso(datetime.now(UTC)),
                                            generation)
            await self._write_status(tracked, body, {"conditions": conditions, "reason": reason,
                                                     "observedGeneration": generation})
            if selection is not None:  # only its agent is missing: keep what still ends
                await self._wind_down(key, tracked, body, evaluation, selection)
            return
        items = self._plan(tracked, body, evaluation, selection)
        views = self._observe(key, tracked, items, evaluation.spec.max_concurrent_rows)
        decision = decide(evaluation, views, datetime.now(UTC), self.settings)
        await self._act(key, tracked, body, evaluation, agent, selection.by_id, views, decision)
        await self._publish(key, tracked, body, evaluation, agent, selection, items, decision)

    async def _wind_down(self, key: Key, tracked: Tracked, body: Obj, evaluation: Evaluation,
                         selection: dataset.Selection) -> None:
        """Start and retry nothing, but keep the results of the Jobs that end meanwhile."""
        items = self._plan(tracked, body, evaluation, selection)
        views = self._observe(key, tracked, items, 0)
        decision = decide(evaluation, views, datetime.now(UTC), self.settings)
        decision.start, decision.retry = [], []
        await self._act(key, tracked, body, evaluation, None, selection.by_id, views, decision)

    async def _dataset(self, evaluation: Evaluation) -> dataset.Selection:
        ds = evaluation.spec.dataset
        key = (ds.name, ds.split, ds.revision, ds.instance_ids, ds.max_rows)
        if key not in self._datasets:
            self._datasets[key] = await asyncio.to_thread(load_selection, evaluation)
        return self._datasets[key]

    def _agent(self, evaluation: Evaluation) -> AgentUnderTest | None:
        if evaluation.spec.predictions.source != "agent":
            return None
        ref = evaluation.spec.agent_ref.name if evaluation.spec.agent_ref else ""
        body = self._one("agents", (evaluation.namespace, ref))
        if body is None:
            raise Refusal("AgentNotFound", f"AgentUnderTest {ref!r} does not exist in "
                                           f"namespace {evaluation.namespace}")
        try:
            agent = self._parse(body)
        except ManifestError as exc:
            raise Refusal("InvalidAgent", str(exc)) from exc
        refusal = agent_refusal(agent, self.allow_local)
        if refusal is not None:
            raise Refusal(*refusal)
        return agent

    def _plan(self, tracked: Tracked, body: Obj, evaluation: Evaluation,
              selection: dataset.Selection) -> list[WorkItem]:
        version = (body["metadata"].get("generation"), selection.fingerprint)
        if tracked.plan[0] != version:
            tracked.plan, tracked.tasks = (version, plan_items(evaluation, selection)), {}
        return tracked.plan[1]

    def _observe(self, key: Key, tracked: Tracked, items: list[WorkItem],
                 rows: int | None) -> list[ItemView]:
        """The items in play (``rows`` waiting at most; None: every item) as the indexes
        and the expectations show them."""
        jobs = tracked.expectations.with_jobs(self._all("jobs", key))
        kept = {r.item_id: r for r in tracked.expectations.with_results(
            self._all("results", key))}
        pods = PodsByJob(self._all("pods", key))

        def state_of(job: Obj) -> Any:
            own = pods.of(job)
            names = [job["metadata"]["name"], *(p["metadata"]["name"] for p in own)]
            events = [e for name in names for e in self._all("warnings", (key[0], name))]
            return item_state(job, own, events)
        chosen = items if rows is None else in_play(items, jobs, kept.keys(), rows)
        return observe(chosen, jobs, (), (), kept, state_of)

    # --- acting on a decision ------------------------------------------------------------

    async def _act(self, key: Key, tracked: Tracked, body: Obj, evaluation: Evaluation,
                   agent: AgentUnderTest | None, instances: Mapping[str, Instance],
                   views: list[ItemView], decision: Decision) -> None:
        """Each item's API calls, concurrently; the pass waits for all of them. A failure
        is counted and left to a later pass."""
        nodes = {v.item.instance_id: v.state.node for v in views if v.state and v.state.node}
        stops: dict[str, list[Obj]] = {}
        for job in decision.stop:
            stops.setdefault(item_of(job), []).append(job)
        work = [self._harvest(tracked, body, evaluation, instances, v) for v in decision.harvest]
        work += [self._keep(tracked, body, evaluation, view, result.model_copy(
            update={"repo": instances[view.item.instance_id].repo}), {})
            for view, result in decision.give_up]
        work += [self._retry(key, tracked, body, evaluation, agent, instances, view, nodes,
                             stops.get(view.item.id, [])) for view in decision.retry]
        handled = {v.item.id for v in (*decision.harvest, *decision.retry)} | {
            v.item.id for v, _ in decision.give_up}
        work += [self._delete(evaluation, job, tracked.expectations) for item_id, jobs in
                 stops.items() if item_id not in handled for job in jobs]
        work += [self._create_job(key, tracked, body, evaluation, agent,
                                  instances[item.instance_id], item, nodes)
                 for item in decision.start]
        for failure in await asyncio.gather(*work, return_exceptions=True):
            if isinstance(failure, Exception):
                self.metrics.reconcile_errors.inc()
                log.error("Acting failed evaluation=%s/%s: %r", key[0], tracked.name, failure)
                self.queue.add_after(key, RETRY_SECONDS)

    async def _create_job(self, key: Key, tracked: Tracked, body: Obj, evaluation: Evaluation,
                          agent: AgentUnderTest | None, instance: Instance, item: WorkItem,
                          nodes: Mapping[str, str], kept_patch: Obj | None = None,
                          attempt: int = 0) -> None:
        """The one place a Job is created (in a slot `decide` gave), its task ConfigMap
        first; nothing for an Evaluation that was deleted since the pass began."""
        task = tracked.tasks.get(instance.instance_id)
        if task is None:
            task = tracked.tasks[instance.instance_id] = task_configmap(evaluation, instance, {})
            kopf.adopt(task, owner=body)
        job = desired_job(evaluation, agent, item, instance, task, runner_version=__version__,
                          runner_image_default=self.runner_image,
                          preferred_node=nodes.get(instance.instance_id),
                          kept_patch=kept_patch, attempt=attempt)
        kopf.adopt(job, owner=body)
        expected = tracked.expectations
        if task["metadata"]["name"] not in expected.tasks:
            await asyncio.to_thread(self.kube.create, task)
            expected.tasks.add(task["metadata"]["name"])
        latest = self._one("evaluations", key)
        if latest is None or latest["metadata"].get("deletionTimestamp") or \
                latest["metadata"].get("uid") != tracked.uid:
            log.info("Not creating Job %s: its Evaluation is being deleted",
                     job["metadata"]["name"])
            return
        if await asyncio.to_thread(self.kube.create, job):
            log.info("Created Job %s item=%s", job["metadata"]["name"], item.key)
        expected.created(job)

    async def _delete(self, evaluation: Evaluation, job: Obj, expected: Expectations) -> None:
        if not expected.was_deleted(job):
            await asyncio.to_thread(self.kube.delete_job, evaluation.namespace,
                                    job["metadata"]["name"])
            expected.delete(job)

    async def _keep(self, tracked: Tracked, body: Obj, evaluation: Evaluation,
                    view: ItemView, result: RunResult, artifacts: Mapping[str, str]) -> None:
        """Keep the item's result, then delete its Jobs (their pods and logs go with them)."""
        configmap = result_configmap(evaluation, result, artifacts)
        kopf.adopt(configmap, owner=body)
        await asyncio.to_thread(self.kube.create, configmap)
        tracked.expectations.kept(result)
        log.info("Kept result evaluation=%s item=%s outcome=%s", evaluation.name,
                 view.item.key, result.outcome.value)
        if result.outcome == Outcome.ERROR:
            kopf.warn(body, reason="ItemFailed", message=f"{view.item.key}: "
                      f"{result.error_kind.value if result.error_kind else 'error'}: "
                      f"{result.error_message}"[:1000])
        for job in view.jobs:
            await self._delete(evaluation, job, tracked.expectations)

    async def _harvest(self, tracked: Tracked, body: Obj, evaluation: Evaluation,
                       instances: Mapping[str, Instance], view: ItemView) -> None:
        """Read a succeeded attempt's full result from its grade log, and keep it."""
        assert view.state is not None and view.state.pod
        text = await asyncio.to_thread(self.kube.pod_log, evaluation.namespace,
                                       view.state.pod, "grade")
        full, artifacts = parse_grade_log(text)
        result = harvested_result(evaluation, view, full, instances[view.item.instance_id].repo)
        await self._keep(tracked, body, evaluation, view, result, artifacts)
        if result.timings.total_seconds is not None:
            self.metrics.job_seconds.labels(evaluation.namespace, tracked.agent_label).observe(
                result.timings.total_seconds)

    async def _retry(self, key: Key, tracked: Tracked, body: Obj, evaluation: Evaluation,
                     agent: AgentUnderTest | None, instances: Mapping[str, Instance],
                     view: ItemView, nodes: Mapping[str, str], stops: list[Obj]) -> None:
        """The next attempt, with the patch the failed one got: the agent is never asked
        twice. Its failed Job is deleted only once the next one exists."""
        state, item = view.state, view.item
        assert state is not None
        asked = any(s.name == "solve" and s.started_at for s in state.steps)
        text = await asyncio.to_thread(self.kube.pod_log, evaluation.namespace, state.pod,
                                       "solve") if state.pod and asked else ""
        patch = patch_from_log(text) if text else None
        if patch is None and asked and evaluation.spec.predictions.source == "agent":
            result = failure_result(evaluation, view).model_copy(update={
                "repo": instances[item.instance_id].repo, "error_message": "the agent's "
                f"answer was lost with its pod ({state.reason}); not asked again"})
            await self._keep(tracked, body, evaluation, view, result, {})
            return
        kept = None
        if patch is not None:
            kept = patch_configmap(evaluation, item, patch)
            kopf.adopt(kept, owner=body)
            await asyncio.to_thread(self.kube.create, kept)
        await self._create_job(key, tracked, body, evaluation, agent,
                               instances[item.instance_id], item, nodes, kept, view.attempt + 1)
        self.metrics.retries.labels(evaluation.namespace, evaluation.name,
                                    tracked.agent_label).inc()
        reuse = ", reusing the patch it got" if patch is not None else ""
        kopf.warn(body, reason="Retrying",
                  message=f"{item.key}: {state.reason}; attempt {view.attempt + 2}{reuse}")
        for job in stops:
            await self._delete(evaluation, job, tracked.expectations)

    # --- the status ------------------------------------------------------------------------

    async def _publish(self, key: Key, tracked: Tracked, body: Obj, evaluation: Evaluation,
                       agent: AgentUnderTest | None, selection: dataset.Selection,
                       items: list[WorkItem], decision: Decision) -> None:
        """Rebuild the status and metrics from every item as observed, and write them; at
        most every STATUS_SECONDS (a later pass is queued for what comes meanwhile)."""
        wait = tracked.status_at + STATUS_SECONDS - time.monotonic()
        if wait > 0:
            self.queue.add_after(key, wait)
            return
        tracked.status_at = time.monotonic()
        views = self._observe(key, tracked, items, None)
        results = [v.result for v in views if v.result is not None]
        meta, spec = body["metadata"], evaluation.spec
        old = (body.get("status") or {}).get("conditions") or []
        conditions = conditions_for(old, views, decision, _iso(datetime.now(UTC)),
                                    meta.get("generation"), suspended=spec.suspend)
        status = build_status(evaluation, tracked.agent_label, views, results, conditions,
                              generation=meta.get("generation"),
                              fingerprint=selection.fingerprint)
        await self._write_status(tracked, body, status)
        self.metrics.publish(evaluation.namespace, evaluation.name, tracked.agent_label,
                             aggregate(results, selection.by_id), status["items"])
        in_flight = status["items"]["running"] + status["items"]["pending"]
        agent_key = (agent.namespace, agent.name) if agent is not None else None
        if (agent_key, in_flight) != (tracked.agent, tracked.in_flight):
            before, tracked.agent, tracked.in_flight = tracked.agent, agent_key, in_flight
            for changed in {before, agent_key} - {None}:
                await self.write_agent_status(*changed)

    async def _write_status(self, tracked: Tracked, body: Obj, status: Obj) -> None:
        """Write the status if it changed; an Event when it becomes Degraded."""
        seen = body.get("status") or {}
        if all(seen.get(k) == v for k, v in status.items()) or tracked.written == status:
            return
        meta = body["metadata"]
        await asyncio.to_thread(self.kube.patch_status, "evaluations", meta["namespace"],
                                meta["name"], status)
        before = find_condition((tracked.written or seen).get("conditions") or [], "Degraded")
        tracked.written = status
        now = find_condition(status["conditions"], "Degraded") or {}
        if now.get("status") == "True" and (before or {}).get("status") != "True":
            kopf.warn(body, reason="Degraded", message=f"{now['reason']}: {now['message']}")

    async def write_agent_status(self, namespace: str, name: str) -> None:
        """An AgentUnderTest's status: mode, endpoint, Ready, and its tasks in flight over
        every Evaluation this operator runs."""
        body = self._one("agents", (namespace, name))
        if body is None:
            return
        generation = body["metadata"].get("generation")
        seen = body.get("status") or {}
        old, now = seen.get("conditions") or [], _iso(datetime.now(UTC))
        try:
            agent = self._parse(body)
        except ManifestError as exc:
            status: Obj = {"conditions": set_condition(
                old, "Ready", False, "InvalidSpec", str(exc)[:1000], now=now,
                observed_generation=generation), "observedGeneration": generation}
        else:
            busy = sum(t.in_flight for t in self.tracked.values() if t.agent == (namespace, name))
            status = agent_status(agent, generation=generation, tasks_in_flight=busy,
                                  conditions=agent_conditions(old, agent, now=now,
                                                              generation=generation,
                                                              allow_local=self.allow_local))
        if not all(seen.get(k) == v for k, v in status.items()):
            await asyncio.to_thread(self.kube.patch_status, "agentundertests", namespace, name,
                                    status)


# --- kopf wiring (thin) ----------------------------------------------------------------------

CONTROLLER: Controller | None = None
_METRICS: Metrics | None = None  # one per process: a registry refuses the same metric twice
RESULTS = {**PROCTOR, COMPONENT: RESULT_KIND}


def _owner_key(body: Mapping[str, Any]) -> Key:
    meta = body.get("metadata") or {}
    return meta.get("namespace"), (meta.get("labels") or {}).get(LABEL_EVALUATION)


@kopf.on.startup()
async def _startup(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
    global CONTROLLER, _METRICS
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    # Watch only what the operator made (and Warning events), not every pod of the cluster.
    for resource, labels in ((("batch", "jobs"), PROCTOR), (("v1", "pods"), PROCTOR),
                             (("v1", "configmaps"), RESULTS)):
        settings.watching.label_selectors[resource] = ",".join(f"{k}={v}"
                                                               for k, v in labels.items())
    settings.watching.field_selectors["v1", "events"] = "type=Warning"
    load_config()
    _METRICS = _METRICS or Metrics()
    CONTROLLER = Controller(
        Kube(), _METRICS, Settings(image_pull_timeout_s=float(
            os.environ.get("PROCTOR_IMAGE_PULL_TIMEOUT_SECONDS", "600"))),
        indexes={name: kwargs[name] for name in ("evaluations", "agents", "jobs", "pods",
                                                 "results", "warnings")},
        runner_image=os.environ.get("PROCTOR_RUNNER_IMAGE") or None,
        allow_local=os.environ.get("PROCTOR_ALLOW_LOCAL_ENDPOINTS", "") in ("1", "true"))


@kopf.on.cleanup()
async def _cleanup(**_: Any) -> None:
    if CONTROLLER is not None:
        CONTROLLER.stop()


# kopf keeps these current from watches, so a pass lists nothing.
@kopf.index("proctor.dev", "v1alpha1", "evaluations")
def evaluations(namespace: str, name: str, body: Mapping[str, Any], **_: Any) -> dict:
    return {(namespace, label_value(name)): dict(body)}


@kopf.index("proctor.dev", "v1alpha1", "agentundertests")
def agents(namespace: str, name: str, body: Mapping[str, Any], **_: Any) -> dict:
    return {(namespace, name): dict(body)}


@kopf.index("batch", "v1", "jobs", labels=PROCTOR)
def jobs(body: Mapping[str, Any], **_: Any) -> dict:
    return {_owner_key(body): dict(body)}


@kopf.index("", "v1", "pods", labels=PROCTOR)
def pods(body: Mapping[str, Any], **_: Any) -> dict:
    return {_owner_key(body): dict(body)}


@kopf.index("", "v1", "configmaps", labels=RESULTS)
def results(body: Mapping[str, Any], **_: Any) -> dict:
    """Of a kept result, only the RunResult: its logs stay on the server."""
    result = read_result(body)
    return {_owner_key(body): result} if result is not None else {}


@kopf.index("", "v1", "events", field="type", value="Warning")
def warnings(namespace: str, body: Mapping[str, Any], **_: Any) -> dict:
    about = body.get("involvedObject") or {}
    return {(namespace, about.get("name")): dict(body)} if about.get("kind") in (
        "Job", "Pod") else {}


@kopf.on.event("proctor.dev", "v1alpha1", "evaluations")
async def _evaluation_event(event: Mapping[str, Any], body: Mapping[str, Any],
                            **_: Any) -> None:
    assert CONTROLLER is not None
    CONTROLLER.start()
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    key = (meta.get("namespace"), label_value(meta.get("name", "")))
    if event.get("type") == "DELETED" or meta.get("deletionTimestamp"):
        await CONTROLLER.forget(key)
    # Its own status writes come back here too: only first sight or a spec change counts.
    elif event.get("type") in (None, "ADDED") or \
            meta.get("generation") != status.get("observedGeneration"):
        CONTROLLER.queue.add(key)


@kopf.on.event("proctor.dev", "v1alpha1", "agentundertests")
async def _agent_event(event: Mapping[str, Any], namespace: str, name: str,
                       **_: Any) -> None:
    """Its own status, and a pass of the Evaluations that use it (found or gone)."""
    assert CONTROLLER is not None
    CONTROLLER.start()
    if event.get("type") != "DELETED":
        await CONTROLLER.write_agent_status(namespace, name)
    for key in list(CONTROLLER.indexes["evaluations"]):
        body = CONTROLLER._one("evaluations", key)
        if key[0] == namespace and body and ((body.get("spec") or {}).get("agentRef") or {}
                                             ).get("name") == name:
            CONTROLLER.queue.add(key)


@kopf.on.event("batch", "v1", "jobs", labels=PROCTOR)
@kopf.on.event("", "v1", "pods", labels=PROCTOR)
async def _child_event(body: Mapping[str, Any], **_: Any) -> None:
    if CONTROLLER is not None:
        CONTROLLER.queue.add(_owner_key(body))


@kopf.on.probe(id="evaluations")
def _probe(**_: Any) -> int:
    return len(CONTROLLER.tracked) if CONTROLLER else 0


def run(namespaces: list[str], *, verbose: bool, probe_port: int,
        allow_local_endpoints: bool = False) -> None:
    """`proctor operator`: run the handlers above until stopped."""
    if allow_local_endpoints:
        os.environ["PROCTOR_ALLOW_LOCAL_ENDPOINTS"] = "1"
    kopf.configure(verbose=verbose)
    kopf.run(standalone=True, clusterwide=not namespaces, namespaces=namespaces,
             liveness_endpoint=f"http://0.0.0.0:{probe_port}/healthz")
