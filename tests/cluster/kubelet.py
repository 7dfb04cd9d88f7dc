"""The Job controller, the scheduler and the kubelets of a few fake nodes.

One controller thread watches the store (as the real controllers watch the apiserver):

* Job controller (1.31+): a Job gets one pod (``<job>-<5 chars>``, labels ``job-name``,
  ``controller-uid`` and their ``batch.kubernetes.io/`` forms, an ownerReference and the
  ``batch.kubernetes.io/job-tracking`` finalizer) and an event SuccessfulCreate; its status
  follows: ``startTime``, ``active``/``ready``/``terminating``/``uncountedTerminatedPods``,
  then SuccessCriteriaMet + Complete (``completionTime``, ``succeeded``) or FailureTarget +
  Failed (BackoffLimitExceeded or DeadlineExceeded, ``failed``). A pod is counted active as
  soon as it exists, whatever the local executor does with it. A Job is synced at once when
  it is created, and by default at once when its pods change; with ``job_sync_batch_seconds``
  (Kubernetes' own controller: 1 s) a change of its pods or status is taken in that long
  after, as the real controller batches them.
* Scheduler: nodeSelector and required node affinity filter, preferred affinity scores,
  ties go to the emptier node; no fitting node leaves the pod Pending (Unschedulable).
* Kubelet: admits the pod at once (Pending, IPs, every container waiting PodInitializing),
  then runs it (``podrun.PodRun``) when one of ``max_pods`` local slots is free: a pod that
  runs real processes in a worker thread of its own, a simulated one on the controllers'
  thread, as timers (its steps take no time, it only waits between them).

``faults`` (see ``cluster.faults``) injects failures; ``simulation`` replaces the steps
by sleeps and given results.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import copy
import heapq
import itertools
import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from cluster import shapes
from cluster.errors import ApiError
from cluster.faults import Fault, Faults, Simulation
from cluster.podrun import PodRun, Waits
from cluster.selectors import Requirement, labels_match, match_selector_object
from cluster.store import Store, now, random_suffix

log = logging.getLogger("cluster.kubelet")
Obj = dict[str, Any]
TRACKING = "batch.kubernetes.io/job-tracking"
FAILED_CREATE = ('Error creating: pods "{pod}" is forbidden: violates PodSecurity '
                 '"restricted:latest": runAsNonRoot != true (pod or containers "pull", "solve", '
                 '"test", "grade" must set securityContext.runAsNonRoot=true)')


@dataclass
class Node:
    name: str
    index: int
    root: Path
    labels: dict[str, str]
    images: set[str] = field(default_factory=set)
    _next: int = 1

    @property
    def ip(self) -> str:
        return f"10.0.0.{10 + self.index}"

    def pod_ip(self) -> str:
        self._next += 1
        return f"10.244.{self.index}.{self._next}"

    def manifest(self) -> Obj:
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": dict(self.labels)},
                "spec": {"podCIDR": f"10.244.{self.index}.0/24"},
                "status": {
                    "addresses": [{"type": "InternalIP", "address": self.ip},
                                  {"type": "Hostname", "address": self.name}],
                    "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110",
                                 "ephemeral-storage": "200Gi"},
                    "allocatable": {"cpu": "8", "memory": "31Gi", "pods": "110",
                                    "ephemeral-storage": "190Gi"},
                    "conditions": [{"type": "Ready", "status": "True",
                                    "reason": "KubeletReady",
                                    "message": "kubelet is posting ready status",
                                    "lastHeartbeatTime": now(),
                                    "lastTransitionTime": now()}],
                    "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux",
                                 "containerRuntimeVersion": "containerd://1.7.24",
                                 "kubeletVersion": "v1.33.0", "kubeProxyVersion": "v1.33.0",
                                 "osImage": "Emulated Linux"}}}


@dataclass
class JobRun:
    """What the Job controller keeps about one Job (by uid)."""

    ns: str
    name: str
    uid: str
    pods: list[str] = field(default_factory=list)
    started: float | None = None
    deadline_at: float | None = None
    failed_create: Fault | None = None
    retry_at: float = 0.0
    final: tuple[str, str, str] | None = None
    """(condition, reason, message) to write once ``final_at`` has passed."""
    final_at: float | None = None
    done: bool = False


class Kubelet:
    """Job controller, scheduler and kubelets, run from one thread (which also runs the
    simulated pods) plus ``max_pods`` workers for pods that run real processes.

    ``nodes``: how many fake nodes (or their names). ``max_pods``: pods run at once on this
    machine. ``pull_seconds``: time each image pull takes. ``deadline_scale``: real seconds
    per second of ``activeDeadlineSeconds``. ``entrypoints``: local argv of images whose
    containers give only ``args`` (a sidecar agent's image). ``simulation``: see
    ``faults.Simulation``. The decided condition (SuccessCriteriaMet / FailureTarget) and the
    final one (Complete / Failed) land in one update when the pod has already ended, as in
    Kubernetes; ``condition_delay`` apart while pods terminate (a deadline), or always with
    ``split_conditions`` (to test a reader of the moment between them). Simulated pods
    share the controllers' thread instead of having one each: fifty threads that take turns
    at one store lock and one GIL spent more time handing them over than running the pods.
    """

    def __init__(self, store: Store, root: Path, *, nodes: int | Iterable[str] = 3,
                 max_pods: int = 2, simulation: Simulation | None = None,
                 pull_seconds: float = 0.0, pull_backoff_seconds: float = 0.3,
                 retry_seconds: float = 0.2, condition_delay: float = 0.05,
                 split_conditions: bool = False, deadline_scale: float = 1.0,
                 entrypoints: Mapping[str, list[str]] | None = None,
                 job_sync_batch_seconds: float = 0.0) -> None:
        self.store, self.root = store, root
        names = [f"node-{i + 1}" for i in range(nodes)] if isinstance(nodes, int) else list(
            nodes)
        self.nodes = [Node(n, i, root / n, {"kubernetes.io/arch": "amd64",
                                             "kubernetes.io/hostname": n,
                                             "kubernetes.io/os": "linux"})
                      for i, n in enumerate(names)]
        self.max_pods = max_pods
        self.simulation = simulation
        self.pull_seconds, self.pull_backoff_seconds = pull_seconds, pull_backoff_seconds
        self.retry_seconds, self.condition_delay = retry_seconds, condition_delay
        self.split_conditions = split_conditions
        self.deadline_scale = deadline_scale
        self.job_sync_batch_seconds = job_sync_batch_seconds
        self.entrypoints = dict(entrypoints or {})
        self.faults = Faults()
        self.jobs_rt = store.resource("batch", "v1", "jobs")
        self.pods_rt = store.resource("", "v1", "pods")
        self.events_rt = store.resource("", "v1", "events")
        self._events: collections.deque[tuple[str, tuple[str, str], Obj, Obj | None]] = \
            collections.deque()
        self._wake = threading.Event()
        """Set when changes wait (cleared before they are taken: a change noted in between
        is taken then, or sets it again)."""
        self._lock = threading.RLock()
        self._jobs: dict[str, JobRun] = {}
        self._runs: dict[str, PodRun] = {}
        self._on_node: dict[str, set[str]] = collections.defaultdict(set)
        """Per node, the pods it runs that have not ended (by uid): the scheduler's load."""
        self._unscheduled: dict[tuple[str, str], float] = {}
        self._dirty: set[tuple[str, str]] = set()
        self._batched: dict[tuple[str, str], float] = {}
        """Jobs to sync once their batch period is over (see ``job_sync_batch_seconds``)."""
        self._recorded: dict[tuple[str, ...], tuple[str, str]] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.running_peak = 0
        """The most pods that ran containers at once here (local slots used)."""
        self._running_now = 0
        self._timers: list[tuple[float, int, PodRun]] = []
        """Simulated pods by when they next wake (a heap), each with its turn's number."""
        self._turns: dict[str, tuple[int, Waits]] = {}
        """Per simulated pod (uid) that runs here: its current turn and the rest of its life
        (a timer whose number is not the pod's turn any more is stale)."""
        self._waiting: collections.deque[PodRun] = collections.deque()
        """Simulated pods admitted while ``max_pods`` of them ran."""
        self._numbers = itertools.count()

    # --- Lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        nodes_rt = self.store.resource("", "v1", "nodes")
        for node in self.nodes:
            node.root.mkdir(parents=True, exist_ok=True)
            if self.store.find(nodes_rt, None, node.name) is None:
                self.store.create(nodes_rt, None, node.manifest(), internal=True)
        self.store.graceful_pods = True
        self._executor = concurrent.futures.ThreadPoolExecutor(self.max_pods, "kubelet-pod")
        self.store.listen(self._on_change)
        for job in self.store.objects("jobs", "batch"):  # Jobs made before the start
            self._dirty.add((job["metadata"]["namespace"], job["metadata"]["name"]))
        self._thread = threading.Thread(target=self._loop, name="kubelet", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self.store.unlisten(self._on_change)
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.kill("deleted")
        if self._thread:
            self._thread.join(10)
        with self._lock:
            lives, self._turns = [life for _, life in self._turns.values()], {}
        for life in lives:  # what is left of the simulated pods' lives (their last cleanup)
            life.close()
        if self._executor:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def _on_change(self, kind: str, key: tuple[str, str], obj: Obj, old: Obj | None) -> None:
        # Called under the store's lock, by whichever thread writes: a deque and a flag,
        # not a Queue, whose notify on every change took a tenth of the API server's time.
        if key in (("batch", "jobs"), ("", "pods")):
            self._events.append((kind, key, obj, old))
            if not self._wake.is_set():
                self.store.lock.defer(self._wake.set)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self._until_next(0.02))
            self._wake.clear()
            batch = []
            while self._events:
                batch.append(self._events.popleft())
            try:
                for change in batch:
                    self._note(*change)
                self._tick()
                self._run_due()
            except Exception:
                log.exception("The test cluster's controllers failed a pass")

    # --- Watching ---------------------------------------------------------------------------

    def _note(self, kind: str, key: tuple[str, str], obj: Obj, old: Obj | None) -> None:
        meta = obj["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        if key == ("batch", "jobs"):
            if kind == "DELETED":
                with self._lock:
                    self._jobs.pop(meta["uid"], None)
            elif kind == "ADDED" or meta.get("generation") != ((old or {}).get(
                    "metadata") or {}).get("generation"):
                self._dirty.add((ns, name))  # created, or its spec changed: at once
            else:
                self._sync_soon(ns, name)
            return
        job = (meta.get("labels") or {}).get("job-name")
        if job:
            self._sync_soon(ns, job)
        if kind == "DELETED":
            self._unscheduled.pop((ns, name), None)
            with self._lock:
                run = self._runs.pop(meta["uid"], None)
                if run is not None:
                    self._on_node[run.node.name].discard(run.uid)
            if run:
                run.kill("deleted")
            return
        if meta.get("deletionTimestamp"):
            self._terminate(obj)
            return
        spec = obj.get("spec") or {}
        if kind == "ADDED" and not spec.get("nodeName"):
            self._unscheduled[(ns, name)] = 0.0
        phase = (obj.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed") and TRACKING in (meta.get("finalizers") or []):
            owner = (meta.get("ownerReferences") or [{}])[0].get("uid")
            with self._lock:
                tracked = owner in self._jobs
            if not tracked and self.store.find(self.jobs_rt, ns, job or "") is None:
                self._drop_tracking(ns, name)  # orphaned: the job controller lets go

    def _sync_soon(self, ns: str, job: str) -> None:
        """Sync a Job after a change of its pods or status: now, or once the batch period
        that this change began is over (later changes join it)."""
        if self.job_sync_batch_seconds <= 0:
            self._dirty.add((ns, job))
        else:
            self._batched.setdefault((ns, job), time.monotonic() + self.job_sync_batch_seconds)

    def _tick(self) -> None:
        clock = time.monotonic()
        for key, due in list(self._batched.items()):
            if due <= clock:
                del self._batched[key]
                self._dirty.add(key)
        for (ns, name), due in list(self._unscheduled.items()):
            if due <= clock:
                self._schedule(ns, name)
        with self._lock:
            for run in self._jobs.values():
                if run.done:  # most of them, while finished Jobs wait for their deletion
                    continue
                due = [t for t in (run.deadline_at, run.final_at, run.retry_at or None)
                       if t is not None]
                if any(t <= clock for t in due):
                    self._dirty.add((run.ns, run.name))
        dirty, self._dirty = self._dirty, set()
        for ns, name in dirty:
            self._sync_job(ns, name)

    # --- Events -----------------------------------------------------------------------------

    def record(self, about: Obj, kind: str, reason: str, message: str, component: str,
               host: str | None = None, field_path: str | None = None) -> None:
        """An Event, aggregated as the recorder does (count, lastTimestamp)."""
        key = (about["metadata"]["uid"], kind, reason, message, field_path or "", component)
        with self._lock:
            known = self._recorded.get(key)
        if known:
            try:
                self.store.mutate(self.events_rt, known[0], known[1], lambda e: e.update(
                    count=e.get("count", 1) + 1, lastTimestamp=now()))
                return
            except ApiError:
                pass
        body = shapes.event(about, kind, reason, message, component, host, field_path)
        try:
            made = self.store.create(self.events_rt, body["metadata"]["namespace"], body,
                                     internal=True, given=True)
        except ApiError:
            return  # the namespace is going away
        with self._lock:
            self._recorded[key] = (made["metadata"]["namespace"], made["metadata"]["name"])

    # --- Job controller ---------------------------------------------------------------------

    def _write_job(self, ns: str, name: str, change: Any) -> Obj | None:
        try:
            return self.store.mutate(self.jobs_rt, ns, name, change, subresource="status")
        except ApiError:
            return None

    def _sync_job(self, ns: str, name: str) -> None:
        job = self.store.peek(self.jobs_rt, ns, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        uid = job["metadata"]["uid"]
        with self._lock:
            run = self._jobs.setdefault(uid, JobRun(ns, name, uid))
        status = job.get("status") or {}
        if run.done or any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                           for c in status.get("conditions") or []):
            run.done = True
            return
        if (job.get("spec") or {}).get("suspend"):
            return
        if run.started is None:
            run.started = time.monotonic()
            deadline = (job.get("spec") or {}).get("activeDeadlineSeconds")
            if deadline:
                run.deadline_at = run.started + deadline * self.deadline_scale
            fault = self.faults.strike("deadline", uid, self._template_labels(job), name,
                                       namespace=ns)
            if fault is not None and fault.step is None:
                run.deadline_at = run.started + fault.after
            self._write_job(ns, name, lambda j: j.setdefault("status", {}).update(
                startTime=now(), active=0, ready=0, terminating=0,
                uncountedTerminatedPods={}))
        if run.final is not None:
            if run.final_at is not None and time.monotonic() >= run.final_at:
                self._finish_job(job, run)
            return
        pods = [p for p in (self.store.peek(self.pods_rt, ns, n) for n in run.pods) if p]
        if run.deadline_at is not None and time.monotonic() >= run.deadline_at:
            self._deadline(job, run, pods)
            return
        live = [p for p in pods if p["status"].get("phase") not in ("Succeeded", "Failed")
                and not p["metadata"].get("deletionTimestamp")]
        succeeded = [p for p in pods if p["status"].get("phase") == "Succeeded"]
        # Failed, gone, or terminating (podReplacementPolicy TerminatingOrFailed).
        failed = [p for p in pods if p["status"].get("phase") == "Failed"
                  or (p["metadata"].get("deletionTimestamp") and p not in succeeded)]
        failed_count = len(failed) + (len(run.pods) - len(pods))
        if succeeded:
            self._decide(job, run, pods, "SuccessCriteriaMet", "Complete", *shapes.COMPLETE)
            return
        if failed_count > (job.get("spec") or {}).get("backoffLimit", 6):
            self._decide(job, run, pods, "FailureTarget", "Failed", *shapes.BACKOFF)
            return
        if not live:
            self._create_pod(job, run)
            pods = [p for p in (self.store.peek(self.pods_rt, ns, n) for n in run.pods) if p]
            live = [p for p in pods if p["status"].get("phase") not in ("Succeeded", "Failed")]
        self._write_counts(ns, name, live, pods, failed_count)

    def _write_counts(self, ns: str, name: str, live: list[Obj], pods: list[Obj],
                      failed: int) -> None:
        ready = sum(1 for p in live for c in p["status"].get("conditions") or []
                    if c["type"] == "Ready" and c["status"] == "True")
        terminating = sum(1 for p in pods if p["metadata"].get("deletionTimestamp"))

        def change(job: Obj) -> None:
            status = job.setdefault("status", {})
            status.update(active=len(live), ready=ready, terminating=terminating)
            if failed:
                status["failed"] = failed
            else:
                status.pop("failed", None)
            if not status["active"]:
                status.pop("active")
        self._write_job(ns, name, change)

    @staticmethod
    def _template_labels(job: Obj) -> dict[str, str]:
        return ((job.get("spec") or {}).get("template") or {}).get("metadata", {}).get(
            "labels") or {}

    def _create_pod(self, job: Obj, run: JobRun) -> None:
        meta, template = job["metadata"], job["spec"]["template"]
        base = f"{meta['name']}-"[:58]  # the apiserver's generateName cut
        name = f"{base}{random_suffix()}"
        labels = self._template_labels(job)
        fault = self.faults.strike("failed_create", meta["uid"], labels, meta["name"],
                                   namespace=meta["namespace"])
        if fault is not None and self.faults.active(fault):
            if time.monotonic() >= run.retry_at:
                message = fault.message or FAILED_CREATE.format(pod=name)
                self.record(job, "Warning", "FailedCreate", message, "job-controller")
                run.retry_at = time.monotonic() + max(1.0, self.retry_seconds * 5)
            run.failed_create = fault
            return
        run.retry_at = 0.0
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "generateName": f"{meta['name']}-",
                            "namespace": meta["namespace"], "labels": dict(labels),
                            "annotations": dict(template["metadata"].get("annotations") or {}),
                            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                                 "name": meta["name"], "uid": meta["uid"],
                                                 "controller": True,
                                                 "blockOwnerDeletion": True}],
                            "finalizers": [TRACKING]},
               "spec": copy.deepcopy(template["spec"])}
        if not pod["metadata"]["annotations"]:
            pod["metadata"].pop("annotations")
        try:
            self.store.create(self.pods_rt, meta["namespace"], pod, internal=True, given=True)
        except ApiError as exc:
            self.record(job, "Warning", "FailedCreate", f"Error creating: {exc.message}",
                        "job-controller")
            return
        run.pods.append(name)
        self.record(job, "Normal", "SuccessfulCreate", f"Created pod: {name}", "job-controller")

    def _decide(self, job: Obj, run: JobRun, pods: list[Obj], target: str, final: str,
                reason: str, message: str) -> None:
        """The outcome is known: count the pods, then the target condition, final later."""
        ns, name = run.ns, run.name
        succeeded = [p["metadata"]["uid"] for p in pods if p["status"]["phase"] == "Succeeded"]
        failed = [p["metadata"]["uid"] for p in pods if p["status"]["phase"] == "Failed"
                  or (p["metadata"].get("deletionTimestamp")
                      and p["metadata"]["uid"] not in succeeded)]
        self._write_job(ns, name, lambda j: j.setdefault("status", {}).update(
            active=0, ready=0, uncountedTerminatedPods={
                k: v for k, v in (("succeeded", succeeded), ("failed", failed)) if v}))
        for pod in pods:
            self._drop_tracking(ns, pod["metadata"]["name"])
        failed_count = len(failed) + (len(run.pods) - len(pods))
        # With no pod left terminating, the job-controller writes both conditions in one
        # update (the real objects show equal timestamps); else the final one comes later.
        terminating = any(p["metadata"].get("deletionTimestamp") and p["status"].get("phase")
                          not in ("Succeeded", "Failed") for p in pods)
        at_once = not terminating and not self.split_conditions

        def counted(j: Obj) -> None:
            status = j.setdefault("status", {})
            status.pop("active", None)
            status.update(ready=0, terminating=0, uncountedTerminatedPods={})
            if succeeded:
                status["succeeded"] = len(succeeded)
            if failed_count:
                status["failed"] = failed_count
            conditions = status.setdefault("conditions", [])
            conditions.append(shapes.job_condition(target, reason, message))
            if at_once:
                conditions.append(shapes.job_condition(final, reason, message))
                if final == "Complete":
                    status["completionTime"] = now()
        self._write_job(ns, name, counted)
        run.final = (final, reason, message)
        if at_once:
            self._record_final(job, final, reason, message)
            run.done = True
        else:
            run.final_at = time.monotonic() + self.condition_delay

    def _deadline(self, job: Obj, run: JobRun, pods: list[Obj]) -> None:
        """Past activeDeadlineSeconds: FailureTarget, the pods deleted, then Failed."""
        reason, message = shapes.DEADLINE
        self.record(job, "Warning", reason, message, "job-controller")
        self._write_job(run.ns, run.name, lambda j: j.setdefault("status", {}).setdefault(
            "conditions", []).append(shapes.job_condition("FailureTarget", reason, message)))
        live = [p for p in pods if p["status"].get("phase") not in ("Succeeded", "Failed")]
        for pod in live:
            with contextlib.suppress(ApiError):
                self.store.delete(self.pods_rt, run.ns, pod["metadata"]["name"])
        failed = len([p for p in pods if p["status"].get("phase") == "Failed"]) + len(live)

        def counted(j: Obj) -> None:
            status = j.setdefault("status", {})
            status.pop("active", None)
            status.update(ready=0, terminating=len(live), uncountedTerminatedPods={},
                          failed=max(1, failed))
        self._write_job(run.ns, run.name, counted)
        run.final = ("Failed", reason, message)
        run.final_at = time.monotonic() + self.condition_delay
        run.deadline_at = None

    def _finish_job(self, job: Obj, run: JobRun) -> None:
        condition, reason, message = run.final  # type: ignore[misc]

        def change(j: Obj) -> None:
            status = j.setdefault("status", {})
            status.setdefault("conditions", []).append(shapes.job_condition(condition, reason,
                                                                            message))
            status["terminating"] = 0
            if condition == "Complete":
                status["completionTime"] = now()
        self._write_job(run.ns, run.name, change)
        self._record_final(job, condition, reason, message)
        run.done = True

    def _record_final(self, job: Obj, condition: str, reason: str, message: str) -> None:
        if condition == "Complete":
            self.record(job, "Normal", "Completed", "Job completed", "job-controller")
        elif reason != shapes.DEADLINE[0]:  # recorded when the deadline passed
            self.record(job, "Warning", reason, message, "job-controller")

    def _drop_tracking(self, ns: str, name: str) -> None:
        def drop(pod: Obj) -> None:
            finalizers = [f for f in pod["metadata"].get("finalizers") or [] if f != TRACKING]
            pod["metadata"]["finalizers"] = finalizers
            if not finalizers:
                pod["metadata"].pop("finalizers")
        with contextlib.suppress(ApiError):
            self.store.mutate(self.pods_rt, ns, name, drop)

    # --- Scheduler --------------------------------------------------------------------------

    def _fits(self, node: Node, spec: Obj) -> bool:
        selector = [Requirement(k, "=", frozenset([v]))
                    for k, v in (spec.get("nodeSelector") or {}).items()]
        obj = {"metadata": {"labels": node.labels, "name": node.name}}
        if not labels_match(selector, obj):
            return False
        required = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
        return not required or any(self._term(node, t) for t in required)

    @staticmethod
    def _term(node: Node, term: Obj) -> bool:
        fields = term.get("matchFields") or []
        labels_ok = labels_match(match_selector_object(
            {"matchExpressions": term.get("matchExpressions") or []}),
            {"metadata": {"labels": node.labels}})
        fields_ok = labels_match(match_selector_object({"matchExpressions": fields}),
                                 {"metadata": {"labels": {"metadata.name": node.name}}})
        return labels_ok and fields_ok

    def _schedule(self, ns: str, name: str) -> None:
        pod = self.store.peek(self.pods_rt, ns, name)
        if pod is None or pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
            self._unscheduled.pop((ns, name), None)
            return
        spec = pod["spec"]
        fitting = [n for n in self.nodes if self._fits(n, spec)]
        if not fitting:
            count = len(self.nodes)
            message = (f"0/{count} nodes are available: {count} node(s) didn't match Pod's "
                       f"node affinity/selector. preemption: 0/{count} nodes are available: "
                       f"{count} Preemption is not helpful for scheduling.")
            if self._unscheduled.get((ns, name)) == 0.0:
                self._scheduled_event(pod, None, "FailedScheduling", message, "Warning")
                self.store.mutate(self.pods_rt, ns, name, lambda p: shapes.set_condition(
                    p.setdefault("status", {}), "PodScheduled", False, "Unschedulable",
                    message), subresource="status")
            self._unscheduled[(ns, name)] = time.monotonic() + 1.0
            return
        preferred = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "preferredDuringSchedulingIgnoredDuringExecution") or []
        with self._lock:  # a finished pod takes no room
            load = {n.name: len(self._on_node[n.name]) for n in self.nodes}

        def score(node: Node) -> tuple[int, int, str]:
            weight = sum(p.get("weight", 1) for p in preferred
                         if self._term(node, p.get("preference") or {}))
            return (-weight, load[node.name], node.name)
        node = min(fitting, key=score)
        self._unscheduled.pop((ns, name), None)

        pod = self.store.bind(self.pods_rt, ns, name, node.name, lambda status: shapes.
                              set_condition(status, "PodScheduled", True))
        self._scheduled_event(pod, node.name)
        run = PodRun(self, pod, node)
        with self._lock:
            self._runs[run.uid] = run
            self._on_node[node.name].add(run.uid)
        try:
            run.admit()
        except Exception:
            return
        self._start(run)

    def _scheduled_event(self, pod: Obj, node: str | None, *args: str) -> None:
        with contextlib.suppress(ApiError):
            self.store.create(self.events_rt, pod["metadata"]["namespace"],
                              shapes.scheduler_event(pod, node, *args), internal=True)

    # --- Kubelet ----------------------------------------------------------------------------

    def _start(self, run: PodRun) -> None:
        """Run an admitted pod: in a worker thread, or simulated on this thread."""
        if run.blocks:
            assert self._executor is not None
            self._executor.submit(self._run_pod, run)
            return
        with self._lock:
            if len(self._turns) >= self.max_pods:
                self._waiting.append(run)
                return
            self._turns[run.uid] = (0, run.life())
        self._began()
        run.on_kill = partial(self._resume, run)
        self._resume(run)

    def _run_pod(self, run: PodRun) -> None:
        if self._stopping.is_set():
            return
        self._began()
        try:
            run.run()
        except Exception:
            log.exception("Pod %s/%s failed in the test kubelet", run.ns, run.name)
        finally:
            self._ended(run)

    def _began(self) -> None:
        with self._lock:
            self._running_now += 1
            self.running_peak = max(self.running_peak, self._running_now)

    def _ended(self, run: PodRun) -> None:
        with self._lock:
            self._running_now -= 1
            self._on_node[run.node.name].discard(run.uid)
        if run.kill_reason == "deleted":
            self._finalize_deletion(run.ns, run.name)

    # --- Simulated pods, as timers on the controllers' thread ------------------------------

    def _resume(self, run: PodRun, seconds: float = 0.0) -> None:
        """Wake a simulated pod in `seconds` (now: it was killed, or has just begun)."""
        if run.killed.is_set():  # killed from another thread while its step ran
            seconds = 0.0
        with self._lock:
            turn = self._turns.get(run.uid)
            if turn is None:
                return
            number = next(self._numbers)
            self._turns[run.uid] = (number, turn[1])
            heapq.heappush(self._timers, (time.monotonic() + seconds, number, run))
        if threading.current_thread() is not self._thread:
            self._wake.set()

    def _until_next(self, most: float) -> float:
        with self._lock:
            if not self._timers:
                return most
            return min(most, max(0.0, self._timers[0][0] - time.monotonic()))

    def _run_due(self) -> None:
        """Take each simulated pod whose wait is over to its next wait, or to its end."""
        while True:
            with self._lock:
                if not self._timers or self._timers[0][0] > time.monotonic():
                    return
                _, number, run = heapq.heappop(self._timers)
                turn = self._turns.get(run.uid)
                if turn is None or turn[0] != number:
                    continue  # stale: the pod was woken since, or has ended
            try:
                self._resume(run, next(turn[1]))
                continue
            except StopIteration:
                pass
            except Exception:
                log.exception("Pod %s/%s failed in the test kubelet", run.ns, run.name)
            with self._lock:
                self._turns.pop(run.uid, None)
                following = self._waiting.popleft() if self._waiting else None
            self._ended(run)
            if following is not None and not self._stopping.is_set():
                self._start(following)

    def _terminate(self, pod: Obj) -> None:
        """A pod being deleted: stop its containers, then let it go."""
        meta = pod["metadata"]
        with self._lock:
            run = self._runs.get(meta["uid"])
        if run is not None and not run.ended.is_set() and run.step_started:
            run.kill("deleted")  # its worker finalizes once the containers are down
            return
        if run is not None:
            run.kill("deleted")
        self._finalize_deletion(meta["namespace"], meta["name"])

    def _finalize_deletion(self, ns: str, name: str) -> None:
        self._drop_tracking(ns, name)
        with contextlib.suppress(ApiError):
            self.store.delete(self.pods_rt, ns, name, grace_seconds=0)

    # --- Hooks for PodRun -------------------------------------------------------------------

    def step_started(self, run: PodRun, step: str) -> None:
        owner = (run.pod["metadata"].get("ownerReferences") or [{}])[0].get("uid")
        fault = self.faults.strike("deadline", owner or run.uid, run.labels, run.job_name, step,
                                   run.ns)
        if fault is None or fault.step != step:
            return
        with self._lock:
            job = self._jobs.get(owner or "")
            if job is not None and job.final is None:
                job.deadline_at = time.monotonic() + fault.after

    def entrypoint(self, image: str) -> list[str] | None:
        if image in self.entrypoints:
            return list(self.entrypoints[image])
        base = image.split("@")[0].rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] \
            else image
        return list(self.entrypoints[base]) if base in self.entrypoints else None

    def simulation_for(self, run: PodRun) -> Simulation | None:
        if self.simulation is None or run.item is None:
            return None
        return self.simulation

    @staticmethod
    def item_of(pod: Obj) -> Any:
        from proctor.core.model import WorkItem
        from proctor.k8s.manifests import ANNOTATION_ITEM

        text = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_ITEM)
        return WorkItem.model_validate_json(text) if text else None

    @staticmethod
    def simulated_result(item: Any, outcome: str) -> tuple[Obj, Obj]:
        """(full RunResult, compact result) of a simulated item."""
        from proctor.core.model import ErrorKind, Outcome, RunResult
        from proctor.runner.grade import compact_result

        kind = ErrorKind.AGENT if outcome == Outcome.ERROR else None
        result = RunResult(item_id=item.id, instance_id=item.instance_id,
                           variant_id=item.variant_id, repeat=item.repeat,
                           outcome=Outcome(outcome), error_kind=kind,
                           error_message="simulated" if kind else None, tests_ran=True)
        return json.loads(result.model_dump_json()), compact_result(result)

    # --- Introspection for tests ------------------------------------------------------------

    def volume(self, namespace: str, pod: str, volume: str) -> Path | None:
        """The local folder of a running (or finished, not deleted) pod's volume."""
        with self._lock:
            run = next((r for r in self._runs.values() if (r.ns, r.name) == (namespace, pod)),
                       None)
        return run.volumes.get(volume) if run is not None else None

    def running(self) -> int:
        """Pods whose containers are running on this machine now."""
        with self._lock:
            return self._running_now
