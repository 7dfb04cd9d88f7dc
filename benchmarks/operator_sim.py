"""The operator at scale, in a simulated run on the test cluster.

The real Verified split (500 tasks) x 4 repeats = 2,000 items, maxConcurrentRows 50,
gold predictions. The test cluster's kubelet replaces each pod's steps by a sleep of
the task's real test runtime (eval_durations.json) divided by 100. The operator runs
as its own process (`kopf run -m proctor.k8s.operator`), as in a Deployment.

Prints: Job creation throughput, slot utilisation (running Jobs / maxConcurrentRows,
averaged over time while at least maxConcurrentRows items remain; target at least 0.95)
and how many Jobs ended a second meanwhile, how long a freed slot waits for its next
Job, how long a finished Job waits for its result to be kept (harvests queue behind
refills), the status size, the operator's peak RSS, the wall time and where the CPU
went. Job times come from the test cluster's store as it changes. For reference, a bare
watch client in a process of its own (`--watch-probe`) records when it is told that each
Job ended: the part of the wait that is the test cluster's own delivery, which no
operator can avoid. Last, the CPU time per Job and the
ceiling it puts on utilisation: a run that uses up the cores shows the machine's limit,
not the operator's; `--scale 10` (Jobs ten times longer) shows the operator's own.

The operator and the test cluster each run on a core of their own (given two or more):
in a cluster the operator's pod does not share its CPU with the API server and the
kubelets, and a Python process spread over several cores hands its GIL from core to core,
which here costs each about a third more CPU per Job. `--no-pin` lets them share.

Within the test cluster, the kubelet's thread (the controllers and every simulated pod,
as timers) runs at a lower OS priority than its API server's (`NICE`), as if the API server
had machines of its own: on one shared core, a kubelet thread that wakes takes the core and
the GIL from the API server, and every watch event and request waits. For the same reason
the test cluster hands its GIL between the two every millisecond, not every five
(`SWITCH_SECONDS`). The simulated pods pay for it: they wait for the API server, so Jobs
live a little longer, and as many end per second either way. `--no-nice` shows the other
way.

By default the test cluster's Job controller marks a Job Complete as soon as its pod ends,
so most slots go on when the operator's watch shows the Job succeeded. Kubernetes' own
controller takes in a pod's end a second later (it batches pod updates):
`--job-sync-batch 1` does the same, and then slots go on when the operator, having kept a
Job's result as its pod ended, deletes it.

    python benchmarks/operator_sim.py [--repeats 4] [--rows 50] [--scale 100] [--no-pin]
                                      [--no-nice] [--job-sync-batch SECONDS]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "swebench-verified"
sys.path.insert(0, str(ROOT / "tests"))

from cluster.emulator import running_cluster  # noqa: E402
from cluster.faults import Simulation  # noqa: E402
from proctor.k8s.podstatus import job_finished  # noqa: E402

NAMESPACE = "bench"
NICE = 10
"""The OS priority of the test cluster's kubelet (controllers, pods) below its API server
(see `cluster.kubelet.Kubelet`): in a cluster the API server does not share its cores with
the nodes, and here a kubelet thread that wakes takes the one core, and the GIL, from it."""

SWITCH_SECONDS = 0.001
"""The test cluster's GIL switch interval (Python's default: 0.005). Its two busy threads,
the API server's event loop and the kubelet, share one GIL: a thread that wants it waits
for the other to let go, up to the interval, so every watch event and request could wait
up to 5 ms for the kubelet, which a real API server, on machines of its own, never does."""


def durations(scale: float) -> dict[str, float]:
    """Per instance, its real test runtime / scale; tasks without a log borrow one."""
    runs = json.loads((DATA / "eval_durations.json").read_text())
    return {r["iid"]: r["test"] / scale for r in runs}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):  # peak resident set
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--rows", type=int, default=50, help="maxConcurrentRows")
    parser.add_argument("--scale", type=float, default=100)
    parser.add_argument("--max-rows", type=int, default=-1)
    parser.add_argument("--no-pin", action="store_true",
                        help="let the operator and the test cluster share every core")
    parser.add_argument("--no-nice", action="store_true",
                        help="run the test cluster's kubelet at the API server's priority")
    parser.add_argument("--job-sync-batch", type=float, default=0.0, metavar="SECONDS",
                        help="the Job controller takes in a pod's end this long after, as "
                             "Kubernetes' does (1 s); default: at once")
    parser.add_argument("--watch-probe", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # The test cluster keeps every object in this process; like the operator (see its
    # GC_THRESHOLD), it runs the cyclic garbage collector less often than Python's default.
    gc.set_threshold(50_000, *gc.get_threshold()[1:])
    if args.watch_probe:
        return watch_probe(Path(args.watch_probe))
    sys.setswitchinterval(SWITCH_SECONDS)
    cores = sorted(os.sched_getaffinity(0))
    pin = not args.no_pin and len(cores) >= 2
    if pin:  # before the test cluster starts its threads, which inherit it
        os.sched_setaffinity(0, {cores[0]})
    known = durations(args.scale)
    spare = sorted(known.values())

    def seconds(item) -> dict[str, float]:
        # Tasks without a recorded runtime take one from the real distribution.
        value = known.get(item.instance_id)
        if value is None:
            value = spare[hash(item.instance_id) % len(spare)]
        return {"test": value}

    evaluation = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                  "metadata": {"name": "verified", "namespace": NAMESPACE},
                  "spec": {"dataset": {"name": str(DATA / "SWE-bench_Verified_test.parquet"),
                                       "maxRows": args.max_rows},
                           "predictions": {"source": "gold"}, "repeats": args.repeats,
                           "maxConcurrentRows": args.rows}}
    with running_cluster(namespaces=("default", NAMESPACE), max_pods=args.rows * 2,
                         simulation=Simulation(seconds=seconds),
                         nice=0 if args.no_nice else NICE,
                         job_sync_batch_seconds=args.job_sync_batch) as cluster:
        store = cluster.store
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig),
               "PROCTOR_RECONCILE_SECONDS": "5"}
        log = open(os.environ.get("PROCTOR_SIM_LOG", os.devnull), "w")  # noqa: SIM115
        told = Path(cluster.kubeconfig).with_name("probe.json")
        probe = subprocess.Popen([sys.executable, __file__, "--watch-probe", str(told)],
                                 env=env)
        if pin:  # a child starts with the affinity of the thread that starts it
            os.sched_setaffinity(0, {cores[1]})
        op = subprocess.Popen([sys.executable, "-m", "kopf", "run", "--standalone",
                               "--debug" if os.environ.get("PROCTOR_SIM_LOG") else "--quiet",
                               "--namespace", NAMESPACE, "-m", "proctor.k8s.operator"],
                              env=env, stdout=log, stderr=subprocess.STDOUT)
        if pin:
            os.sched_setaffinity(0, {cores[0]})
            print(f"cores: the test cluster (and the bare watch client) on CPU {cores[0]}, "
                  f"the operator on CPU {cores[1]} (--no-pin: both share all {len(cores)})")
        try:
            total, life = run(cluster, store, evaluation, args, op, told)
        finally:
            alive = op.poll() is None
            peak = rss_kib(op.pid) if alive else 0
            op_cpu = cpu_seconds(op.pid) if alive else 0.0
            op.terminate()
            probe.terminate()
            op.wait(timeout=30)
        harness = os.times()
        print(f"operator peak RSS: {peak / 1024:.0f} MiB")
        cluster_cpu = harness.user + harness.system
        print(f"CPU time: operator {op_cpu:.0f} s, test cluster (API server, kubelet, pods) "
              f"{cluster_cpu:.0f} s, on {os.cpu_count()} cores")
        print(ceiling(op_cpu / total, cluster_cpu / total, life, args.rows))


def ceiling(operator_s: float, cluster_s: float, life_s: float, rows: int) -> str:
    """What the CPU time per Job allows: the Jobs per second these cores can run, and the
    utilisation that rate gives Jobs of this life. The test cluster is one Python process,
    so it runs on one core at most; so does the operator."""
    cores = os.cpu_count() or 1
    rate = min(cores / (operator_s + cluster_s), 1 / cluster_s, 1 / operator_s)
    return (f"CPU per Job: operator {1000 * operator_s:.0f} ms, test cluster "
            f"{1000 * cluster_s:.0f} ms: at most {rate:.0f} Jobs/s here, so about "
            f"{min(rate * life_s, rows):.0f} running at once on average, utilisation at most "
            f"about {min(1.0, rate * life_s / rows):.2f} for Jobs that live {life_s:.2f} s")


def watch_probe(out: Path) -> None:
    """Watch the namespace's Jobs (raw JSON, nothing else) and add a line to `out` when
    each is seen ended (its name, monotonic time). It shares a core with the test cluster,
    so it does little: it reads only the lines of Jobs that may have ended (the client's own
    line reader copies the rest of a batch for every line, which took a sixth of the test
    cluster's CPU), and appends (rewriting a record of every Job seen took an eighth)."""
    import orjson
    from kubernetes import client, config

    from proctor.k8s.api import lines

    config.load_kube_config()
    jobs, seen, since = client.BatchV1Api(), set(), None
    sink = out.open("a", buffering=1)  # a line per Job: the file grows, is never rewritten
    while True:
        response = jobs.list_namespaced_job(NAMESPACE, watch=True, resource_version=since,
                                            timeout_seconds=600, _preload_content=False)
        for line in lines(response.stream(amt=None, decode_content=False)):
            if b'"Complete"' not in line and b'"Failed"' not in line:
                continue
            job = orjson.loads(line)["object"]
            since = job["metadata"]["resourceVersion"]
            name = job["metadata"]["name"]
            if job_finished(job) and name not in seen:
                seen.add(name)
                sink.write(f"{name} {time.monotonic()}\n")


def run(cluster, store, evaluation, args, op, told: Path) -> tuple[int, float]:
    """Run the Evaluation to the end and print what it showed; answers the number of
    items and the Jobs' mean life."""
    evaluations = store.resource("proctor.dev", "v1alpha1", "evaluations")
    created_at: dict[str, float] = {}
    ended_at: dict[str, float] = {}
    deleted_at: dict[str, float] = {}

    def note(kind: str, key: tuple[str, str], obj: dict, old: dict | None) -> None:
        # Called by the store as each change is made: exact times, no sampling.
        meta = obj["metadata"]
        if key != ("batch", "jobs") or meta.get("namespace") != NAMESPACE:
            return
        now = time.monotonic()
        created_at.setdefault(meta["name"], now)
        if job_finished(obj) or kind == "DELETED":
            ended_at.setdefault(meta["name"], now)
        if kind == "DELETED":
            deleted_at[meta["name"]] = now

    store.listen(note)
    started = time.monotonic()
    store.create(evaluations, NAMESPACE, evaluation)
    while True:
        body = store.get(evaluations, NAMESPACE, "verified")
        items = (body.get("status") or {}).get("items") or {}
        if items.get("total") and items.get("done", 0) >= items["total"]:
            break
        if op.poll() is not None:
            raise RuntimeError("the operator exited (set PROCTOR_SIM_LOG=file to see why)")
        if time.monotonic() - started > 1800:
            raise TimeoutError(f"not done after 30 min: {items}")
        time.sleep(0.1)
    store.unlisten(note)
    wall = time.monotonic() - started
    total = items["total"]
    created, ended = sorted(created_at.values()), sorted(ended_at.values())
    first = created[: args.rows]
    ramp = (first[-1] - first[0]) if len(first) > 1 else 0
    lives = [ended_at[n] - created_at[n] for n in ended_at]
    print(f"items: {total}, maxConcurrentRows: {args.rows}, wall time: {wall:.1f} s")
    print(f"a Job's life, created to ended: mean {statistics.mean(lives):.2f} s, median "
          f"{statistics.median(lives):.2f} s (the simulated steps and the test cluster's pace)")
    print(f"Job creation: {len(created)} Jobs, the first {len(first)} within {ramp:.2f} s "
          f"({len(first) / ramp if ramp else float('inf'):.0f} Jobs/s)")
    util, most = utilisation(created, ended, args.rows, total)
    print(f"slot utilisation: {util:.3f} (target: at least 0.95); most Jobs running at once: "
          f"{most} (limit {args.rows})")
    if util:
        # What the run got done meanwhile: how soon slots are refilled, and how fast the
        # test cluster's pods run (both share its one core), bound it.
        start, stop = _window(created, ended, args.rows, total)
        done = sum(1 for t in ended if start <= t <= stop)
        print(f"Jobs ended meanwhile: {done / (stop - start):.0f} a second")
    # The k-th slot to free up is the one the (rows + k)-th Job takes.
    refills = [c - e for e, c in zip(ended, created[args.rows:], strict=False)]
    if refills:
        print(f"a freed slot refilled after: median {1000 * statistics.median(refills):.0f} ms, "
              f"90th percentile {1000 * _quantile(refills, 0.9):.0f} ms")
    probed = {name: float(at) for name, at in (
        line.split() for line in told.read_text().splitlines())} if told.exists() else {}
    delivery = [probed[n] - ended_at[n] for n in probed if n in ended_at]
    if delivery:
        print(f"  of which the test cluster telling a bare watch client that a Job ended: "
              f"median {1000 * statistics.median(delivery):.0f} ms, 90th percentile "
              f"{1000 * _quantile(delivery, 0.9):.0f} ms")
    kept = [deleted_at[n] - ended_at[n] for n in deleted_at if n in ended_at]
    if kept:
        # Harvests and clean-ups wait behind the Jobs that refill slots (CHORES_AT_ONCE):
        # while the run keeps the cores busy, finished Jobs (and the operator's RSS) pile up.
        print(f"a finished Job deleted, its result kept, after: median "
              f"{statistics.median(kept):.1f} s, 90th percentile {_quantile(kept, 0.9):.1f} s")
    print(f"status size: {len(json.dumps(body['status']).encode()) / 1024:.1f} KiB "
          f"(limit: 256 KiB)")
    return total, statistics.mean(lives)


def utilisation(created: list[float], ended: list[float], rows: int, total: int
                ) -> tuple[float, int]:
    """Running Jobs / rows, averaged over time while at least `rows` items are not done
    (from the first Job until the end that leaves fewer than `rows`), and the most Jobs
    running at once over the whole run."""
    changes = sorted([(t, 1) for t in created] + [(t, -1) for t in ended])
    most = running = 0
    for _, step in changes:
        running += step
        most = max(most, running)
    if not created or len(ended) < total - rows + 1:
        return 0.0, most
    start, stop = _window(created, ended, rows, total)
    area, running, last = 0.0, 0, start
    for t, step in changes:
        if t > stop:
            break
        area += running * (t - last)
        running, last = running + step, t
    return area / (rows * (stop - start)), most


def _window(created: list[float], ended: list[float], rows: int, total: int
            ) -> tuple[float, float]:
    """From the first Job created to the end that leaves fewer than `rows` items to do."""
    return created[0], ended[total - rows]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]




if __name__ == "__main__":
    main()
