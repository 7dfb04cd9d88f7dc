"""The operator: one level-based reconcile per Evaluation, and the only kopf handlers.

A pass (`Controller.reconcile`), in a dozen lines:

    body = the Evaluation from kopf's index        gone or being deleted: forget it, stop
    evaluation, agent, dataset = parse, check      refused: Ready=False, reason, stop
                                                   (finished: its agent is not looked up)
    items = plan_items(evaluation, dataset,        once per spec generation, with the
                       prompt_variants(...))       template variants made in-process; llm
                                                   ones read from the Evaluation's variants
                                                   Job (VariantsReady False until it ends)
    pre-pull (spec.images.prePull)                 a Job per task image, N at a time; no
                                                   item starts until each ended (ImagesPulled)
    jobs, pods, results, events = the indexes      + what this process wrote (expectations)
    views = observe(the items in play)             each item's attempts and `item_state`
    decision = decide(evaluation, views, now,      pure: harvest, retry, give up, stop, start
                      agent slots left)            (the agent's slots held: recorded at once)
    act: keep results, delete Jobs, create Jobs    concurrently, awaited before the pass ends
    status = build_status(every item's view)      at most every STATUS_SECONDS
    write it; metrics; the agent's tasksInFlight   Events: Degraded, Succeeded, items in error

Where each rule lives:

* which items exist, refusals, the dataset: `proctor.prepare` (shared with `proctor run`);
* what an attempt's Job, pod and events say: `proctor.k8s.podstatus.item_state`;
* slots, retries, giving up, when to start: `proctor.k8s.reconcile.decide` (pure). An
  attempt holds its slot until its pod has ended or its Job is terminal, whichever first;
* the one place a Job is created: `act.Pass.create_job`, in the slots `decide` gave
  (never more than maxConcurrentRows); never for an Evaluation deleted or being deleted
  (`Controller._still_there` asks the API server before a pass creates any);
* Job, ConfigMap and result objects: `manifests`, `store` (pure); names: `names`;
* conditions, the status and its `reason`, LocalEndpoint, an agent's Ready: `conditions`,
  `reconcile`;
* each item's API calls (keep, retry, delete, create): `act`; what was written but not
  yet seen: `expectations`; the queue of passes: `workqueue`.

Agents (`probe_agent`): on a new spec, and then every AGENT_PROBE_SECONDS (each resync
while not ready), a service agent's Deployment and Service are applied (server-side apply:
`agent_manifests`, owned by the AgentUnderTest) and the agent's card is fetched; its status
shows the card and Ready (`conditions.agent_ready`). While an Evaluation's agent is not
ready, no item of it starts and its Ready is False with reason AgentNotReady (`decide`'s
``agent_ready``); a readiness change gives the namespace's Evaluations a pass. An item the
agent never answered (it went away mid-request) makes the pass fetch the card at once;
the item is asked again once the card has answered since (`reconcile.unanswered`).

Triggers: a change of the Evaluation's spec, of its Jobs, pods or agent puts it into one
deduplicated workqueue; one pass per Evaluation runs at a time. A resync every
`RESYNC_SECONDS` covers what has no event of its own (an image pull past its limit).

One concurrency model: kopf's asyncio loop (its handlers and indexes, and our asyncio
tasks: the queue's workers, the resync); the official client's blocking calls run in
asyncio's default executor. No finalizer: the operator keeps nothing outside the cluster,
and the Evaluation owns what it made, so Kubernetes' garbage collector removes it, with or
without an operator running (kopf would add one for a timer: hence no kopf timer).

Run it with `proctor operator` (the chart's Deployment) or `kopf run -m
proctor.k8s.controller` (then PROCTOR_ALLOW_LOCAL_ENDPOINTS=1 stands for the flag). With
`--leader-election`, several may run: only the holder of a Lease runs the handlers
(`proctor.k8s.election`, `proctor.k8s.leader`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import kopf

from proctor import __version__, datasets
from proctor.a2a.client import AgentProblem, fetch_card
from proctor.core.exits import BadInput
from proctor.core.labels import COMPONENT, LABEL_EVALUATION, MANAGED_BY
from proctor.core.metrics import aggregate
from proctor.core.model import WorkItem
from proctor.core.plan import Variant
from proctor.core.spec import AgentUnderTest, Evaluation, Resource
from proctor.formats.manifest import ManifestError, parse_kind
from proctor.k8s import (
    agent_manifests,
    conditions,
    manifests,
    netpol,
    prepull,
    reconcile,
    store,
    variants_job,
)
from proctor.k8s.act import (
    Pass,
    Tracked,
    create_pull_job,
    create_variants_job,
    write_status,
)
from proctor.k8s.api import (
    Kube,
    Leases,
    SecretUnreadable,
    describe,
    load_config,
    owner_uid,
)
from proctor.k8s.conditions import AgentProbe
from proctor.k8s.election import Election, run_elected
from proctor.k8s.exporter import Metrics
from proctor.k8s.names import label_value
from proctor.k8s.podstatus import ItemState, PodsByJob, item_state
from proctor.k8s.reconcile import Decision, ItemView, Settings
from proctor.k8s.workqueue import WorkQueue
from proctor.prepare import (
    Refusal,
    agent_label,
    check_runnable,
    load_selection,
    prompt_variants,
)

log = logging.getLogger("proctor.controller")
Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, Evaluation label value): how the indexes key its objects
_Kind = TypeVar("_Kind", Evaluation, AgentUnderTest)
RESYNC_SECONDS = 10.0  # PROCTOR_RECONCILE_SECONDS (read at startup: see `env_settings`)
STATUS_SECONDS = 1.0  # the least time between two status writes of one Evaluation
RETRY_SECONDS = 1.0  # a pass that failed (a write refused, say) is made again this later
AGENT_PROBE_SECONDS = 30.0  # a ready agent's card is fetched again this often (others: each
# resync), so that an agent that went away stops getting new tasks
CARD_TIMEOUT_SECONDS = 5.0  # an agent whose card takes longer is not ready
PROCTOR = {MANAGED_BY: "proctor"}
RESULTS = {**PROCTOR, COMPONENT: store.RESULT_KIND}


def _env_seconds(name: str, text: str | None, default: float) -> float:
    """A setting in seconds: a number above 0; unset or empty, ``default``."""
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} is {text!r}: give a number of seconds above 0, or leave "
                         f"it unset")
    return value


def _made_variants(evaluation: Evaluation, selection: datasets.Selection
                   ) -> dict[str, list[Variant]] | Refusal:
    """Each task's prompt variants, or the refusal of a task whose ConfigMap they would
    make too large (as `proctor render` refuses it)."""
    return _sized(evaluation, selection, prompt_variants(evaluation, selection))


def _sized(evaluation: Evaluation, selection: datasets.Selection,
           made: dict[str, list[Variant]]) -> dict[str, list[Variant]] | Refusal:
    try:
        manifests.check_task_sizes(evaluation, selection.instances,
                                   manifests.variant_texts(made))
    except manifests.TaskTooLarge as exc:
        return Refusal("TaskTooLarge", str(exc))
    return made


def env_settings(environ: Mapping[str, str]) -> tuple[float, float]:
    """(resync seconds, image pull timeout seconds) from PROCTOR_RECONCILE_SECONDS and
    PROCTOR_IMAGE_PULL_TIMEOUT_SECONDS; a bad one is a ValueError naming it, read before
    kopf starts so that it is one line, not a traceback (at import, it would be one)."""
    return (_env_seconds("PROCTOR_RECONCILE_SECONDS",
                         environ.get("PROCTOR_RECONCILE_SECONDS"), 10.0),
            _env_seconds("PROCTOR_IMAGE_PULL_TIMEOUT_SECONDS",
                         environ.get("PROCTOR_IMAGE_PULL_TIMEOUT_SECONDS"), 600.0))


def _store_state(evaluation: Evaluation, tracked: Tracked) -> reconcile.StoreState | None:
    """The Evaluation's store as the operator last used it; None without one."""
    try:
        config = store.store_of(evaluation, os.environ)
    except BadInput as exc:  # a bad default URL: every upload fails, and says so
        return reconcile.StoreState(url="", error=str(exc))
    if config is None:
        return None
    return reconcile.StoreState(url=str(config.run), error=tracked.store_error)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Controller:
    def __init__(self, kube: Kube, metrics: Metrics, settings: Settings,
                 indexes: Mapping[str, Any], runner_image: str | None, allow_local: bool,
                 job_defaults: manifests.JobDefaults = manifests.NO_JOB_DEFAULTS,
                 boundary: netpol.Boundary = netpol.NO_BOUNDARY):
        self.kube, self.metrics, self.settings, self.indexes = kube, metrics, settings, indexes
        self.runner_image, self.allow_local = runner_image, allow_local
        self.job_defaults, self.boundary = job_defaults, boundary
        self.queue = WorkQueue(self.reconcile)
        self.tracked: dict[Key, Tracked] = {}
        self._datasets: dict[tuple[Any, ...], datasets.Selection] = {}
        self._variants: dict[tuple[Any, ...], dict[str, list[Variant]] | Refusal] = {}
        self._parsed: dict[tuple[Any, Any], Resource] = {}  # by (uid, generation)
        self._resync: asyncio.Task[None] | None = None
        self._probes: asyncio.Task[None] | None = None
        self.probes: dict[Key, AgentProbe] = {}  # by (namespace, AgentUnderTest name)
        self._probed: dict[Key, tuple[float, Any]] = {}  # when, and of which generation
        # When each agent's card last answered, and when it was last fetched (wall clock,
        # compared with pods' times: an attempt it never answered is asked again only
        # once its card has answered since).
        self._card_at: dict[Key, datetime] = {}
        self._fetched_at: dict[Key, datetime] = {}

    def start(self) -> None:
        """Start the resync (from a handler: kopf.warn needs kopf's context, which the
        tasks started here and by the queue inherit)."""
        if self._resync is None:
            self._resync = asyncio.get_running_loop().create_task(self._resync_forever())
            self._probes = asyncio.get_running_loop().create_task(self._probe_forever())

    async def _resync_forever(self) -> None:
        while True:
            await asyncio.sleep(RESYNC_SECONDS)
            for key in list(self.indexes["evaluations"]):
                self.queue.add(key)
            for key in set(self.tracked) - set(self.indexes["evaluations"]):
                await self.forget(key)

    def stop(self) -> None:
        self.queue.stop()
        for task in (self._resync, self._probes):
            if task is not None:
                task.cancel()

    async def forget(self, key: Key) -> None:
        """The Evaluation is gone or being deleted: drop all that is kept about it."""
        tracked = self.tracked.pop(key, None)
        if tracked is not None:
            self.metrics.forget(key[0], tracked.name, tracked.agent_label)
            if tracked.shown[0] is not None:
                await self.write_agent_status(*tracked.shown[0])

    def _kept(self, key: Key) -> list[Any]:
        """The kept results (the index holds each with its owner's uid)."""
        return [result for _, result in self._all("results", key)]

    def _one(self, index: str, key: Any) -> Obj | None:
        return next(iter(self.indexes[index].get(key) or ()), None)

    def _all(self, index: str, key: Any) -> list[Any]:
        return list(self.indexes[index].get(key) or ())

    def _parse(self, body: Obj, kind: type[_Kind]) -> _Kind:
        """An Evaluation or AgentUnderTest checked against its CRD (once per generation)."""
        version = (body["metadata"].get("uid"), body["metadata"].get("generation"))
        parsed = self._parsed.get(version)
        if not isinstance(parsed, kind):  # not seen yet (a uid is never of two kinds)
            if len(self._parsed) > 1000:
                self._parsed.clear()
            parsed = self._parsed[version] = parse_kind(body, kind)
        return parsed

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
            return await self.forget(key)  # its Jobs are left to the garbage collector
        meta = body["metadata"]
        tracked = self.tracked.get(key)
        if tracked is None or tracked.uid != meta.get("uid"):
            tracked = self.tracked[key] = Tracked(meta.get("uid", ""), meta["name"])
        left = self._predecessors_left(key, tracked)
        if left:
            log.info("Waiting for %d objects of an earlier Evaluation %s/%s to be deleted",
                     left, key[0], tracked.name)
            return self.queue.add_after(key, RETRY_SECONDS)
        selection, variants, refusal = None, None, None
        try:
            evaluation = self._parse(body, Evaluation)
            tracked.agent_label = agent_label(evaluation)
            check_runnable(evaluation, on_cluster=True)
            selection = await self._dataset(evaluation)
            variants = await self._variants_of(key, tracked, body, evaluation, selection)
            if variants is None:  # its llm variants are not written yet
                return
            # A finished Evaluation stays as it ended, whatever becomes of its agent.
            finished = self._finished(key, tracked, tracked.items(body, evaluation, selection,
                                                                  variants))
            agent = None if finished else self._agent(evaluation)
            policy = self._policy(evaluation, agent, finished)
        except (ManifestError, Refusal) as exc:
            refusal = exc if isinstance(exc, Refusal) else Refusal("InvalidSpec", str(exc))
            generation = meta.get("generation")
            invalid = reconcile.invalid_conditions((body.get("status") or {}).get(
                "conditions") or [], refusal.reason, refusal.message, _now(), generation)
            await write_status(self.kube, tracked, body, {
                "reason": refusal.reason, "conditions": invalid, "observedGeneration": generation})
            if selection is None or variants is None:
                return
            agent, policy = None, None  # its agent is missing or unreachable: start
            # nothing, keep what still ends
        items = tracked.items(body, evaluation, selection, variants)
        if refusal is None and evaluation.spec.images.pre_pull and not await self._pre_pull(
                key, tracked, body, evaluation, selection, items):
            return  # no item starts before its images are pulled
        rows = evaluation.spec.max_concurrent_rows if refusal is None else 0
        views = self._observe(key, tracked, items, rows)
        waiting = self._agent_waiting(agent)
        decision = self._decide(evaluation, views, tracked, agent, waiting)
        if decision.awaiting_card and agent is not None and self._card_stale(agent, decision):
            # The agent went away, or not: its card says (a probe gives a pass on a change).
            await self.probe_agent(agent.namespace, agent.name)
            waiting = self._agent_waiting(agent)
            decision = self._decide(evaluation, views, tracked, agent, waiting)
        if refusal is not None:
            decision.start, decision.retry, decision.ask_again = [], [], []
        self._hold_agent_slots(key, tracked, agent, decision.agent_tasks)
        if (decision.start or decision.retry or decision.ask_again) and not \
                await self._still_there(key, tracked):
            return await self.forget(key)
        p = Pass(self.kube, self.metrics, self.runner_image, body, tracked, evaluation, agent,
                 selection.by_id, reconcile.preferred_nodes(
                     evaluation, selection.by_id, views,
                     tracked.pulls.nodes if tracked.pulls is not None else {}),
                 self.job_defaults, policy)
        for failure in await p.act(decision):
            self.metrics.reconcile_errors.inc()
            log.error("Acting failed evaluation=%s/%s: %s", key[0], tracked.name,
                      describe(failure))
            self.queue.add_after(key, RETRY_SECONDS)
        if refusal is None:
            await self._publish(key, p, selection, items, decision, waiting)

    async def _pre_pull(self, key: Key, tracked: Tracked, body: Obj, evaluation: Evaluation,
                        selection: datasets.Selection, items: list[WorkItem]) -> bool:
        """Whether items may start: the pre-pull of the Evaluation's images (`prepull`) has
        ended. Until then its next pull Jobs are made, and the status says how far it got."""
        jobs = [j for j in self._all("jobs", key)
                if prepull.is_pull_job(j) and owner_uid(j) == tracked.uid]
        started = any(reconcile.item_of(j) for j in tracked.expected.with_jobs(
            self._all("jobs", key))) or bool(self._kept(key))
        if started:
            # The pre-pull is over: its Jobs go, with their pods, whose exited containers
            # would keep every image in use (the kubelet's image GC spares those) for as
            # long as the Evaluation lives. status.images and ImagesPulled keep what they
            # said last (a merge patch; after a restart, `_publish` writes neither).
            await asyncio.gather(*(asyncio.to_thread(self.kube.delete_job, key[0],
                                                     j["metadata"]["name"]) for j in jobs))
            return True
        pods, now = PodsByJob(self._all("pods", key)), datetime.now(UTC)

        def pull_of(job: Obj) -> prepull.Pull:
            own = pods.of(job)
            names = [job["metadata"]["name"], *(pod["metadata"]["name"] for pod in own)]
            return prepull.pull_of(job, own, [e for name in names for e in
                                              self._all("warnings", (key[0], name))],
                                   now, self.settings.image_pull_timeout_s)
        images = prepull.images_of(evaluation, items, selection.by_id)
        state = tracked.pulls = prepull.pull_state(
            images, {prepull.image_of(j): pull_of(j) for j in jobs},
            evaluation.spec.images.pre_pull_parallelism, suspended=evaluation.spec.suspend)
        if state.create and await self._still_there(key, tracked):
            await asyncio.gather(*(create_pull_job(self.kube, body, prepull.pull_job(
                evaluation, image, self.job_defaults)) for image in state.create))
        if not state.ready:
            generation = body["metadata"].get("generation")
            waiting = conditions.set_condition(
                (body.get("status") or {}).get("conditions") or [], prepull.CONDITION,
                *state.condition, now=_now(), observed_generation=generation)
            await write_status(self.kube, tracked, body, {
                "reason": "PullingImages", "conditions": waiting, "images": state.status(),
                "observedGeneration": generation})
        return state.ready

    def _decide(self, evaluation: Evaluation, views: list[ItemView],
                tracked: Tracked, agent: AgentUnderTest | None,
                waiting: tuple[str, str] | None) -> Decision:
        card_at = None
        if agent is not None:  # a sidecar's card is checked in each pod, before its task
            card_at = (datetime.now(UTC) if agent.spec.sidecar
                       else self._card_at.get((agent.namespace, agent.name)))
        return reconcile.decide(evaluation, views, datetime.now(UTC), self.settings,
                                self._agent_slots(tracked, agent), agent_ready=waiting is None,
                                card_at=card_at)

    def _card_stale(self, agent: AgentUnderTest, decision: Decision) -> bool:
        """Whether an attempt the agent never answered ended after its card was last
        fetched: fetch it now, rather than at the next periodic probe."""
        fetched = self._fetched_at.get((agent.namespace, agent.name))
        ends = [reconcile.ended_at(v) for v in decision.awaiting_card]
        return fetched is None or any(end is not None and end >= fetched for end in ends)

    def _policy(self, evaluation: Evaluation, agent: AgentUnderTest | None, finished: bool
                ) -> Obj | None:
        """The Evaluation's NetworkPolicy (`netpol`), when the boundary is on and items may
        still start."""
        if not self.boundary.enabled or finished:
            return None
        return netpol.network_policy(evaluation, agent, self.boundary)

    def _predecessors_left(self, key: Key, tracked: Tracked) -> int:
        """How many Jobs and kept results an earlier Evaluation of the same name owns still:
        deleted, it leaves them to the garbage collector, in its own time. Its items have
        the same names as this one's, so its results would count as this one's and its
        Jobs would take their names: nothing is done until they are gone."""
        owners = [owner_uid(job) for job in self._all("jobs", key)]
        owners += [uid for uid, _ in self._all("results", key)]
        return sum(uid is not None and uid != tracked.uid for uid in owners)

    def _finished(self, key: Key, tracked: Tracked, items: list[WorkItem]) -> bool:
        """Whether every item has a kept result."""
        kept = {r.item_id for r in tracked.expected.with_results(self._kept(key))}
        return bool(items) and all(item.id in kept for item in items)

    def _agent_slots(self, tracked: Tracked, agent: AgentUnderTest | None) -> int | None:
        """The agent's task slots that its other Evaluations leave free (None: no agent)."""
        if agent is None:
            return None
        others = sum(t.agent_tasks for t in self.tracked.values()
                     if t is not tracked and t.slot_agent == (agent.namespace, agent.name))
        return agent.spec.max_concurrent_tasks - others

    def _hold_agent_slots(self, key: Key, tracked: Tracked, agent: AgentUnderTest | None,
                          tasks: int) -> None:
        """Record the agent's slots this Evaluation holds, at once (before the pass awaits
        anything, so that a pass of another Evaluation counts them); when it gives some
        back, the agent's other Evaluations get a pass to take them."""
        before = tracked.slot_agent
        released = tracked.agent_tasks > tasks
        tracked.agent_tasks = tasks if agent is not None else 0
        tracked.slot_agent = (agent.namespace, agent.name) if agent is not None else None
        if released and before is not None:
            for other_key, other in self.tracked.items():
                if other_key != key and other.slot_agent == before:
                    self.queue.add(other_key)

    async def _still_there(self, key: Key, tracked: Tracked) -> bool:
        """Whether the Evaluation is there as it was, asked of the API server: the index
        may lag behind the garbage collector deleting its Jobs, which look like free slots."""
        meta = (await asyncio.to_thread(self.kube.get_custom, "evaluations", key[0],
                                        tracked.name) or {}).get("metadata", {})
        return meta.get("uid") == tracked.uid and not meta.get("deletionTimestamp")

    async def _dataset(self, evaluation: Evaluation) -> datasets.Selection:
        ds = evaluation.spec.dataset
        key = (ds.name, ds.split, ds.revision, ds.instance_ids, ds.max_rows)
        if key not in self._datasets:
            self._datasets[key] = await asyncio.to_thread(load_selection, evaluation)
        return self._datasets[key]

    async def _variants_of(self, key: Key, tracked: Tracked, body: Obj,
                           evaluation: Evaluation, selection: datasets.Selection
                           ) -> dict[str, list[Variant]] | None:
        """Each task's prompt variants: template ones made here (`_prompt_variants`), llm
        ones read from the Evaluation's variants Job; None (and VariantsReady False in the
        status) while that Job is writing them."""
        sensitivity = evaluation.spec.prompt_sensitivity
        if not (sensitivity.enabled and sensitivity.strategy == "llm"):
            return await self._prompt_variants(evaluation, selection)
        if tracked.llm_variants is None or not tracked.llm_variants.ready:
            tracked.llm_variants = await self._llm_variants(key, tracked, body, evaluation,
                                                            selection)
        state = tracked.llm_variants
        if not state.ready:
            generation = body["metadata"].get("generation")
            waiting = conditions.set_condition(
                (body.get("status") or {}).get("conditions") or [], variants_job.CONDITION,
                False, state.reason, state.message, now=_now(), observed_generation=generation)
            await write_status(self.kube, tracked, body, {
                "reason": "MakingVariants", "conditions": waiting,
                "observedGeneration": generation})
            return None
        sized = _sized(evaluation, selection, state.variants)
        if isinstance(sized, Refusal):
            raise sized
        return sized

    async def _llm_variants(self, key: Key, tracked: Tracked, body: Obj,
                            evaluation: Evaluation, selection: datasets.Selection
                            ) -> variants_job.VariantsState:
        """Where the Evaluation's variants Job stands (created here when it has none); its
        pod's log is read once the Job has ended (its pod gone: no variants, every task
        its original only)."""
        name = variants_job.variants_job_name(evaluation)
        job = next((j for j in self._all("jobs", key) if j["metadata"]["name"] == name
                    and owner_uid(j) == tracked.uid), None)
        task_ids = tuple(i.instance_id for i in selection.instances)
        if job is None and await self._still_there(key, tracked):
            await create_variants_job(self.kube, body, variants_job.variants_job(
                evaluation, runner_version=__version__, runner_image_default=self.runner_image))
        state = variants_job.variants_state(job, None, task_ids)
        if state.reason == "ReadingLog":
            assert job is not None
            pods = PodsByJob(self._all("pods", key)).of(job)
            text = await asyncio.to_thread(self.kube.pod_log, key[0],
                                           pods[-1]["metadata"]["name"], "variants"
                                           ) if pods else ""
            state = variants_job.variants_state(job, text, task_ids)
        if state.ready:
            log.info("Read the llm variants evaluation=%s tasks=%d failed=%d reason=%s",
                     tracked.name, len(task_ids), len(state.failed), state.reason)
        return state

    async def _prompt_variants(self, evaluation: Evaluation, selection: datasets.Selection
                               ) -> dict[str, list[Variant]]:
        """Each task's prompt variants (`prompt_variants`), made once per dataset and
        promptSensitivity, off the loop (the Verified split's 3 template variants take
        2 s, its 14 take 20 s); a Refusal (kept, not made again) when a task's ConfigMap
        would be too large for them."""
        spec = evaluation.spec
        key = (selection.fingerprint, spec.prompt_sensitivity, spec.predictions)
        if key not in self._variants:
            self._variants[key] = await asyncio.to_thread(_made_variants, evaluation,
                                                          selection)
        made = self._variants[key]
        if isinstance(made, Refusal):  # a new one each time: a raise adds to its traceback
            raise Refusal(made.reason, made.message)
        return made

    def _agent(self, evaluation: Evaluation) -> AgentUnderTest | None:
        if evaluation.spec.predictions.source != "agent":
            return None
        ref = evaluation.spec.agent_ref.name if evaluation.spec.agent_ref else ""
        body = self._one("agents", (evaluation.namespace, ref))
        if body is None:
            raise Refusal("AgentNotFound", f"AgentUnderTest {ref!r} does not exist in "
                                           f"namespace {evaluation.namespace}")
        agent = self._parse(body, AgentUnderTest)  # (the API server checked the same schema)
        refusal = conditions.agent_refusal(agent, self.allow_local)
        if refusal is not None:
            raise Refusal(*refusal)
        return agent

    def _agent_waiting(self, agent: AgentUnderTest | None) -> tuple[str, str] | None:
        """Why no item may start for want of its agent (the reason and message of the
        Evaluation's Ready=False), or None: no agent asked, or it is ready."""
        if agent is None:
            return None
        ready, why, message = conditions.agent_ready(
            agent, self.probes.get((agent.namespace, agent.name)), self.allow_local)
        return None if ready else ("AgentNotReady", f"AgentUnderTest {agent.name} is not "
                                   f"ready ({why}: {message}); no item starts until it is")

    # --- agents: their Deployment and Service, their card ----------------------------------

    def needs_probe(self, namespace: str, name: str, generation: Any) -> bool:
        """Whether this generation of the agent was not probed yet (a new agent, a changed
        spec); its other events (its own status writes) need no card fetched."""
        probed = self._probed.get((namespace, name))
        return probed is None or probed[1] != generation

    async def _probe_forever(self) -> None:
        """Probe the agents not ready each RESYNC_SECONDS and the others every
        AGENT_PROBE_SECONDS, all at once (each card fetch waits CARD_TIMEOUT_SECONDS at
        most), apart from the resync of Evaluations, which a slow card would delay."""
        while True:
            await asyncio.sleep(RESYNC_SECONDS)
            await self._probe_due()

    async def _probe_due(self) -> None:
        now, due = time.monotonic(), []
        for key in list(self.indexes["agents"]):
            probe, probed = self.probes.get(key), self._probed.get(key)
            ready = probe is not None and probe.card is not None and probe.unavailable is None
            if probed is None or not ready or now - probed[0] >= AGENT_PROBE_SECONDS:
                due.append(self.probe_agent(*key))
        for failure in await asyncio.gather(*due, return_exceptions=True):
            if isinstance(failure, BaseException):
                log.error("Probing an agent failed: %s", describe(failure))

    def forget_agent(self, namespace: str, name: str) -> None:
        """The agent is gone: its probe too (a new one of the same name starts afresh)."""
        for known in (self.probes, self._probed, self._card_at, self._fetched_at):
            known.pop((namespace, name), None)

    async def probe_agent(self, namespace: str, name: str) -> None:
        """Apply a service agent's Deployment and Service, fetch the agent's card, and write
        its status; when its readiness changes, its namespace's Evaluations get a pass."""
        key = (namespace, name)
        body = self._one("agents", key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return self.forget_agent(namespace, name)
        try:
            agent = self._parse(body, AgentUnderTest)
        except ManifestError:  # the API server checks the same schema: only a CRD changed
            return log.exception("AgentUnderTest %s/%s is invalid", namespace, name)
        generation = body["metadata"].get("generation")
        first = self.needs_probe(namespace, name, generation)
        was = conditions.agent_ready(agent, self.probes.get(key), self.allow_local)
        self._probed[key] = (time.monotonic(), generation)
        fetched_at = datetime.now(UTC)
        self.probes[key] = await self.probe(agent, body["metadata"].get("uid"), first)
        self._fetched_at[key] = fetched_at
        if self.probes[key].card is not None:
            self._card_at[key] = fetched_at
        now = conditions.agent_ready(agent, self.probes[key], self.allow_local)
        if now[:2] != was[:2]:
            log.info("AgentUnderTest %s/%s ready=%s reason=%s", namespace, name, *now[:2])
            for other in list(self.indexes["evaluations"]):
                if other[0] == namespace:
                    self.queue.add(other)
        await self.write_agent_status(namespace, name)

    async def probe(self, agent: AgentUnderTest, uid: str | None, first: bool = False
                    ) -> AgentProbe:
        """What the agent's card and (service agents) Deployment say now."""
        if agent.spec.sidecar or conditions.agent_refusal(agent, self.allow_local):
            return AgentProbe()  # nothing to fetch: it runs per task, or it is refused
        if agent.spec.service:
            try:
                applied = [await asyncio.to_thread(self.kube.apply, obj)
                           for obj in agent_manifests.desired(agent, uid)]
            except Exception as exc:  # refused (RBAC, a quota): the condition says so
                log.error("Applying the Deployment of AgentUnderTest %s/%s failed: %s",
                          agent.namespace, agent.name, describe(exc))
                return AgentProbe(unavailable=f"its Deployment and Service could not be "
                                              f"applied: {describe(exc)}")
            if first:
                log.info("Applied Deployment and Service %s/%s agent=%s", agent.namespace,
                         applied[0]["metadata"]["name"], agent.name)
            unavailable = agent_manifests.unavailable(applied[0])
            if unavailable is not None:  # the Service has no pod to send the fetch to
                return AgentProbe(unavailable=unavailable)
        endpoint, header = manifests.agent_endpoint(agent), None
        if agent.spec.auth is not None:
            try:
                header = await self.auth_header(agent)
            except Exception as exc:  # missing, refused (RBAC): the condition says so
                why = str(exc) if isinstance(exc, SecretUnreadable) else describe(exc)
                return AgentProbe(auth=f"its token (spec.auth) could not be read: {why}")
        try:
            card = await fetch_card(endpoint, CARD_TIMEOUT_SECONDS, auth_header=header)
        except AgentProblem as exc:
            return AgentProbe(error=str(exc))
        return AgentProbe(card=agent_manifests.card_status(card))

    async def auth_header(self, agent: AgentUnderTest) -> tuple[str, str] | None:
        """The header the solve step sends (spec.auth), for the card fetch: the token read
        from its Secret at each probe (a rotated token is used at the next), kept nowhere."""
        auth = agent.spec.auth
        if auth is None:
            return None
        token = await asyncio.to_thread(self.kube.secret_value, agent.namespace,
                                        auth.secret_ref.name, auth.secret_ref.key)
        return auth.header_for(token)

    def _observe(self, key: Key, tracked: Tracked, items: list[WorkItem], rows: int | None
                 ) -> list[ItemView]:
        """The items in play (``rows`` waiting at most; None: every item) as the indexes
        and the expectations show them."""
        # Only items' Jobs: the llm variants Job (no item label) is no item's attempt.
        jobs = [job for job in tracked.expected.with_jobs(self._all("jobs", key))
                if reconcile.item_of(job)]
        kept = {r.item_id: r for r in tracked.expected.with_results(self._kept(key))}
        pods = PodsByJob(self._all("pods", key))

        def state_of(job: Mapping[str, Any]) -> ItemState:
            own = pods.of(job)
            names = [job["metadata"]["name"], *(pod["metadata"]["name"] for pod in own)]
            return item_state(job, own, [e for name in names
                                         for e in self._all("warnings", (key[0], name))])
        chosen = items if rows is None else reconcile.in_play(items, jobs, kept.keys(), rows)
        return reconcile.observe(chosen, jobs, kept, state_of)

    # --- the status ------------------------------------------------------------------------

    async def _publish(self, key: Key, p: Pass, selection: datasets.Selection,
                       items: list[WorkItem], decision: Decision,
                       waiting: tuple[str, str] | None = None) -> None:
        """Rebuild the status and metrics from every item as observed, and write them; at
        most every STATUS_SECONDS (a pass is queued for what comes meanwhile)."""
        wait = p.tracked.status_at + STATUS_SECONDS - time.monotonic()
        if wait > 0:
            return self.queue.add_after(key, wait)
        p.tracked.status_at = time.monotonic()
        views = self._observe(key, p.tracked, items, None)
        results = [v.result for v in views if v.result is not None]
        generation = p.body["metadata"].get("generation")
        old = (p.body.get("status") or {}).get("conditions") or []
        figures = p.tracked.reliability(results)
        conditions_now = reconcile.conditions_for(
            old, views, decision, _now(), generation, p.evaluation.spec.suspend,
            agent_waiting=waiting, store=_store_state(p.evaluation, p.tracked))
        made = p.tracked.llm_variants
        if made is not None:
            conditions_now = conditions.set_condition(
                conditions_now, variants_job.CONDITION, made.ready, made.reason, made.message,
                now=_now(), observed_generation=generation)
        # None after a restart once items started: the status keeps what it said last.
        pulls = p.tracked.pulls if p.evaluation.spec.images.pre_pull else None
        if pulls is not None:
            conditions_now = conditions.set_condition(
                conditions_now, prepull.CONDITION, *pulls.condition, now=_now(),
                observed_generation=generation)
        status = reconcile.build_status(
            p.evaluation, p.tracked.agent_label, views, results, conditions_now,
            generation=generation, fingerprint=selection.fingerprint, reliability=figures,
            variants_failed=p.tracked.variants_failed)
        if pulls is not None:
            status["images"] = pulls.status()
        await write_status(self.kube, p.tracked, p.body, status)
        self.metrics.publish(p.evaluation.namespace, p.evaluation.name, p.tracked.agent_label,
                             aggregate(results, selection.by_id), status["items"], figures)
        # The agent's tasks are the slots its items hold (solve steps not ended), not the
        # items running: an item in its test step asks nothing of the agent.
        shown = (p.tracked.slot_agent, p.tracked.agent_tasks)
        if shown != p.tracked.shown:
            before, p.tracked.shown = p.tracked.shown[0], shown
            for changed in {c for c in (before, shown[0]) if c is not None}:
                await self.write_agent_status(*changed)

    async def write_agent_status(self, namespace: str, name: str) -> None:
        """An AgentUnderTest's status: mode, endpoint, Ready, and its tasks in flight over
        every Evaluation this operator runs."""
        body = self._one("agents", (namespace, name))
        if body is None:
            return
        generation, seen = body["metadata"].get("generation"), body.get("status") or {}
        try:
            agent = self._parse(body, AgentUnderTest)
        except ManifestError:  # the API server checks the same schema: only a CRD changed
            return log.exception("AgentUnderTest %s/%s is invalid", namespace, name)
        busy = sum(t.agent_tasks for t in self.tracked.values()
                   if t.slot_agent == (namespace, name))
        status = conditions.agent_status(agent, seen.get("conditions") or [], now=_now(),
                                         generation=generation, tasks_in_flight=busy,
                                         allow_local=self.allow_local,
                                         probe=self.probes.get((namespace, name)))
        if not all(seen.get(k) == v for k, v in status.items()):
            await asyncio.to_thread(self.kube.patch_status, "agentundertests", namespace, name,
                                    status)


# --- kopf wiring (thin) ----------------------------------------------------------------------

CONTROLLER: Controller | None = None
_METRICS: Metrics | None = None  # one per process: a registry refuses the same metric twice


def _owner_key(body: Mapping[str, Any]) -> Key:
    meta = body.get("metadata") or {}
    # "" where absent, as no Evaluation is named: the key then finds none
    return (meta.get("namespace") or "",
            (meta.get("labels") or {}).get(LABEL_EVALUATION) or "")


@kopf.on.startup()
async def _startup(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
    global CONTROLLER, _METRICS, RESYNC_SECONDS
    settings.posting.level = logging.INFO
    # Events are Proctor's own: `kubectl get events` shows them from proctor, not kopf.
    settings.posting.reporting_component = "proctor"
    settings.posting.reporting_instance = os.environ.get("HOSTNAME") or "proctor"
    settings.posting.event_name_prefix = "proctor-"
    logging.getLogger("kopf.objects").addFilter(_not_per_event)
    # Nor a line per liveness probe (kopf's probe activity, aiohttp's access log).
    logging.getLogger("kopf.activities.probe").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    settings.watching.server_timeout = 300
    # Watch only what the operator made (and Warning events), not every pod of the cluster.
    for resource, labels in ((("batch", "jobs"), PROCTOR), (("v1", "pods"), PROCTOR),
                             (("v1", "configmaps"), RESULTS)):
        settings.watching.label_selectors[resource] = manifests.selector(labels)
    settings.watching.field_selectors["v1", "events"] = "type=Warning"
    load_config()
    _METRICS = _METRICS or Metrics()
    defaults = manifests.JobDefaults.from_env(os.environ)
    RESYNC_SECONDS, pull_timeout_s = env_settings(os.environ)
    CONTROLLER = Controller(
        Kube(), _METRICS, Settings(image_pull_timeout_s=pull_timeout_s,
                                   keep_finished_jobs=defaults.ttl_seconds_after_finished
                                   is not None),
        {name: kwargs[name] for name in ("evaluations", "agents", "jobs", "pods", "results",
                                         "warnings")},  # kopf's live indexes (below)
        runner_image=os.environ.get("PROCTOR_RUNNER_IMAGE") or None,
        allow_local=os.environ.get("PROCTOR_ALLOW_LOCAL_ENDPOINTS", "") in ("1", "true"),
        job_defaults=defaults, boundary=netpol.Boundary.from_env(os.environ))


EVENT_HANDLERS = ("_evaluation_event", "_agent_event", "_child_event")
"""The handlers that only queue a pass: kopf's line for each of their calls ("Handler ...
succeeded.", one per watch event) says nothing; the decisions have lines of their own."""


def _not_per_event(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return not (record.levelno == logging.INFO and message.endswith("succeeded.")
                and any(f"Handler '{name}" in message for name in EVENT_HANDLERS))


@kopf.on.cleanup()
async def _cleanup(**_: Any) -> None:
    if CONTROLLER is not None:
        CONTROLLER.stop()


# kopf keeps these current from watches, so a pass lists nothing.
@kopf.index("proctor.dev", "v1alpha1", "evaluations")
def evaluations(namespace: str | None, name: str, body: Mapping[str, Any], **_: Any
                ) -> dict[Any, Any]:
    return {(namespace, label_value(name)): dict(body)}


@kopf.index("proctor.dev", "v1alpha1", "agentundertests")
def agents(namespace: str | None, name: str, body: Mapping[str, Any], **_: Any) -> dict[Any, Any]:
    return {(namespace, name): dict(body)}


@kopf.index("batch", "v1", "jobs", labels=PROCTOR, id="jobs")
@kopf.index("", "v1", "pods", labels=PROCTOR, id="pods")
def children(body: Mapping[str, Any], **_: Any) -> dict[Any, Any]:
    return {_owner_key(body): dict(body)}


@kopf.index("", "v1", "configmaps", labels=RESULTS)
def results(body: Mapping[str, Any], **_: Any) -> dict[Any, Any]:
    """Of a kept result, only the RunResult and its owner's uid: its logs stay on the
    server."""
    result = store.read_result(body)
    return {_owner_key(body): (owner_uid(body), result)} if result is not None else {}


@kopf.index("", "v1", "events", field="type", value="Warning")
def warnings(namespace: str | None, body: Mapping[str, Any], **_: Any) -> dict[Any, Any]:
    about = body.get("involvedObject") or {}
    return {(namespace, about.get("name")): dict(body)} if about.get("kind") in (
        "Job", "Pod") else {}


@kopf.on.event("proctor.dev", "v1alpha1", "evaluations")
async def _evaluation_event(event: Mapping[str, Any], body: Mapping[str, Any],
                            **_: Any) -> None:
    assert CONTROLLER is not None
    CONTROLLER.start()
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    key = (meta.get("namespace") or "", label_value(meta.get("name", "")))
    if event.get("type") == "DELETED" or meta.get("deletionTimestamp"):
        await CONTROLLER.forget(key)
    elif meta.get("generation") != status.get("observedGeneration") or event.get("type") in (
            None, "ADDED"):  # first sight or a spec change: not its own status writes
        CONTROLLER.queue.add(key)


@kopf.on.event("proctor.dev", "v1alpha1", "agentundertests")
async def _agent_event(event: Mapping[str, Any], namespace: str | None, name: str,
                       body: Mapping[str, Any], **_: Any) -> None:
    """Its own status (a new spec: its Deployment applied and its card fetched first), and
    a pass of the namespace's Evaluations (one may use it)."""
    assert CONTROLLER is not None
    CONTROLLER.start()
    if namespace is None:  # never: AgentUnderTests are namespaced (kopf's type allows None)
        return
    generation = (body.get("metadata") or {}).get("generation")
    if event.get("type") == "DELETED":
        CONTROLLER.forget_agent(namespace, name)  # its Deployment and Service: the GC's
    elif CONTROLLER.needs_probe(namespace, name, generation):
        await CONTROLLER.probe_agent(namespace, name)
    else:
        await CONTROLLER.write_agent_status(namespace, name)
    for key in list(CONTROLLER.indexes["evaluations"]):
        if key[0] == namespace:
            CONTROLLER.queue.add(key)


@kopf.on.event("batch", "v1", "jobs", labels=PROCTOR)
@kopf.on.event("", "v1", "pods", labels=PROCTOR)
async def _child_event(body: Mapping[str, Any], **_: Any) -> None:
    if CONTROLLER is not None:
        CONTROLLER.queue.add(_owner_key(body))


@kopf.on.probe(id="evaluations")
def _probe(**_: Any) -> int:
    return len(CONTROLLER.tracked) if CONTROLLER else 0


def check_settings(environ: Mapping[str, str]) -> None:
    """Refuse a bad setting of the operator's environment in one line naming it (exit 2),
    before kopf starts: in its startup handler it would be a traceback."""
    try:
        manifests.JobDefaults.from_env(environ)
        netpol.Boundary.from_env(environ)
        env_settings(environ)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def run(namespaces: list[str], *, verbose: bool, probe_port: int,
        allow_local_endpoints: bool = False, election: Election | None = None) -> None:
    """`proctor operator`: run the handlers above until stopped; with `election`, only
    while this process holds its Lease (`proctor.k8s.election`)."""
    if allow_local_endpoints:
        os.environ["PROCTOR_ALLOW_LOCAL_ENDPOINTS"] = "1"
    check_settings(os.environ)
    kopf.configure(verbose=verbose)
    options: dict[str, Any] = dict(
        standalone=True, clusterwide=not namespaces, namespaces=namespaces,
        liveness_endpoint=f"http://0.0.0.0:{probe_port}/healthz")
    if election is None:
        return kopf.run(**options)
    load_config()
    leases = Leases(election.namespace, election.lease)
    with contextlib.suppress(asyncio.CancelledError):  # as kopf.run: stopped by a signal
        asyncio.run(run_elected(leases, election.identity, election.timing, probe_port,
                                lambda: kopf.operator(**options)))
