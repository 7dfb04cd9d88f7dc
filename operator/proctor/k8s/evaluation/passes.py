"""The Evaluations' passes: one level-based reconcile per Evaluation (`Controller`).

A pass (`Controller.reconcile`), in a dozen lines:

    body = the Evaluation from kopf's index        gone or being deleted: forget it, stop
    evaluation, agent, dataset = parse, check      refused: Ready=False, reason, stop
                                                   (finished: its agent is not looked up)
    items = plan_items(evaluation, dataset,        once per spec generation, with the
                       prompt_variants(...))       variants of `inputs`
    pre-pull (spec.images.prePull)                 a Job per task image, N at a time; no
                                                   item starts until each ended (ImagesPulled)
    jobs, pods, results, events = the indexes      + what this process wrote (expectations)
    views = observe(the items in play)             each item's attempts and `item_state`
    decision = decide(evaluation, views, now,      pure: harvest, retry, give up, stop, start
                      agent slots left)            (the agent's slots held: recorded at once)
    act: keep results, delete Jobs, create Jobs    concurrently, awaited before the pass ends
    status = build_status(every item's view)      at most every STATUS_SECONDS
    write it; metrics; the agent's tasksInFlight   Events: Degraded, Succeeded, items in error

The agents' probes are `agents.probes`; their slots, `agents.slots`; what the indexes hold,
`indexes`; the kopf handlers that queue passes, `controller`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from proctor import datasets
from proctor.core.exits import BadInput
from proctor.core.metrics import aggregate
from proctor.core.model import WorkItem
from proctor.core.spec import AgentUnderTest, Evaluation
from proctor.formats.manifest import ManifestError
from proctor.k8s.agents import slots
from proctor.k8s.agents.probes import Agents
from proctor.k8s.agents.status import agent_refusal
from proctor.k8s.children import manifests, store
from proctor.k8s.children.podstatus import ItemState, PodsByJob, item_state
from proctor.k8s.evaluation import reconcile
from proctor.k8s.evaluation.act import (
    Pass,
    Tracked,
    create_pull_job,
    restore_answers,
    still_there,
    write_status,
)
from proctor.k8s.evaluation.inputs import Inputs
from proctor.k8s.evaluation.metrics import Metrics
from proctor.k8s.evaluation.reconcile import Decision, ItemView, Settings
from proctor.k8s.features import kueue, llm_variants, netpol, prepull, store_backlog
from proctor.k8s.features.store_backlog import Kept
from proctor.k8s.machinery.api import AdmissionChecks, Kube, describe, owner_uid
from proctor.k8s.machinery.conditions import now_text, set_condition
from proctor.k8s.machinery.indexes import Indexes, Key
from proctor.k8s.machinery.objects import Job, MutableObj
from proctor.k8s.machinery.workqueue import WorkQueue
from proctor.prepare import Refusal, agent_label, check_runnable

log = logging.getLogger("proctor.controller")
RESYNC_SECONDS = 10.0  # PROCTOR_RECONCILE_SECONDS's default (`controller.env_settings`)
STATUS_SECONDS = 1.0  # the least time between two status writes of one Evaluation
RETRY_SECONDS = 1.0  # a pass that failed (a write refused, say) is made again this later
WORKLOAD_SECONDS = 2.0  # a queued Job's Workload read again (`Decision.watch_workloads`)


def store_state(evaluation: Evaluation, tracked: Tracked, environ: Mapping[str, str],
                kept: Iterable[Kept] = ()) -> reconcile.StoreState | None:
    """The Evaluation's store as the operator last used it, and how many of the ``kept``
    results are in full because an upload failed (what the API says, after a restart
    too); None without one."""
    try:
        config = store.store_of(evaluation, environ)
    except BadInput as exc:  # a bad default URL: every upload fails, and says so
        return reconcile.StoreState(url="", error=str(exc))
    if config is None:
        return None
    waiting = store_backlog.backlog(k for k in kept if k.name not in tracked.uploads.moved)
    return reconcile.StoreState(url=str(config.run), error=tracked.uploads.error,
                                tried=tracked.uploads.tried, backlog=len(waiting))


def predecessors_left(jobs: list[Job], results: list[Kept], uid: str) -> int:
    """How many Jobs and kept results (with their owner's uid) an earlier Evaluation of the
    same name owns still: deleted, it leaves them to the garbage collector, in its own
    time. Its items have the same names as this one's, so its results would count as this
    one's and its Jobs would take their names: nothing is done until they are gone."""
    owners = [owner_uid(job) for job in jobs] + [kept.owner for kept in results]
    return sum(owner is not None and owner != uid for owner in owners)


class Controller:
    def __init__(self, kube: Kube, metrics: Metrics, settings: Settings,
                 indexes: Mapping[str, Any], runner_image: str | None, allow_local: bool,
                 job_defaults: manifests.JobDefaults = manifests.NO_JOB_DEFAULTS,
                 boundary: netpol.Boundary = netpol.NO_BOUNDARY,
                 resync_s: float = RESYNC_SECONDS, slots_check: AdmissionChecks | None = None):
        """``slots_check``: run the agent-slots AdmissionCheck (`kueue`) through it."""
        self.kube, self.metrics, self.settings = kube, metrics, settings
        self.slots_check, self.slots_check_active = slots_check, False
        self.indexes = Indexes(indexes)
        self.runner_image, self.allow_local = runner_image, allow_local
        self.job_defaults, self.boundary, self.resync_s = job_defaults, boundary, resync_s
        self.queue: WorkQueue[Key] = WorkQueue(self.reconcile)
        self.tracked: dict[Key, Tracked] = {}
        self.inputs = Inputs(kube, self.indexes, runner_image)
        self.agents = Agents(kube, self.indexes, lambda: self._holdings().values(), self.queue,
                             allow_local)
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start the resync and the agents' probes (from a handler: kopf.warn needs kopf's
        context, which the tasks started here and by the queue inherit)."""
        if not self._tasks:
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self._resync_forever()),
                           loop.create_task(self.agents.probe_forever(self.resync_s))]

    async def _resync_forever(self) -> None:
        while True:
            if self.slots_check is not None and not self.slots_check_active:
                self.slots_check_active = await self._mark_check_active(self.slots_check)
            await asyncio.sleep(self.resync_s)
            evaluations = self.indexes.keys("evaluations")
            for key in evaluations:
                self.queue.add(key)
            for key in set(self.tracked) - set(evaluations):
                await self.forget(key)

    async def _mark_check_active(self, checks: AdmissionChecks) -> bool:
        """Say the agent-slots AdmissionCheck's controller runs (Kueue admits nothing through
        a ClusterQueue that lists an inactive check); until it is there (the chart makes it
        after the operator's Deployment, or Kueue comes later), again on each resync."""
        try:
            if await asyncio.to_thread(checks.apply_status, kueue.active(now_text())):
                log.info("Marked AdmissionCheck %s Active", kueue.CHECK)
                return True
            log.warning("AdmissionCheck %s is not there yet (is Kueue installed?)",
                        kueue.CHECK)
        except Exception as exc:  # refused, say: told, and tried again on the next resync
            log.error("Marking AdmissionCheck %s Active failed: %s", kueue.CHECK,
                      describe(exc))
        return False

    def stop(self) -> None:
        self.queue.stop()
        for task in self._tasks:
            task.cancel()

    def _holdings(self) -> dict[Key, slots.Holding]:
        """The agent's task slots each Evaluation holds."""
        return {key: tracked.slots for key, tracked in self.tracked.items()}

    async def forget(self, key: Key) -> None:
        """The Evaluation is gone or being deleted: drop all that is kept about it."""
        tracked = self.tracked.pop(key, None)
        if tracked is not None:
            self.metrics.forget(key[0], tracked.name, tracked.agent_label)
            if tracked.shown[0] is not None:
                await self.agents.write_status(*tracked.shown[0])

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
        body = self.indexes.one("evaluations", key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return await self.forget(key)  # its Jobs are left to the garbage collector
        meta = body["metadata"]
        tracked = self.tracked.get(key)
        if tracked is None or tracked.uid != meta.get("uid"):
            tracked = self.tracked[key] = Tracked(meta.get("uid", ""), meta["name"])
        left = predecessors_left(self.indexes.jobs(key),
                                 self.indexes.all("results", key), tracked.uid)
        if left:
            log.info("Waiting for %d objects of an earlier Evaluation %s/%s to be deleted",
                     left, key[0], tracked.name)
            return self.queue.add_after(key, RETRY_SECONDS)
        selection, variants, refusal, finished = None, None, None, False
        try:
            evaluation = self.indexes.parse(body, Evaluation)
            tracked.agent_label = agent_label(evaluation)
            check_runnable(evaluation, on_cluster=True)
            selection = await self.inputs.dataset(evaluation)
            variants = await self.inputs.variants(key, tracked, body, evaluation, selection)
            if variants is None:  # its llm variants are not written yet
                return
            # A finished Evaluation stays as it ended, whatever becomes of its agent.
            finished = self._finished(key, tracked, tracked.items(body, evaluation, selection,
                                                                  variants))
            agent = None if finished else self._agent(evaluation)
            policy = netpol.policy_while_open(evaluation, agent, self.boundary, finished)
        except (ManifestError, Refusal) as exc:
            refusal = exc if isinstance(exc, Refusal) else Refusal("InvalidSpec", str(exc))
            generation = meta.get("generation")
            invalid = reconcile.invalid_conditions((body.get("status") or {}).get(
                "conditions") or [], refusal.reason, refusal.message, now_text(), generation)
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
        if manifests.queue_name(evaluation, self.job_defaults):
            await restore_answers(self.kube, evaluation, tracked, self.indexes.jobs(key))
            # Read each pass while items are in play (no watch: Kueue may be installed
            # after the operator starts); a finished Evaluation has none to admit.
            tracked.queued.checks = {} if finished else kueue.checks_by_job(
                await asyncio.to_thread(self.kube.list_workloads, key[0]))
        rows = evaluation.spec.max_concurrent_rows if refusal is None else 0
        views = self._observe(key, tracked, items, rows)
        waiting = self.agents.waiting(agent)
        decision = self._decide(evaluation, views, tracked, agent, waiting)
        if decision.awaiting_card and agent is not None and self.agents.card_stale(
                agent, [reconcile.ended_at(v) for v in decision.awaiting_card]):
            # The agent went away, or not: its card says (a probe gives a pass on a change).
            await self.agents.probe_agent(agent.namespace, agent.name)
            waiting = self.agents.waiting(agent)
            decision = self._decide(evaluation, views, tracked, agent, waiting)
        if refusal is not None:
            decision.start, decision.retry, decision.ask_again = [], [], []
            decision.preempted, decision.grant = [], []
        if decision.watch_workloads:
            self.queue.add_after(key, WORKLOAD_SECONDS)
        for other in slots.hold(self._holdings(), key, agent, decision.agent_tasks):
            self.queue.add(other)  # slots given back: the agent's other Evaluations take them
        if (decision.start or decision.retry or decision.ask_again or decision.preempted) \
                and not await still_there(self.kube, key[0], tracked):
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
        await self._move_backlog(key, p)
        if refusal is None:
            await self._publish(key, p, selection, items, decision, waiting)

    async def _pre_pull(self, key: Key, tracked: Tracked, body: MutableObj, evaluation: Evaluation,
                        selection: datasets.Selection, items: list[WorkItem]) -> bool:
        """Whether items may start: the pre-pull of the Evaluation's images (`prepull`) has
        ended. Until then its next pull Jobs are made, and the status says how far it got."""
        jobs = [j for j in self.indexes.jobs(key)
                if prepull.is_pull_job(j) and owner_uid(j) == tracked.uid]
        started = any(reconcile.item_of(j) for j in tracked.expected.with_jobs(
            self.indexes.jobs(key))) or bool(self.indexes.kept(key))
        if started:
            # The pre-pull is over: its Jobs go, with their pods, whose exited containers
            # would keep every image in use (the kubelet's image GC spares those) for as
            # long as the Evaluation lives. status.images and ImagesPulled keep what they
            # said last (a merge patch; after a restart, `_publish` writes neither).
            await asyncio.gather(*(asyncio.to_thread(self.kube.delete_job, key[0],
                                                     j["metadata"]["name"]) for j in jobs))
            return True
        pods, now = PodsByJob(self.indexes.pods(key)), datetime.now(UTC)

        def pull_of(job: Job) -> prepull.Pull:
            own = pods.of(job)
            names = [job["metadata"]["name"], *(pod["metadata"]["name"] for pod in own)]
            return prepull.pull_of(job, own, [e for name in names for e in
                                              self.indexes.warnings(key[0], name)],
                                   now, self.settings.image_pull_timeout_s)
        images = prepull.images_of(evaluation, items, selection.by_id)
        state = tracked.pulls = prepull.pull_state(
            images, {prepull.image_of(j): pull_of(j) for j in jobs},
            evaluation.spec.images.pre_pull_parallelism, suspended=evaluation.spec.suspend)
        if state.create and await still_there(self.kube, key[0], tracked):
            await asyncio.gather(*(create_pull_job(self.kube, body, prepull.pull_job(
                evaluation, image, self.job_defaults)) for image in state.create))
        if not state.ready:
            generation = body["metadata"].get("generation")
            waiting = set_condition(
                (body.get("status") or {}).get("conditions") or [], prepull.CONDITION,
                *state.condition, now=now_text(), observed_generation=generation)
            await write_status(self.kube, tracked, body, {
                "reason": "PullingImages", "conditions": waiting, "images": state.status(),
                "observedGeneration": generation})
        return state.ready

    async def _move_backlog(self, key: Key, p: Pass) -> None:
        """Move results kept in full while the store was down to it (`store_backlog`); another
        pass soon while some are left and the store answers."""
        kept = self.indexes.all("results", key)
        if not store_backlog.backlog(kept) \
                or store_state(p.evaluation, p.tracked, os.environ) is None:
            return
        moves = store_backlog.plan_moves(kept, failed_at=p.tracked.uploads.failed_at,
                                   now=time.monotonic(), moved=p.tracked.uploads.moved)
        try:
            await p.move_backlog(moves)
        except Exception as exc:  # an API call refused: the next pass tries again
            self.metrics.reconcile_errors.inc()
            log.error("Moving the backlog failed evaluation=%s/%s: %s", key[0],
                      p.tracked.name, describe(exc))
        if moves.move and p.tracked.uploads.failed_at is None:
            self.queue.add_after(key, RETRY_SECONDS)

    def _decide(self, evaluation: Evaluation, views: list[ItemView],
                tracked: Tracked, agent: AgentUnderTest | None,
                waiting: tuple[str, str] | None) -> Decision:
        return reconcile.decide(
            evaluation, views, datetime.now(UTC), self.settings,
            slots.slots_left(self._holdings().values(), tracked.slots, agent),
            agent_ready=waiting is None,
            card_at=self.agents.card_at(agent) if agent is not None else None)

    def _finished(self, key: Key, tracked: Tracked, items: list[WorkItem]) -> bool:
        """Whether every item has a kept result."""
        kept = {r.item_id for r in tracked.expected.with_results(self.indexes.kept(key))}
        return bool(items) and all(item.id in kept for item in items)

    def _agent(self, evaluation: Evaluation) -> AgentUnderTest | None:
        if evaluation.spec.predictions.source != "agent":
            return None
        ref = evaluation.spec.agent_ref.name if evaluation.spec.agent_ref else ""
        body = self.indexes.one("agents", (evaluation.namespace, ref))
        if body is None:
            raise Refusal("AgentNotFound", f"AgentUnderTest {ref!r} does not exist in "
                                           f"namespace {evaluation.namespace}")
        agent = self.indexes.parse(body, AgentUnderTest)  # (the API server checked it)
        refusal = agent_refusal(agent, self.allow_local)
        if refusal is not None:
            raise Refusal(*refusal)
        return agent

    def _observe(self, key: Key, tracked: Tracked, items: list[WorkItem], rows: int | None
                 ) -> list[ItemView]:
        """The items in play (``rows`` waiting at most; None: every item) as the indexes
        and the expectations show them."""
        # Only items' Jobs: the llm variants Job (no item label) is no item's attempt.
        jobs = [job for job in tracked.expected.with_jobs(self.indexes.jobs(key))
                if reconcile.item_of(job)]
        kept = {r.item_id: r for r in tracked.expected.with_results(self.indexes.kept(key))}
        pods = PodsByJob(self.indexes.pods(key))

        def state_of(job: Job) -> ItemState:
            own = pods.of(job)
            names = [job["metadata"]["name"], *(pod["metadata"]["name"] for pod in own)]
            return item_state(job, own, [e for name in names
                                         for e in self.indexes.warnings(key[0], name)])
        chosen = items if rows is None else reconcile.in_play(items, jobs, kept.keys(), rows)
        views = reconcile.observe(chosen, jobs, kept, state_of, tracked.queued.answers,
                                  tracked.queued.task_ids, tracked.queued.checks)
        # Remember the queued Jobs seen asking the agent: once Kueue preempts one, its pod
        # (what showed it) is deleted. Forgotten with their Jobs.
        for view in views:
            if view.asked and view.latest is not None:
                tracked.queued.answers.setdefault(view.latest["metadata"]["uid"], None)
        if rows is not None:
            uids = {job["metadata"].get("uid") for job in jobs}
            for uid in set(tracked.queued.answers) - uids:
                del tracked.queued.answers[uid]
            for uid in set(tracked.queued.task_ids) - uids:
                del tracked.queued.task_ids[uid]
        return views

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
        now = now_text()
        conditions_now = reconcile.conditions_for(
            old, views, decision, now, generation, p.evaluation.spec.suspend,
            agent_waiting=waiting, store=store_state(p.evaluation, p.tracked, os.environ,
                                                     self.indexes.all("results", key)))
        made = p.tracked.llm_variants
        if made is not None:
            conditions_now = set_condition(
                conditions_now, llm_variants.CONDITION, made.ready, made.reason, made.message,
                now=now, observed_generation=generation)
        # None after a restart once items started: the status keeps what it said last.
        pulls = p.tracked.pulls if p.evaluation.spec.images.pre_pull else None
        if pulls is not None:
            conditions_now = set_condition(
                conditions_now, prepull.CONDITION, *pulls.condition, now=now,
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
        shown = (p.tracked.slots.agent, p.tracked.slots.tasks)
        if shown != p.tracked.shown:
            before, p.tracked.shown = p.tracked.shown[0], shown
            for changed in {c for c in (before, shown[0]) if c is not None}:
                await self.agents.write_status(*changed)
