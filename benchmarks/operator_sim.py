"""The operator on realistic Jobs: a simulated run of the real split on the test cluster.

The real Verified split (500 tasks), gold predictions, maxConcurrentRows 50. The test
cluster's kubelet replaces each pod's steps by one wait: the task's whole wall time in
the real harness (eval_durations.json "total": image, container, tests, grading) divided
by 20, a median of 4.4 s and a mean of 11 s. 177 tasks have a recorded time; each other
task borrows one from a task of the same repository, drawn with a fixed seed (one of any
repository for the one whose repository has none). The test cluster's Job controller
takes in a pod's end 1 s later, as Kubernetes' does (its syncJobBatchPeriod).

The operator runs as a user runs it, in a process of its own (`kopf run -m MODULE`,
`--module`, by default proctor.k8s.controller; an older checkout's module, such as
proctor.k8s.operator, for a before-and-after), and is measured from outside: the test
cluster's record of each Job and pod change, the operator process's CPU time (/proc), and
the test cluster's request counter. An item runs from its Job's creation until its pod
ends or its Job ends or goes, whichever comes first. Printed:

* utilisation: items running / maxConcurrentRows, averaged from the first Job until the
  end that leaves fewer than maxConcurrentRows items (target: at least 0.99);
* refill latency: from the k-th item's end to the creation of Job 50 + k, p50 and p90
  (target: p90 under 1 s);
* operator CPU per Job, API requests per Job (by method), the operator's peak RSS;
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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "swebench-verified"
sys.path.insert(0, str(ROOT / "tests"))

from cluster.emulator import running_cluster  # noqa: E402
from cluster.faults import Simulation  # noqa: E402
from proctor.k8s.manifests import ANNOTATION_ITEM  # noqa: E402

NAMESPACE = "bench"
ROWS = 50
JOB_SYNC_BATCH_SECONDS = 1.0
"""Kubernetes' Job controller takes in its pods' changes in batches of a second."""
"""The work item a Job's pod runs: what the test cluster's kubelet simulates, read here."""
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
    """Job and pod changes as the test cluster's store makes them (exact times)."""

    created: dict[str, float] = field(default_factory=dict)
    ended: dict[str, float] = field(default_factory=dict)
    item_of: dict[str, str] = field(default_factory=dict)

    def note(self, kind: str, key: tuple[str, str], obj: dict, old: dict | None) -> None:
        # Called under the store's lock on every change: only note, never act.
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
    print(f"operator: kopf run -m {args.module}; load average before: {_load()}")
    evaluation = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                  "metadata": {"name": "verified", "namespace": NAMESPACE},
                  "spec": {"dataset": {"name": str(split), "maxRows": args.tasks},
                           "predictions": {"source": "gold"}, "repeats": mode.repeats,
                           "maxConcurrentRows": ROWS}}
    simulation = Simulation(seconds=lambda item: {"test": seconds[item.instance_id]})
    with running_cluster(namespaces=("default", NAMESPACE), max_pods=ROWS * 2,
                         simulation=simulation,
                         job_sync_batch_seconds=JOB_SYNC_BATCH_SECONDS) as cluster:
        return run(cluster, evaluation, len(lives), args)


def run(cluster: Any, evaluation: dict, total: int, args: argparse.Namespace) -> int:
    log = open(args.log or os.devnull, "w")  # noqa: SIM115 - open while the operator runs
    op = subprocess.Popen(
        [sys.executable, "-m", "kopf", "run", "--standalone", "--namespace", NAMESPACE,
         "--verbose" if args.log else "--quiet", "-m", args.module],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}, stdout=log,
        stderr=subprocess.STDOUT)
    record = Record()
    try:
        # Counted from when the operator watches Evaluations: its start-up is not per Job.
        cluster.wait_for(lambda: op.poll() is not None or any(
            "watch=true" in path for _, path, _ in cluster.calls("GET", "/evaluations")), 120,
                         message="the operator did not watch Evaluations within 120 s")
        served, cpu = collections.Counter(cluster.emulator.served), cpu_seconds(op.pid)
        harness = _own_cpu()
        cluster.store.listen(record.note)
        started = time.monotonic()
        status = wait_done(cluster, op, evaluation, started)
        wall = time.monotonic() - started
        settle(cluster)
        cluster.store.unlisten(record.note)
        served = cluster.emulator.served - served
        cpu, peak = cpu_seconds(op.pid) - cpu, peak_rss_mib(op.pid)
        harness = _own_cpu() - harness
    finally:
        op.terminate()
        op.wait(timeout=30)
        log.close()
    jobs = len(record.created)
    print(f"wall time {wall:.0f} s; {jobs} Jobs; Evaluation: {status.get('items')}")
    report(record, targets=not args.stress)
    print(f"operator CPU per Job: {1000 * cpu / jobs:.1f} ms ({cpu:.1f} s in all); peak RSS "
          f"{peak:.0f} MiB")
    requests = ", ".join(f"{method} {count / jobs:.1f}" for method, count in
                         sorted(served.items()))
    print(f"API requests per Job: {sum(served.values()) / jobs:.1f} ({requests})")
    print(f"test cluster CPU per Job (API server, controllers, simulated pods): "
          f"{1000 * harness / jobs:.1f} ms; load average after: {_load()}")
    return check(record, status, total)


def wait_done(cluster: Any, op: subprocess.Popen, evaluation: dict, started: float) -> dict:
    """Create the Evaluation and wait until each of its items has a result."""
    evaluations = cluster.store.resource("proctor.dev", "v1alpha1", "evaluations")
    cluster.store.create(evaluations, NAMESPACE, evaluation)
    while True:
        status = cluster.store.get(evaluations, NAMESPACE, "verified").get("status") or {}
        items = status.get("items") or {}
        if items.get("total") and items.get("done", 0) >= items["total"]:
            return status
        if op.poll() is not None:
            raise SystemExit("the operator exited (--log FILE shows why)")
        if time.monotonic() - started > 1800:
            raise SystemExit(f"not done after 30 min: {items}")
        time.sleep(0.2)


def settle(cluster: Any, quiet: float = 1.0, most: float = 15.0) -> None:
    """Wait until the operator has made no request for `quiet` seconds (its clean-up after
    the last result is part of the cost per Job), or `most` seconds."""
    deadline = time.monotonic() + most
    last, since = sum(cluster.emulator.served.values()), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet:
        time.sleep(0.1)
        now = sum(cluster.emulator.served.values())
        if now != last:
            last, since = now, time.monotonic()


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
