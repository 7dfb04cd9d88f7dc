"""The kopf operator: thin handlers around one level-based reconcile per Evaluation.

Every trigger (the Evaluation seen or changed, a timer, an event of one of its Jobs)
only *kicks* `Reconciler.reconcile` for that Evaluation; a kick during a pass makes
one more pass after it, never two at once. A pass reads the world (Evaluation,
AgentUnderTest, dataset, Jobs, pods, events, kept results), asks the pure
`proctor.k8s.reconcile.decide` what to do, does it, and writes a status rebuilt from
what it observed. See `proctor.k8s.reconcile` for the rules.

Run it with `proctor operator` (in the chart's Deployment) or `kopf run -m
proctor.k8s.operator`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kopf

from proctor import __version__, dataset
from proctor.exporter import Metrics
from proctor.k8s.api import Kube, load_config
from proctor.k8s.manifests import (
    COMPONENT,
    LABEL_EVALUATION,
    MANAGED_BY,
    desired_job,
    owner_labels,
    patch_configmap,
    task_configmap,
)
from proctor.k8s.reconcile import (
    Decision,
    ItemView,
    Settings,
    build_status,
    conditions_for,
    decide,
    failure_result,
    harvested_result,
    invalid_conditions,
    observe,
)
from proctor.k8s.store import RESULT_KIND, read_result, result_configmap
from proctor.local.engine import agent_label
from proctor.manifest import ManifestError, parse_resource
from proctor.metrics import aggregate
from proctor.model import Instance, RunResult, WorkItem
from proctor.plan import PlanInputs, plan
from proctor.runner.artifacts import parse_grade_log
from proctor.runner.solve import patch_from_log
from proctor.spec import AgentUnderTest, Evaluation

log = logging.getLogger("proctor.operator")
Obj = dict[str, Any]
Key = tuple[str, str]


class Unusable(Exception):
    """The Evaluation cannot run as it is; `reason` is one CamelCase word."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


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
        self._plans: dict[tuple, list[WorkItem]] = {}
        self.indexes: Mapping[str, Any] | None = None
        """kopf's live indexes of Jobs, pods, kept results and events (see below)."""
        self._created: dict[str, tuple[float, Obj]] = {}
        """Jobs this process created that the Job index may not show yet."""

    def kick(self, key: Key) -> None:
        """Reconcile `key` soon; once more after the current pass if one is running."""
        if key in self._running:
            self._dirty.add(key)
            return
        self._running[key] = asyncio.get_running_loop().create_task(self._passes(key))

    async def _passes(self, key: Key) -> None:
        try:
            while True:
                self._dirty.discard(key)
                await self.reconcile(*key)
                if key not in self._dirty:
                    return
        finally:
            self._running.pop(key, None)

    async def idle(self) -> None:
        """Wait until no pass is running (tests, shutdown)."""
        while self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)

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
        body = await asyncio.to_thread(self.kube.get_custom, "evaluations", namespace, name)
        if body is None:
            return
        now = datetime.now(UTC)
        generation = body["metadata"].get("generation")
        old = (body.get("status") or {}).get("conditions") or []
        try:
            evaluation = parse_resource(body)
            agent = await self._agent(evaluation)
            selection = await self._dataset(evaluation)
        except (ManifestError, Unusable) as exc:
            reason, message = (exc.reason, exc.message) if isinstance(exc, Unusable) \
                else ("InvalidSpec", str(exc))
            await self._write_status(body, {
                "conditions": invalid_conditions(old, reason, message, _iso(now), generation),
                "observedGeneration": generation})
            return
        items = self._plan(evaluation, body, selection)
        world = await self._observe(evaluation)
        kept = {r.item_id: r for r in world["results"]}
        views = observe(items, world["jobs"], world["pods"], world["events"], kept)
        decision = decide(evaluation, views, now, self.settings)
        await self._act(body, evaluation, agent, selection.by_id, views, decision, kept)
        views = observe(items, world["jobs"], world["pods"], world["events"], kept)
        results = [kept[i.id] for i in items if i.id in kept]
        conditions = conditions_for(old, views, decision, _iso(now), generation)
        status = build_status(evaluation, agent_label(evaluation), views, results, conditions,
                              generation=generation, fingerprint=selection.fingerprint)
        await self._write_status(body, status)
        summary = aggregate(results, selection.by_id)
        self.metrics.publish(namespace, name, agent_label(evaluation), summary,
                             status["items"])

    def _plan(self, evaluation: Evaluation, body: Obj, selection: dataset.Selection
              ) -> list[WorkItem]:
        """The items (pure `plan`), computed once per spec generation and dataset."""
        meta = body["metadata"]
        key = (meta.get("uid"), meta.get("generation"), selection.fingerprint)
        if key not in self._plans:
            spec = evaluation.spec
            self._plans[key] = plan(PlanInputs(
                dataset=spec.dataset.name,
                revision=spec.dataset.revision or selection.fingerprint,
                agent=agent_label(evaluation), repeats=spec.repeats,
                include_hints=spec.dataset.include_hints), selection.instances)
        return self._plans[key]

    async def _agent(self, evaluation: Evaluation) -> AgentUnderTest | None:
        if evaluation.spec.predictions.source != "agent":
            return None
        ref = evaluation.spec.agent_ref.name if evaluation.spec.agent_ref else ""
        body = await asyncio.to_thread(self.kube.get_custom, "agentundertests",
                                       evaluation.namespace, ref)
        if body is None:
            raise Unusable("AgentNotFound", f"AgentUnderTest {ref!r} does not exist in "
                                            f"namespace {evaluation.namespace}")
        try:
            agent = parse_resource(body)
        except ManifestError as exc:
            raise Unusable("InvalidAgent", str(exc)) from exc
        if agent.spec.service:
            raise Unusable("AgentModeUnsupported", "agents in service mode are not run by "
                           "this operator yet; give an endpoint or a sidecar")
        return agent

    async def _dataset(self, evaluation: Evaluation) -> dataset.Selection:
        ds = evaluation.spec.dataset
        if evaluation.spec.predictions.source == "file":
            raise Unusable("PredictionsUnsupported", "predictions.source file reads a local "
                           "file, which the operator cannot; use it with `proctor run`")
        key = (ds.name, ds.split, ds.revision, ds.instance_ids, ds.max_rows)
        if key not in self._datasets:
            try:
                self._datasets[key] = await asyncio.to_thread(
                    dataset.load, ds.name, ds.split, ds.revision, ds.instance_ids, ds.max_rows)
            except dataset.DatasetError as exc:
                raise Unusable("DatasetUnusable", str(exc)) from exc
        return self._datasets[key]

    async def _observe(self, evaluation: Evaluation) -> dict[str, list[Obj]]:
        """The Evaluation's children, from kopf's indexes (kept current by watches)."""
        if self.indexes is None:
            return await self._list(evaluation)
        key = (evaluation.namespace, owner_labels(evaluation)[LABEL_EVALUATION])

        def values(index: str) -> list[Any]:
            found = self.indexes[index].get(key)
            return list(found) if found is not None else []

        jobs = values("proctor_jobs")
        seen = {j["metadata"]["name"] for j in jobs}
        now = time.monotonic()
        for name, (at, job) in list(self._created.items()):
            if name in seen or now - at > 120:
                self._created.pop(name)
            elif _owner_key(job) == key:
                jobs.append(job)  # read-your-writes until the watch delivers it
        events = list(self.indexes["proctor_events"].get(evaluation.namespace) or [])
        return {"jobs": jobs, "pods": values("proctor_pods"), "events": events,
                "results": values("proctor_results")}

    async def _list(self, evaluation: Evaluation) -> dict[str, list[Obj]]:
        """The same by listing (when run without kopf's indexes, e.g. from a script)."""
        ns, labels = evaluation.namespace, owner_labels(evaluation)
        jobs, pods, events, configmaps = await asyncio.gather(
            asyncio.to_thread(self.kube.list_jobs, ns, labels),
            asyncio.to_thread(self.kube.list_pods, ns, labels),
            asyncio.to_thread(self.kube.list_events, ns),
            asyncio.to_thread(self.kube.list_configmaps, ns, {**labels, COMPONENT: RESULT_KIND}))
        results = [r for r in map(read_result, configmaps) if r is not None]
        return {"jobs": jobs, "pods": pods, "events": events, "results": results}

    # --- acting on a decision ------------------------------------------------------------

    async def _act(self, body: Obj, evaluation: Evaluation, agent: AgentUnderTest | None,
                   instances: Mapping[str, Instance], views: list[ItemView],
                   decision: Decision, kept: dict[str, RunResult]) -> None:
        # Slots first: the next Jobs do not wait for the finished ones' logs to be read.
        # Independent API round trips go out together: a pass must be quick to refill slots.
        nodes = {v.item.instance_id: v.state.node for v in views if v.state and v.state.node}
        await asyncio.gather(*(self._start(body, evaluation, agent, instances[item.instance_id],
                                           item, nodes) for item in decision.start))
        await asyncio.gather(*(self._harvest(body, evaluation, instances, view, kept)
                               for view in decision.harvest))
        for view, result in decision.give_up:
            result = result.model_copy(update={"repo": instances[view.item.instance_id].repo})
            await self._keep(body, evaluation, result, {}, kept)
            kopf.warn(body, reason="ItemFailed", message=f"{view.item.key}: "
                                                         f"{result.error_message}")
        await asyncio.gather(*(asyncio.to_thread(self.kube.delete_job, evaluation.namespace,
                                                 job["metadata"]["name"])
                               for job in decision.stop))
        for view in decision.retry:
            await self._retry(body, evaluation, agent, instances, view, nodes, kept)

    async def _keep(self, body: Obj, evaluation: Evaluation, result: RunResult,
                    artifacts: Mapping[str, str], kept: dict[str, RunResult]) -> None:
        configmap = result_configmap(evaluation, result, artifacts)
        kopf.adopt(configmap, owner=body)
        await asyncio.to_thread(self.kube.create, configmap)
        kept[result.item_id] = result

    async def _harvest(self, body: Obj, evaluation: Evaluation,
                       instances: Mapping[str, Instance], view: ItemView,
                       kept: dict[str, RunResult]) -> None:
        state = view.state
        assert state is not None and state.pod
        text = await asyncio.to_thread(self.kube.pod_log, evaluation.namespace, state.pod,
                                       "grade")
        full, artifacts = parse_grade_log(text)
        result = harvested_result(evaluation, view, full,
                                  instances[view.item.instance_id].repo)
        await self._keep(body, evaluation, result, artifacts, kept)
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
                     nodes: Mapping[str, str], kept: dict[str, RunResult]) -> None:
        item, instance = view.item, instances[view.item.instance_id]
        patch = await self._kept_patch(evaluation, view)
        asked = _solve_started(view)
        if patch is None and asked and evaluation.spec.predictions.source == "agent":
            # The agent was asked and its answer is lost: asking again is not allowed.
            result = failure_result(evaluation, view).model_copy(
                update={"repo": instance.repo, "error_message": "the agent's answer was lost "
                        f"with its pod ({view.state.reason}); not asked again"})
            await self._keep(body, evaluation, result, {}, kept)
            return
        kept_cm = None
        if patch is not None:
            kept_cm = patch_configmap(evaluation, item, patch)
            kopf.adopt(kept_cm, owner=body)
            await asyncio.to_thread(self.kube.create, kept_cm)
        attempt = view.attempt + 1
        await self._start(body, evaluation, agent, instance, item, nodes, kept_cm, attempt)
        self.metrics.retries.labels(evaluation.namespace, evaluation.name,
                                    agent_label(evaluation)).inc()
        reuse = ", reusing the patch it got" if patch is not None else ""
        kopf.warn(body, reason="Retrying",
                  message=f"{item.key}: {view.state.reason}; attempt {attempt + 1}{reuse}")

    async def _start(self, body: Obj, evaluation: Evaluation, agent: AgentUnderTest | None,
                     instance: Instance, item, nodes: Mapping[str, str],
                     kept_cm: Obj | None = None, attempt: int = 0) -> None:
        task = task_configmap(evaluation, instance, {})
        kopf.adopt(task, owner=body)
        await asyncio.to_thread(self.kube.create, task)
        job = desired_job(evaluation, agent, item, instance, task, runner_version=__version__,
                          runner_image_default=self.runner_image,
                          preferred_node=nodes.get(instance.instance_id), kept_patch=kept_cm,
                          attempt=attempt)
        kopf.adopt(job, owner=body)
        if await asyncio.to_thread(self.kube.create, job):
            self._created[job["metadata"]["name"]] = (time.monotonic(), job)
            log.info("Created Job %s item=%s", job["metadata"]["name"], item.key)

    async def _write_status(self, body: Obj, status: Obj) -> None:
        if _same(body.get("status") or {}, status):
            return  # an unchanged status is not written: no event storm
        meta = body["metadata"]
        await asyncio.to_thread(self.kube.patch_status, "evaluations", meta["namespace"],
                                meta["name"], status)


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


@kopf.on.startup()
async def _startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    global RECONCILER, _METRICS
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    load_config()
    # API calls run in threads; the default pool (cores + 4) is too small to overlap them.
    asyncio.get_running_loop().set_default_executor(
        concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="proctor-api"))
    _METRICS = _METRICS or Metrics()
    RECONCILER = Reconciler(
        Kube(), _METRICS, Settings(image_pull_timeout_s=float(
            os.environ.get("PROCTOR_IMAGE_PULL_TIMEOUT_SECONDS", "600"))),
        runner_image=os.environ.get("PROCTOR_RUNNER_IMAGE") or None)


@kopf.on.cleanup()
async def _cleanup(**_: Any) -> None:
    if RECONCILER:
        await RECONCILER.idle()


def _owner_key(obj: Mapping[str, Any]) -> Key:
    """(namespace, evaluation label) of a child object: how the indexes are keyed."""
    meta = obj.get("metadata") or {}
    return meta.get("namespace"), (meta.get("labels") or {}).get(LABEL_EVALUATION)


# kopf keeps these current from watches, so a reconcile pass lists nothing.
@kopf.index("batch", "v1", "jobs", labels={MANAGED_BY: "proctor"})
def proctor_jobs(body: Mapping[str, Any], **_: Any) -> dict[Key, Obj]:
    return {_owner_key(body): dict(body)}


@kopf.index("", "v1", "pods", labels={MANAGED_BY: "proctor"})
def proctor_pods(body: Mapping[str, Any], **_: Any) -> dict[Key, Obj]:
    return {_owner_key(body): dict(body)}


@kopf.index("", "v1", "configmaps", labels={COMPONENT: RESULT_KIND})
def proctor_results(body: Mapping[str, Any], **_: Any) -> dict[Key, RunResult] | None:
    result = read_result(body)  # only the result: the logs stay on the server
    return {_owner_key(body): result} if result is not None else None


@kopf.index("", "v1", "events",
            when=lambda body, **_: (body.get("involvedObject") or {}).get("kind") in
            ("Job", "Pod") and body.get("type") == "Warning")
def proctor_events(namespace: str, body: Mapping[str, Any], **_: Any) -> dict[str, Obj]:
    return {namespace: dict(body)}


def _attach(kwargs: Mapping[str, Any]) -> Reconciler | None:
    """Hand kopf's live indexes to the reconciler (they come as handler arguments)."""
    if RECONCILER is not None and RECONCILER.indexes is None:
        RECONCILER.indexes = {name: kwargs[name] for name in
                              ("proctor_jobs", "proctor_pods", "proctor_results",
                               "proctor_events")}
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
        return
    # Only spec changes (or first sight) call for a pass: our own status writes do not.
    if event.get("type") in (None, "ADDED") or \
            meta.get("generation") != (body.get("status") or {}).get("observedGeneration"):
        reconciler.kick(key)


@kopf.timer("proctor.dev", "v1alpha1", "evaluations", interval=TIMER_SECONDS)
async def _timer(namespace: str, name: str, **kwargs: Any) -> None:
    _attach(kwargs).kick((namespace, name))


@kopf.on.event("batch", "v1", "jobs", labels={MANAGED_BY: "proctor"})
async def _job_event(namespace: str, meta: Mapping[str, Any], **kwargs: Any) -> None:
    # The owner reference names the Evaluation exactly (the label is a label-safe form).
    owners = [o["name"] for o in meta.get("ownerReferences") or []
              if o.get("kind") == "Evaluation"]
    reconciler = _attach(kwargs)
    if owners and reconciler:
        reconciler.kick((namespace, owners[0]))


@kopf.on.probe(id="reconciling")
def _probe(**_: Any) -> dict[str, int]:
    return {"evaluations_in_pass": len(RECONCILER._running) if RECONCILER else 0}
