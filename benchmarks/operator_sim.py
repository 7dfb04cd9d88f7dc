"""The operator on realistic Jobs: a simulated run of the real split on a real control plane.

The real Verified split (500 tasks), gold predictions, maxConcurrentRows 50. Each pod's
steps are replaced by one wait: the task's whole wall time in the real harness
(eval_durations.json "total": image, container, tests, grading) divided by 20, a median
of 4.4 s and a mean of 11 s. 177 tasks have a recorded time; each other task borrows one
from a task of the same repository, drawn with a fixed seed (one of any repository for
the one whose repository has none).

Where it runs: on a real control plane of its own (`scripts/cluster.sh` with
`PROCTOR_CLUSTER_KWOK_NODES`: etcd, kube-apiserver, kube-controller-manager with its Job
controller and garbage collector, kube-scheduler, all built from Kubernetes' sources),
with KWOK playing the kubelets of 4 simulated nodes (benchmarks/kwok_plane.py: the
Stages that end each pod after its item's duration, and the grade logs the operator
reads). It needs Go or a cached build of the cluster, not root; the first run builds it.

The operator runs as a user runs it, in a process of its own (`kopf run -m MODULE`,
`--module`, by default proctor.k8s.controller; an older checkout's module, such as
proctor.k8s.operator, for a before-and-after), and is measured from outside: each Job and
pod change as a watch delivers it (both the ends and the creations, so a refill is timed
over two deliveries alike); the operator process's CPU time (/proc); the API requests
served. An item runs from its Job's creation until its pod ends or its Job ends or goes, whichever
comes first. Printed:

* utilisation: items running / maxConcurrentRows, averaged from the first Job until the
  end that leaves fewer than maxConcurrentRows items (target: at least 0.99);
* refill latency: from the k-th item's end to the creation of Job 50 + k, p50 and p90
  (target: p90 under 1 s);
* operator CPU per Job, API requests per Job (by method: every client's, controllers and
  KWOK included, as the API server's request counter has no client label), the operator's
  peak RSS, and the CPU per Job of the cluster itself;
* the load average before and after: the figures of a loaded machine are not a free one's.

Correctness, checked in every run (the exit status is 1 when violated): never more than
maxConcurrentRows items running, and each item given exactly one Job. `--stress` runs
2,000 items (the 500 tasks x 4 repeats) with durations / 100, for correctness only.

    python benchmarks/operator_sim.py [--tasks 500] [--stress] [--module MODULE]
                                      [--data DIR] [--log FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "swebench-verified"
import kwok_plane  # noqa: E402

from proctor.core.model import Outcome, RunResult, WorkItem  # noqa: E402
from proctor.k8s.children.manifests import ANNOTATION_ITEM, COMPONENT, LABEL_ITEM  # noqa: E402
from proctor.k8s.children.store import RESULT_KEY, RESULT_KIND  # noqa: E402

NAMESPACE = "bench"
ROWS = 50
KWOK_NODES = 4
"""Simulated nodes of 32 runner pods each: room for every slot, as a real pool has."""
SEED = 13


@dataclass(frozen=True)
class Mode:
    repeats: int
    divisor: float


REALISTIC, STRESS = Mode(repeats=1, divisor=20), Mode(repeats=4, divisor=100)


def task_seconds(tasks: list[str], runs: list[dict[str, Any]], divisor: float
                 ) -> dict[str, float]:
    """Per task (instance id), its real whole wall time / divisor. A task with none
    recorded borrows one of its repository's (by the instance id's owner prefix, which
    eval_durations.json names "repo"), or of any if its repository has none."""
    known = {r["iid"]: r["total"] for r in runs}
    by_repo: dict[str, list[float]] = collections.defaultdict(list)
    for run in runs:
        by_repo[run["repo"]].append(run["total"])
    everything = sorted(known.values())
    draw = random.Random(SEED)
    seconds = {}
    for task in sorted(tasks):
        total = known.get(task)
        if total is None:
            total = draw.choice(sorted(by_repo.get(task.split("__")[0], everything)))
        seconds[task] = total / divisor
    return seconds


def best_wall(lives: list[float], rows: int) -> float:
    """The wall time of these lives on `rows` slots refilled at once, in this order."""
    slots = [0.0] * rows
    for life in lives:
        slots[slots.index(min(slots))] += life
    return max(slots)


@dataclass
class Record:
    """Job and pod changes as a watch delivers them."""

    created: dict[str, float] = field(default_factory=dict)
    ended: dict[str, float] = field(default_factory=dict)
    item_of: dict[str, str] = field(default_factory=dict)

    def note(self, kind: str, key: tuple[str, str], obj: dict, old: dict | None) -> None:
        meta = obj["metadata"]
        if meta.get("namespace") != NAMESPACE:
            return
        now = time.monotonic()
        if key == ("batch", "jobs"):
            name = meta["name"]
            if name not in self.created:
                self.created[name] = now
                template = obj["spec"]["template"]["metadata"].get("annotations") or {}
                self.item_of[name] = json.loads(template.get(ANNOTATION_ITEM, "{}")).get(
                    "id", name)
            if kind == "DELETED" or _job_ended(obj):
                self.ended.setdefault(name, now)
        elif key == ("", "pods") and (obj.get("status") or {}).get("phase") in (
                "Succeeded", "Failed"):
            job = (meta.get("labels") or {}).get("job-name")
            if job in self.created:
                self.ended.setdefault(job, now)


def _job_ended(job: dict) -> bool:
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=500, help="the first N tasks of the split")
    parser.add_argument("--stress", action="store_true",
                        help="4 repeats, durations / 100: correctness only")
    parser.add_argument("--module", default="proctor.k8s.controller",
                        help="the operator's module, run with `kopf run -m`")
    parser.add_argument("--data", type=Path, default=DATA,
                        help="the folder of SWE-bench_Verified_test.parquet and "
                             "eval_durations.json")
    parser.add_argument("--log", help="the operator's log (verbose) to this file")
    args = parser.parse_args()
    mode = STRESS if args.stress else REALISTIC
    import pyarrow.parquet as pq

    split = args.data / "SWE-bench_Verified_test.parquet"
    if not split.is_file() or not (args.data / "eval_durations.json").is_file():
        raise SystemExit(f"{args.data} lacks SWE-bench_Verified_test.parquet or "
                         f"eval_durations.json (--data names their folder)")
    tasks = pq.read_table(split, columns=["instance_id"]).column(0).to_pylist()[:args.tasks]
    seconds = task_seconds(tasks, json.loads((args.data / "eval_durations.json").read_text()),
                           mode.divisor)
    lives = [seconds[t] for t in tasks] * mode.repeats
    print(f"{len(lives)} items ({len(tasks)} tasks x {mode.repeats}), maxConcurrentRows "
          f"{ROWS}, lives: the real whole times / {mode.divisor:g}, median "
          f"{statistics.median(lives):.1f} s, mean {statistics.mean(lives):.1f} s; "
          f"refilled at once they would take {best_wall(lives, ROWS):.0f} s")
    evaluation = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                  "metadata": {"name": "verified", "namespace": NAMESPACE},
                  "spec": {"dataset": {"name": str(split), "maxRows": args.tasks},
                           "predictions": {"source": "gold"}, "repeats": mode.repeats,
                           "maxConcurrentRows": ROWS}}
    return on_control_plane(evaluation, seconds, len(lives), args)


def start_operator(kubeconfig: Path, args: argparse.Namespace) -> subprocess.Popen:
    print(f"operator: kopf run -m {args.module}; load average before: {_load()}")
    log = open(args.log or os.devnull, "w")  # noqa: SIM115 - the child keeps it open
    with log:
        return subprocess.Popen(
            [sys.executable, "-m", "kopf", "run", "--standalone", "--namespace", NAMESPACE,
             "--verbose" if args.log else "--quiet", "-m", args.module],
            env={**os.environ, "KUBECONFIG": str(kubeconfig)}, stdout=log,
            stderr=subprocess.STDOUT)


def stop_operator(op: subprocess.Popen) -> None:
    op.terminate()
    op.wait(timeout=30)


# --- On a real control plane with KWOK nodes -----------------------------------------------


def on_control_plane(evaluation: dict, seconds: dict[str, float], total: int,
                     args: argparse.Namespace) -> int:
    with (tempfile.TemporaryDirectory(prefix="proctor-kwok-") as tmp,
          kwok_plane.kwok_plane(Path(tmp) / "cluster", KWOK_NODES) as plane):
        version = plane.api.call_api(*plane.api.param_serialize(
            "GET", "/version", auth_settings=["BearerToken"]))
        print(f"cluster: kube-apiserver {json.loads(version.read())['gitVersion']} with etcd, "
              f"kube-controller-manager and kube-scheduler; {KWOK_NODES} KWOK nodes")
        kwok_plane.install(plane, NAMESPACE,
                           kwok_plane.pod_stages(seconds, ANNOTATION_ITEM, LABEL_ITEM))
        logs = Path(tmp) / "logs"
        logs.mkdir()
        return run_on_plane(plane, logs, evaluation, total, args, seconds)


class KwokTiming:
    """How late KWOK ends pods: from their test step's start to their end, both as
    watched, less the item's duration. It lengthens items, not refills."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds, self.started = seconds, {}
        self.late: list[float] = []

    def note(self, pod: dict) -> None:
        now, name = time.monotonic(), pod["metadata"]["name"]
        status = pod.get("status") or {}
        if status.get("podIP") and status.get("phase") == "Pending":
            self.started.setdefault(name, now)
        elif status.get("phase") == "Succeeded" and name in self.started:
            item = json.loads((pod["metadata"].get("annotations") or {}).get(ANNOTATION_ITEM,
                                                                              "{}"))
            life = self.seconds.get(item.get("instance_id", ""), 0.0)
            self.late.append(now - self.started.pop(name) - life)

    def summary(self) -> str:
        if not self.late:
            return "KWOK: no pod seen from start to end"
        return (f"KWOK's pod ends, late by: p50 {1000 * _quantile(self.late, 0.5):.0f} ms, "
                f"p90 {1000 * _quantile(self.late, 0.9):.0f} ms")


def full_result(item_json: str) -> dict[str, Any]:
    """The full result a simulated item's grade step prints: resolved, tests ran."""
    item = WorkItem.model_validate_json(item_json)
    result = RunResult(item_id=item.id, instance_id=item.instance_id,
                       variant_id=item.variant_id, repeat=item.repeat,
                       outcome=Outcome.RESOLVED, tests_ran=True)
    return json.loads(result.model_dump_json())


def run_on_plane(plane: kwok_plane.Plane, logs: Path, evaluation: dict, total: int,
                 args: argparse.Namespace, seconds: dict[str, float]) -> int:
    from kubernetes import client

    custom = client.CustomObjectsApi(plane.api)
    writer = kwok_plane.LogWriter(plane, logs, ANNOTATION_ITEM, full_result)
    record, stop, kwok = Record(), threading.Event(), KwokTiming(seconds)

    def on_pod(kind: str, pod: dict) -> None:
        record.note(kind, ("", "pods"), pod, None)
        kwok.note(pod)
        if kind == "ADDED":
            writer.pod(pod)

    kwok_plane.watch(plane, f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs",
                     lambda kind, job: record.note(kind, ("batch", "jobs"), job, None), stop)
    kwok_plane.watch(plane, f"/api/v1/namespaces/{NAMESPACE}/pods", on_pod, stop)
    op = start_operator(plane.kubeconfig, args)
    try:
        # Counted from when the operator watches Evaluations: its start-up is not per Job.
        wait_until_watching(plane, op)
        pids = plane.daemon_pids()
        served, cpu, latency = requests_served(plane), cpu_seconds(op.pid), latencies(plane)
        plane_cpu = sum(cpu_seconds(pid) for pid in pids.values())
        started = time.monotonic()
        custom.create_namespaced_custom_object("proctor.dev", "v1alpha1", NAMESPACE,
                                               "evaluations", evaluation)
        status = wait_for_items(lambda: custom.get_namespaced_custom_object(
            "proctor.dev", "v1alpha1", NAMESPACE, "evaluations", "verified"), op, started)
        wall = time.monotonic() - started
        settle_cpu(op.pid)
        served = requests_served(plane) - served
        latency = {call: (seconds - latency.get(call, (0.0, 0))[0],
                          count - latency.get(call, (0.0, 0))[1])
                   for call, (seconds, count) in latencies(plane).items()}
        cpu, peak = cpu_seconds(op.pid) - cpu, peak_rss_mib(op.pid)
        plane_cpu = sum(cpu_seconds(pid) for pid in pids.values()) - plane_cpu
        from_logs = results_from_logs(plane)
    finally:
        stop.set()
        stop_operator(op)
        writer.close()
    jobs = len(record.created)
    print(f"wall time {wall:.0f} s; {jobs} Jobs; Evaluation: {status.get('items')}")
    report(record, targets=not args.stress)
    print(f"operator CPU per Job: {1000 * cpu / jobs:.1f} ms ({cpu:.1f} s in all); peak RSS "
          f"{peak:.0f} MiB")
    requests = ", ".join(f"{verb} {count / jobs:.1f}" for verb, count in sorted(served.items()))
    print(f"API requests per Job (every client's): {sum(served.values()) / jobs:.1f} "
          f"({requests})")
    print(f"control plane CPU per Job (etcd, API server, controllers, scheduler, KWOK): "
          f"{1000 * plane_cpu / jobs:.1f} ms; load average after: {_load()}")
    calls = ", ".join(f"{call} {1000 * seconds / count:.0f} ms" for call, (seconds, count)
                      in sorted(latency.items()) if call in OPERATOR_CALLS and count)
    print(f"API server time per request (mean, server side; the operator's calls): {calls}")
    print(kwok.summary())
    print(f"results read from the grade log (pods/log, served by KWOK): {from_logs} of "
          f"{total} (grade logs written: {writer.written})")
    return check(record, status, total)


def wait_until_watching(plane: kwok_plane.Plane, op: subprocess.Popen) -> None:
    """Wait until the operator watches Evaluations (at most 120 s)."""
    deadline = time.monotonic() + 120
    while not watching_evaluations(plane):
        if op.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the operator did not watch Evaluations within 120 s "
                             "(--log FILE shows why)")
        time.sleep(0.2)


def results_from_logs(plane: kwok_plane.Plane) -> int:
    """Kept results that the operator took from the grade log, not from the termination
    message (the fallback, which notes that the full result was lost)."""
    from kubernetes import client

    listed = client.CoreV1Api(plane.api).list_namespaced_config_map(
        NAMESPACE, label_selector=f"{COMPONENT}={RESULT_KIND}")
    kept = [json.loads((cm.data or {}).get(RESULT_KEY) or "{}") for cm in listed.items]
    return sum(1 for result in kept if not result.get("error_message"))


def wait_for_items(get: Any, op: subprocess.Popen, started: float) -> dict:
    """Wait until each item of the Evaluation (``get()`` reads it) has a result."""
    while True:
        status = get().get("status") or {}
        items = status.get("items") or {}
        if items.get("total") and items.get("done", 0) >= items["total"]:
            return status
        if op.poll() is not None:
            raise SystemExit("the operator exited (--log FILE shows why)")
        if time.monotonic() - started > 1800:
            raise SystemExit(f"not done after 30 min: {items}")
        time.sleep(0.2)


def settle_cpu(pid: int, quiet: float = 1.0, most: float = 15.0) -> None:
    """Wait until the operator has used no CPU for `quiet` seconds (its clean-up after the
    last result is part of the cost per Job), or `most` seconds."""
    deadline = time.monotonic() + most
    last, since = cpu_seconds(pid), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet:
        time.sleep(0.1)
        now = cpu_seconds(pid)
        if now != last:
            last, since = now, time.monotonic()


def _metrics(plane: kwok_plane.Plane) -> list[tuple[str, dict[str, str], float]]:
    """The API server's metrics: (name, labels, value) per sample."""
    response = plane.api.call_api(*plane.api.param_serialize(
        "GET", "/metrics", auth_settings=["BearerToken"]))
    samples = []
    for line in response.read().decode().splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        name, rest = line.split("{", 1)
        labels, value = rest.rsplit("} ", 1)
        pairs = dict(pair.split("=", 1) for pair in labels.split('",') if "=" in pair)
        samples.append((name, {k: v.strip('"') for k, v in pairs.items()}, float(value)))
    return samples


def watching_evaluations(plane: kwok_plane.Plane) -> bool:
    """Whether a watch of Evaluations is open (the operator's, once it has started)."""
    return any(name == "apiserver_longrunning_requests" and labels.get("verb") == "WATCH"
               and labels.get("resource") == "evaluations" and value >= 1
               for name, labels, value in _metrics(plane))


OPERATOR_CALLS = ("CONNECT pods/log", "POST jobs", "POST configmaps", "DELETE jobs",
                  "GET evaluations", "PATCH evaluations/status")


def latencies(plane: kwok_plane.Plane) -> dict[str, tuple[float, int]]:
    """The API server's time on requests so far, (seconds, count) by "VERB resource"."""
    sums: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for name, labels, value in _metrics(plane):
        if name in ("apiserver_request_duration_seconds_sum",
                    "apiserver_request_duration_seconds_count"):
            call = f"{labels.get('verb')} {labels.get('resource')}" + (
                f"/{labels['subresource']}" if labels.get("subresource") else "")
            sums[call][0 if name.endswith("_sum") else 1] += value
    return {call: (seconds, int(count)) for call, (seconds, count) in sums.items()}


def requests_served(plane: kwok_plane.Plane) -> collections.Counter[str]:
    """Requests the API server has answered, by verb (every client's)."""
    served: collections.Counter[str] = collections.Counter()
    for name, labels, value in _metrics(plane):
        if name == "apiserver_request_total":
            served[labels.get("verb", "?")] += int(value)
    return served


def report(record: Record, targets: bool) -> None:
    created = sorted(record.created.values())
    ended = sorted(record.ended.values())
    total = len(created)
    if len(ended) > total - ROWS:
        start, stop = created[0], ended[total - ROWS]
        print(f"utilisation: {utilisation(record, start, stop):.3f} "
              f"({'target: at least 0.99' if targets else 'stress run: no target'})")
    refills = [c - e for e, c in zip(ended, created[ROWS:], strict=False)]
    if refills:
        print(f"refill latency: p50 {1000 * _quantile(refills, 0.5):.0f} ms, p90 "
              f"{1000 * _quantile(refills, 0.9):.0f} ms "
              f"({'target: p90 under 1 s' if targets else 'stress run: no target'})")


def utilisation(record: Record, start: float, stop: float) -> float:
    """Items running / ROWS, averaged over [start, stop]."""
    area = 0.0
    for name, began in record.created.items():
        end = record.ended.get(name, stop)
        area += max(0.0, min(end, stop) - max(began, start))
    return area / (ROWS * (stop - start))


def check(record: Record, status: dict, total: int) -> int:
    """0 when never more than ROWS items ran at once and each item got exactly one Job;
    else 1, saying what went wrong."""
    changes = sorted([(t, 1) for t in record.created.values()]
                     + [(t, -1) for t in record.ended.values()])
    most = running = 0
    for _, step in changes:
        running += step
        most = max(most, running)
    jobs_per_item = collections.Counter(record.item_of.values())
    twice = sorted(item for item, count in jobs_per_item.items() if count > 1)
    problems = []
    if most > ROWS:
        problems.append(f"{most} items ran at once (limit {ROWS})")
    if twice:
        problems.append(f"{len(twice)} items got more than one Job, e.g. {twice[0]}")
    if len(jobs_per_item) != total or (status.get("items") or {}).get("done") != total:
        problems.append(f"{len(jobs_per_item)} items got a Job and "
                        f"{(status.get('items') or {}).get('done')} a result, of {total}")
    print(f"correctness: most items running at once {most} (limit {ROWS}); "
          f"{len(jobs_per_item)} items, each with exactly one Job: {not twice}")
    for problem in problems:
        print(f"FAILED: {problem}")
    return 1 if problems else 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


if __name__ == "__main__":
    sys.exit(main())
