"""What a pass does to the world: each item's API calls, and the status write (the shell).

`decide` chose the items; `Pass.act` sets each one's calls going at once and waits for
all of them: a succeeded attempt's result is read from its grade log and kept (then its
Jobs are deleted), a failure is kept as an error result, an infrastructure failure is
retried with the patch its pod got (the agent is never asked twice), new items get their
Jobs. `Pass.create_job` is the one place a Job is created.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import kopf

from proctor import __version__
from proctor.core.labels import COMPONENT
from proctor.core.model import Instance, Outcome, RunResult, WorkItem
from proctor.core.plan import Variant
from proctor.core.spec import AgentUnderTest, Evaluation
from proctor.datasets import Selection
from proctor.k8s.agents.slots import Holding
from proctor.k8s.children import manifests, store
from proctor.k8s.evaluation import figures, reconcile
from proctor.k8s.evaluation.figures import Reliability
from proctor.k8s.evaluation.metrics import Metrics
from proctor.k8s.evaluation.reconcile import Decision, ItemView
from proctor.k8s.features import kueue, store_backlog
from proctor.k8s.features.kueue import Queued
from proctor.k8s.features.llm_variants import VariantsState
from proctor.k8s.features.prepull import ANNOTATION_IMAGE, PullState
from proctor.k8s.features.store_backlog import Uploads
from proctor.k8s.machinery.api import Kube
from proctor.k8s.machinery.conditions import now_text
from proctor.k8s.machinery.expectations import Expectations
from proctor.k8s.machinery.objects import ConfigMap, Job, MutableObj
from proctor.prepare import plan_items
from proctor.runner.artifacts import parse_grade_log
from proctor.runner.solve import patch_from_log, task_id_from_log
from proctor.store.location import StoreError, item_location
from proctor.store.record import item_record
from proctor.store.s3 import StoreUnreachable, upload_checked, upload_item

log = logging.getLogger("proctor.controller")


def _body(obj: MutableObj) -> kopf.Body:
    """The object as kopf's `adopt`, `warn` and `info` type it: they read a plain dict (an
    owner's metadata, an Event's involved object) as well as a `kopf.Body`."""
    return cast(kopf.Body, obj)


@dataclass
class Tracked:
    """What this process keeps about one Evaluation (dropped with `Controller.forget`)."""

    uid: str
    name: str
    agent_label: str = ""
    expected: Expectations = field(default_factory=Expectations)
    plan: tuple[Any, list[WorkItem]] = (None, [])  # (generation, dataset fingerprint), items
    tasks: dict[str, MutableObj] = field(default_factory=dict)  # task ConfigMaps made, by task
    # Each task's variant texts by variant id (made with the plan; in its task ConfigMap)
    variants: dict[str, dict[str, str]] = field(default_factory=dict)
    variants_failed: int | None = None  # tasks whose variants could not be made (None: off)
    llm_variants: VariantsState | None = None  # where its llm variants Job stands (else None)
    pulls: PullState | None = None  # where its pre-pull stands (spec.images.prePull; else None)
    status_at: float = float("-inf")
    written: MutableObj | None = None
    policy: MutableObj | None = None  # the NetworkPolicy last applied (`Pass.apply_policy`)
    slots: Holding = field(default_factory=Holding)  # the agent's task slots it holds
    # (agent, tasks) of its slots as that agent's status last counted them (tasksInFlight)
    shown: tuple[tuple[str, str] | None, int] = (None, 0)
    # (the results' item ids and outcomes, their reliability figures): see `reliability`
    figures_of: tuple[frozenset[Any], Reliability | None] = (frozenset(), None)
    uploads: Uploads = field(default_factory=Uploads)  # to the object store (`store_backlog`)
    queued: Queued = field(default_factory=Queued)  # its Jobs in Kueue's queue (`kueue`)

    def reliability(self, results: list[RunResult]) -> Reliability | None:
        """The figures of these results, computed again only when they changed (a kept
        result never changes: its id and outcome say whether it is new). The bootstrap
        takes 10 to 25 ms for 500 tasks x 3 repeats, and the status is rebuilt every
        second: most passes would compute the same figures again."""
        key = frozenset((r.item_id, r.outcome) for r in results)
        if key != self.figures_of[0]:
            self.figures_of = (key, figures.reliability(self.agent_label, results))
        return self.figures_of[1]

    def items(self, body: MutableObj, evaluation: Evaluation, selection: Selection,
              made: dict[str, list[Variant]]) -> list[WorkItem]:
        """The plan (`plan_items`) with the variants ``made`` (`prompt_variants`: the same
        as `proctor run` makes, hence the same item ids), made once per spec generation and
        dataset."""
        version = (body["metadata"].get("generation"), selection.fingerprint)
        if self.plan[0] != version:
            self.variants = manifests.variant_texts(made)
            # A task with no variants runs its original only, as in the engine.
            self.variants_failed = (sum(not made.get(i.instance_id) for i in
                                        selection.instances)
                                    if evaluation.spec.prompt_sensitivity.enabled else None)
            self.plan, self.tasks = (version, plan_items(evaluation, selection, made)), {}
        return self.plan[1]


def post_event(body: MutableObj, type_: str, reason: str, message: str) -> None:
    """Post an Event about the Evaluation through kopf (from a handler's context: its
    settings and Events' queue), as Proctor (`controller._startup`)."""
    post = kopf.warn if type_ == "Warning" else kopf.info
    post(_body(body), reason=reason, message=message)


@dataclass
class Pass:
    """One pass over one Evaluation: what it read, and the calls that carry out its
    decision."""

    kube: Kube
    metrics: Metrics
    runner_image: str | None
    body: MutableObj
    tracked: Tracked
    evaluation: Evaluation
    agent: AgentUnderTest | None
    instances: Mapping[str, Instance]
    nodes: Mapping[str, str] = field(default_factory=dict)  # where each task ran before
    defaults: manifests.JobDefaults = manifests.NO_JOB_DEFAULTS  # the operator's, for each Job
    policy: MutableObj | None = None  # the Evaluation's NetworkPolicy (`netpol`), if one
    post: Callable[[MutableObj, str, str, str], None] = post_event
    """Where its Events go: (the Evaluation, Warning or Normal, reason, message)."""

    async def act(self, decision: Decision) -> list[BaseException]:
        """Carry out the decision, each item's calls beside the others'; what failed."""
        if decision.start or decision.retry or decision.ask_again or decision.preempted:
            try:  # before any pod it governs can start; failed, the pass is made again
                await self.apply_policy()
            except Exception as exc:
                return [exc]
        stops: dict[str, list[Job]] = {}
        for job in decision.stop:
            stops.setdefault(reconcile.item_of(job), []).append(job)
        deleting = {v.item.id for v in (*decision.harvest, *decision.retry,
                                          *decision.ask_again, *decision.preempted)} | {
            v.item.id for v, _ in decision.give_up}  # these delete their own Jobs
        work = [self._harvest(view) for view in decision.harvest]
        work += [self._keep(view, result) for view, result in decision.give_up]
        work += [self._retry(view, stops.get(view.item.id, [])) for view in decision.retry]
        work += [self._delete(job) for item_id, jobs in stops.items()
                 if item_id not in deleting for job in jobs]
        work += [self._ask_again(view) for view in decision.ask_again]
        work += [self._preempted(view) for view in decision.preempted]
        work += [self._keep_patch(view) for view in decision.keep_patch]
        work += [self._grant(view) for view in decision.grant]
        work += [self._read_task(view) for view in decision.read_task]
        work += [self.create_job(item) for item in decision.start]
        done = await asyncio.gather(*work, return_exceptions=True)
        return [failure for failure in done if isinstance(failure, BaseException)]

    async def apply_policy(self) -> None:
        """Create or update the Evaluation's NetworkPolicy (server-side apply, owned by the
        Evaluation) when it differs from the one this process last applied."""
        if self.policy is None or self.tracked.policy == self.policy:
            return
        policy = copy.deepcopy(self.policy)
        kopf.adopt(policy, owner=_body(self.body))
        await asyncio.to_thread(self.kube.apply, policy)
        self.tracked.policy = self.policy
        log.info("Applied NetworkPolicy %s evaluation=%s", policy["metadata"]["name"],
                 self.evaluation.name)

    async def create_job(self, item: WorkItem, kept_patch: MutableObj | None = None,
                         attempt: int = 0, resume_task: str | None = None) -> None:
        """The one place a Job is created (in a slot `decide` gave), its task ConfigMap
        first (the pass checked that its Evaluation is still there)."""
        instance = self.instances[item.instance_id]
        task = self.tracked.tasks.get(instance.instance_id)
        if task is None:
            task = manifests.task_configmap(self.evaluation, instance,
                                            self.tracked.variants.get(instance.instance_id, {}))
            kopf.adopt(task, owner=_body(self.body))
            await asyncio.to_thread(self.kube.create, task)
            self.tracked.tasks[instance.instance_id] = task
        job = manifests.desired_job(
            self.evaluation, self.agent, item, instance, task, runner_version=__version__,
            runner_image_default=self.runner_image, kept_patch=kept_patch, attempt=attempt,
            preferred_node=self.nodes.get(instance.instance_id), defaults=self.defaults,
            resume_task=resume_task)
        kopf.adopt(job, owner=_body(self.body))
        if await asyncio.to_thread(self.kube.create, job):
            log.info("Created Job %s item=%s", job["metadata"]["name"], item.key)
        self.tracked.expected.created(job)

    async def _delete(self, job: Job) -> None:
        if not self.tracked.expected.was_deleted(job):
            await asyncio.to_thread(self.kube.delete_job, self.evaluation.namespace,
                                    job["metadata"]["name"])
            self.tracked.expected.delete(job)

    async def _keep(self, view: ItemView, result: RunResult,
                    artifacts: Mapping[str, str] | None = None) -> None:
        """Keep the item's result (with a store: its files there, its record in etcd; the
        store failing: all in etcd, `store.keep_mode`), then delete its Jobs (their pods
        and logs go with them), unless finished Jobs are left to their
        ttlSecondsAfterFinished."""
        result = result.model_copy(update={"repo": self.instances[view.item.instance_id].repo})
        configmap, failed = await self._stored(result, artifacts)
        where = "store"
        if configmap is None:
            configmap = store.result_configmap(self.evaluation, result, artifacts,
                                               upload_failed=failed)
            where = "configmap"
        kopf.adopt(configmap, owner=_body(self.body))
        await asyncio.to_thread(self.kube.create, configmap)
        self.tracked.expected.kept(result)
        log.info("Kept result evaluation=%s item=%s outcome=%s in=%s", self.evaluation.name,
                 view.item.key, result.outcome.value, where)
        if result.outcome == Outcome.ERROR:
            kind = result.error_kind.value if result.error_kind else "error"
            self.post(self.body, "Warning", "ItemFailed",
                      f"{view.item.key}: {kind}: {result.error_message}"[:1000])
        if self.defaults.ttl_seconds_after_finished is None:
            for job in view.jobs:
                await self._delete(job)

    async def _stored(self, result: RunResult, artifacts: Mapping[str, str] | None
                      ) -> tuple[MutableObj | None, bool]:
        """The record ConfigMap of `result` once its files are uploaded to the
        Evaluation's store (None without a store, or when the upload failed), and whether
        it failed (then `Tracked.uploads` says why, for StoreUnavailable)."""
        files: dict[str, bytes] = {}
        error, config = None, None
        try:
            config = store.store_of(self.evaluation, os.environ)
            if config is not None:
                files = store.item_files(result, artifacts)
                where = item_location(config.run, result.instance_id, result.variant_id,
                                      result.repeat)
                await asyncio.to_thread(upload_item, config.endpoint, files, where)
        except (StoreError, StoreUnreachable) as exc:
            error = str(exc)
            log.error("Uploading failed evaluation=%s item=%s: %s (kept in a ConfigMap)",
                      self.evaluation.name, result.item_id, error)
        if error is not None or config is not None:
            self.tracked.uploads.uploaded(error)
        if store.keep_mode(config, error) != "record" or config is None:
            return None, error is not None
        return store.record_configmap(self.evaluation, result,
                                      item_record(result, config.run, files)), False

    async def move_backlog(self, moves: store_backlog.Moves) -> None:
        """Move results kept in full to the store (`store_backlog`): each one's files uploaded
        and read back, its record ConfigMap created, and only then the full one deleted.
        A store that fails stops the moves (the rest wait for the next try)."""
        namespace = self.evaluation.namespace
        for name in moves.drop:
            await asyncio.to_thread(self.kube.delete_configmap, namespace, name)
            log.info("Deleted ConfigMap %s evaluation=%s (its record was made before)", name,
                     self.evaluation.name)
        for name in moves.move:
            full = await asyncio.to_thread(self.kube.read_configmap, namespace, name)
            result = store.read_result(full) if full is not None else None
            if full is None or result is None:
                continue  # gone meanwhile, or unreadable: nothing to move
            try:
                record = await asyncio.to_thread(moved_record, self.evaluation, full,
                                                 result, os.environ)
            except (StoreError, StoreUnreachable) as exc:
                self.tracked.uploads.uploaded(str(exc))
                return log.error("Moving to the store failed evaluation=%s item=%s: %s",
                                 self.evaluation.name, result.item_id, exc)
            self.tracked.uploads.uploaded(None)
            kopf.adopt(record, owner=_body(self.body))
            await asyncio.to_thread(self.kube.create, record)
            await asyncio.to_thread(self.kube.delete_configmap, namespace, name)
            self.tracked.uploads.moved.add(name)
            log.info("Moved result to the store evaluation=%s item=%s configmap=%s",
                     self.evaluation.name, result.item_id, record["metadata"]["name"])

    async def _harvest(self, view: ItemView) -> None:
        """Read a succeeded attempt's full result from its grade log, and keep it."""
        assert view.state is not None and view.state.pod
        text = await asyncio.to_thread(self.kube.pod_log, self.evaluation.namespace,
                                       view.state.pod, "grade")
        full, artifacts = parse_grade_log(text)
        result = reconcile.harvested_result(self.evaluation, view, full)
        await self._keep(view, result, artifacts)
        if result.timings.total_seconds is not None:
            self.metrics.job_seconds.labels(self.evaluation.namespace, self.tracked.agent_label
                                            ).observe(result.timings.total_seconds)

    async def _kept_patch(self, view: ItemView) -> MutableObj | None:
        """The patch the agent gave the latest attempt: the one kept already, else read from
        its solve step's log now and kept in a ConfigMap (creating it again is a no-op);
        None when the agent was not asked, or its answer is not in the log (nor kept)."""
        state, spec = view.state, self.evaluation.spec
        assert state is not None
        if view.kept_patch:
            return dict(view.kept_patch)
        # A given patch (gold, file) is in the task: only an agent's answer is kept.
        asked = spec.predictions.source == "agent" and any(
            s.name == "solve" and s.started_at for s in state.steps)
        text = await asyncio.to_thread(self.kube.pod_log, self.evaluation.namespace, state.pod,
                                       "solve") if state.pod and asked else ""
        patch = patch_from_log(text) if text else None
        uid = (view.latest or {}).get("metadata", {}).get("uid", "")  # "": no answer kept
        if patch is None:
            if uid in self.tracked.queued.answers and state.pod:
                self.tracked.queued.answers[uid] = {}  # read: no patch in it (not read again)
            return None
        kept = manifests.patch_configmap(self.evaluation, view.item, patch)
        kopf.adopt(kept, owner=_body(self.body))
        await asyncio.to_thread(self.kube.create, kept)
        if uid in self.tracked.queued.answers:
            self.tracked.queued.answers[uid] = kept
        return kept

    async def _keep_patch(self, view: ItemView) -> None:
        """Keep the agent's patch as soon as the solve step of a queued Job ends: Kueue may
        preempt the Job, and the Job controller then deletes its pod, and the log with it."""
        if await self._kept_patch(view) is not None:
            log.info("Kept the agent's patch item=%s attempt=%d", view.item.key, view.attempt)

    async def _grant(self, view: ItemView) -> None:
        """Mark the agent-slots check Ready on the queued Job's Workload: Kueue admits it."""
        assert view.slot_check is not None
        asks = view.latest is not None and manifests.job_asks_agent(view.latest)
        message = ("the agent has a task slot for it" if asks
                   else "it reuses a kept patch: it asks the agent nothing")
        await asyncio.to_thread(self.kube.apply_workload_status, kueue.check_state(
            view.slot_check.workload, self.evaluation.namespace, kueue.READY, message,
            now_text()))
        log.info("Admitted item=%s attempt=%d: %s", view.item.key, view.attempt, message)
    async def _read_task(self, view: ItemView) -> None:
        """Note the agent's task a queued Job sent, from its solve step's log, once the agent
        has named it. Not for a sidecar agent: it goes with the pod, and its tasks too."""
        uid = (view.latest or {}).get("metadata", {}).get("uid")
        if view.state is None or not view.state.pod or not uid or (
                self.agent is not None and self.agent.spec.sidecar):
            return
        text = await asyncio.to_thread(self.kube.pod_log, self.evaluation.namespace,
                                       view.state.pod, "solve")
        task_id = task_id_from_log(text or "")
        if task_id:
            self.tracked.queued.task_ids[uid] = task_id
            log.info("Noted the agent's task item=%s attempt=%d task=%s", view.item.key,
                     view.attempt, task_id)

    async def _retry(self, view: ItemView, stops: list[Job]) -> None:
        """The next attempt, with the patch the failed one got: the agent is never asked
        twice. The failed Job is deleted only once the next one exists."""
        state, spec = view.state, self.evaluation.spec
        assert state is not None
        asked = spec.predictions.source == "agent" and any(
            s.name == "solve" and s.started_at for s in state.steps)
        kept = await self._kept_patch(view)
        if kept is None and asked:
            lost = f"the agent's answer was lost with its pod ({state.reason}); not asked again"
            result = reconcile.failure_result(self.evaluation, view)
            return await self._keep(view, result.model_copy(update={"error_message": lost}))
        reuse = ", reusing the patch it got" if kept is not None else ""
        await self._next_attempt(view, kept, stops, "Retrying",
                                 f"{state.reason}; attempt {view.attempt + 2}{reuse}")
        self.metrics.retries.labels(self.evaluation.namespace, self.evaluation.name,
                                    self.tracked.agent_label).inc()

    async def _preempted(self, view: ItemView) -> None:
        """The next attempt of a Job Kueue suspended again after it asked the agent (run
        again as it is, it would ask a second time): with the patch kept from it, else it
        asks again, the first answer never having arrived."""
        kept = await self._kept_patch(view)
        resume = view.agent_task if kept is None else None
        how = ("reusing the agent's patch, kept when its solve step ended" if kept is not None
               else f"following the agent's task {resume} rather than asking again"
               if resume else "the agent's answer never arrived, so it is asked again")
        await self._next_attempt(view, kept, view.jobs, "Preempted",
                                 f"Kueue suspended its Job after it asked the agent; attempt "
                                 f"{view.attempt + 2} runs, {how}", resume)

    async def _ask_again(self, view: ItemView) -> None:
        """The next attempt of an item the agent never answered (it went away and its card
        answers again): the agent is asked again. The old Job goes once the new one exists."""
        await self._next_attempt(view, None, view.jobs, "AskingAgain",
                                 f"the agent never answered; its card answers again, attempt "
                                 f"{view.attempt + 2} asks it again")

    async def _next_attempt(self, view: ItemView, kept: MutableObj | None,
                            old: list[Job], reason: str, message: str,
                            resume_task: str | None = None) -> None:
        """Create the item's next attempt (with ``kept``: the patch an earlier one got, so
        the agent is not asked), post an Event, then delete the ``old`` Jobs: only once the
        next one exists, so that the item never looks as if it had none."""
        await self.create_job(view.item, kept, view.attempt + 1, resume_task)
        self.post(self.body, "Normal" if reason == "AskingAgain" else "Warning", reason,
                  f"{view.item.key}: {message}"[:1000])
        for job in old:
            await self._delete(job)


def moved_record(evaluation: Evaluation, full: ConfigMap, result: RunResult,
                 environ: Mapping[str, str]) -> dict[str, Any]:
    """The record ConfigMap (kind RECORD_KIND) of an item kept in full, once its files,
    as the full ConfigMap holds them, are uploaded to the Evaluation's store and read back
    unchanged (the shell of `store_backlog`: it blocks). A StoreError or StoreUnreachable when
    the store is not there or fails."""
    config = store.store_of(evaluation, environ)
    if config is None:
        raise StoreError(f"Evaluation {evaluation.name} has no object store to move to")
    files = store.item_files(result, full.get("binaryData"))
    upload_checked(config.endpoint, files, item_location(
        config.run, result.instance_id, result.variant_id, result.repeat))
    return store.record_configmap(evaluation, result, item_record(result, config.run, files),
                                  kind=store.RECORD_KIND)


async def create_variants_job(kube: Kube, body: MutableObj, job: MutableObj) -> None:
    """Create an Evaluation's llm variants Job (`llm_variants`), owned by the Evaluation;
    one that is there already (a restart, an index behind) is left as it is."""
    kopf.adopt(job, owner=_body(body))
    if await asyncio.to_thread(kube.create, job):
        log.info("Created Job %s for the llm variants evaluation=%s", job["metadata"]["name"],
                 body["metadata"]["name"])


async def restore_answers(kube: Kube, evaluation: Evaluation, tracked: Tracked,
                          jobs: list[Job]) -> None:
    """Once per Evaluation this process tracks, when its Jobs are in a Kueue queue: the
    answers kept before it started (`reconcile.restored_answers`), so that a queued Job
    that got its patch is not run again by Kueue after a preemption."""
    if tracked.queued.answers_restored:
        return
    labels = {**manifests.owner_labels(evaluation), COMPONENT: "kept-patch"}
    patches = (await asyncio.to_thread(kube.list_configmaps, evaluation.namespace,
                                       labels)).get("items") or []
    for uid, patch in reconcile.restored_answers(jobs, patches).items():
        tracked.queued.answers.setdefault(uid, dict(patch))
    tracked.queued.answers_restored = True


async def still_there(kube: Kube, namespace: str, tracked: Tracked) -> bool:
    """Whether the Evaluation is there as it was, asked of the API server: the index
    may lag behind the garbage collector deleting its Jobs, which look like free slots."""
    meta = (await asyncio.to_thread(kube.get_evaluation, namespace, tracked.name)
            or {}).get("metadata", {})
    return meta.get("uid") == tracked.uid and not meta.get("deletionTimestamp")


async def create_pull_job(kube: Kube, body: MutableObj, job: MutableObj) -> None:
    """Create a pull Job of an Evaluation (`prepull`), owned by the Evaluation; one that
    is there already (a restart, an index behind) is left as it is."""
    kopf.adopt(job, owner=_body(body))
    if await asyncio.to_thread(kube.create, job):
        log.info("Created Job %s to pull image=%s evaluation=%s", job["metadata"]["name"],
                 job["metadata"]["annotations"][ANNOTATION_IMAGE], body["metadata"]["name"])


async def write_status(kube: Kube, tracked: Tracked, body: MutableObj, status: MutableObj) -> None:
    """Write an Evaluation's status if it changed, and the Events it calls for
    (`reconcile.status_events`)."""
    seen = body.get("status") or {}
    if all(seen.get(k) == v for k, v in status.items()) or tracked.written == status:
        return
    meta = body["metadata"]
    await asyncio.to_thread(kube.patch_status, "evaluations", meta["namespace"], meta["name"],
                            status)
    old = (tracked.written or seen).get("conditions") or []
    tracked.written = status
    for event in reconcile.status_events(old, status):
        post_event(body, event["type"], event["reason"], event["message"])


