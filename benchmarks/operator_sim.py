"""The operator at scale, in a simulated run on the test cluster.

The real Verified split (500 tasks) x 4 repeats = 2,000 items, maxConcurrentRows 50,
gold predictions. The test cluster's kubelet replaces each pod's steps by a sleep of
the task's real test runtime (eval_durations.json) divided by 100. The operator runs
as its own process (`kopf run -m proctor.k8s.operator`), as in a Deployment.

Prints: Job creation throughput, slot utilisation (running Jobs / maxConcurrentRows,
averaged while at least maxConcurrentRows items remain; target at least 0.95), the
status size, the operator's peak RSS, and the wall time.

    python benchmarks/operator_sim.py [--repeats 4] [--rows 50] [--scale 100]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "swebench-verified"
sys.path.insert(0, str(ROOT / "tests"))

from cluster.emulator import running_cluster  # noqa: E402
from cluster.faults import Simulation  # noqa: E402

NAMESPACE = "bench"


def durations(scale: float) -> dict[str, float]:
    """Per instance, its real test runtime / scale; tasks without a log borrow one."""
    runs = json.loads((DATA / "eval_durations.json").read_text())
    return {r["iid"]: r["test"] / scale for r in runs}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):  # peak resident set
            return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--rows", type=int, default=50, help="maxConcurrentRows")
    parser.add_argument("--scale", type=float, default=100)
    parser.add_argument("--max-rows", type=int, default=-1)
    args = parser.parse_args()
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
                         simulation=Simulation(seconds=seconds)) as cluster:
        store = cluster.store
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig),
               "PROCTOR_RECONCILE_SECONDS": "5"}
        log = open(os.environ.get("PROCTOR_SIM_LOG", os.devnull), "w")  # noqa: SIM115
        op = subprocess.Popen([sys.executable, "-m", "kopf", "run", "--standalone",
                               "--debug" if os.environ.get("PROCTOR_SIM_LOG") else "--quiet",
                               "--namespace", NAMESPACE, "-m", "proctor.k8s.operator"],
                              env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            run(cluster, store, evaluation, args, op)
        finally:
            peak = rss_kib(op.pid) if op.poll() is None else 0
            op.terminate()
            op.wait(timeout=30)
        print(f"operator peak RSS: {peak / 1024:.0f} MiB")


def run(cluster, store, evaluation, args, op) -> None:
    evaluations = store.resource("proctor.dev", "v1alpha1", "evaluations")
    started = time.monotonic()
    store.create(evaluations, NAMESPACE, evaluation)
    samples, created_at, ended_at, total = [], {}, {}, None
    while True:
        now = time.monotonic() - started
        body = store.get(evaluations, NAMESPACE, "verified")
        items = (body.get("status") or {}).get("items") or {}
        total = items.get("total") or total
        listed = store.objects("jobs", "batch", NAMESPACE)
        for job in listed:
            created_at.setdefault(job["metadata"]["name"], now)
            if _ended(job):
                ended_at.setdefault(job["metadata"]["name"], now)
        running = sum(1 for j in listed if not _ended(j))
        done = items.get("done", 0)
        if total and total - done >= args.rows and created_at:
            samples.append(running / args.rows)
        if total and done >= total:
            break
        if op.poll() is not None:
            raise RuntimeError("the operator exited (set PROCTOR_SIM_LOG=file to see why)")
        if now > 1800:
            raise TimeoutError(f"not done after 30 min: {items}")
        time.sleep(0.1)
    wall = time.monotonic() - started
    first = sorted(created_at.values())[: args.rows]
    ramp = (first[-1] - first[0]) if len(first) > 1 else 0
    status_size = len(json.dumps(body["status"]).encode())
    lives = [ended_at[n] - created_at[n] for n in ended_at]
    if lives:
        print(f"a Job's life, created to ended: mean {sum(lives) / len(lives):.2f} s "
              f"(the simulated steps and the kubelet's own pace)")
    print(f"items: {total}, maxConcurrentRows: {args.rows}, wall time: {wall:.1f} s")
    print(f"Job creation: {len(created_at)} Jobs, the first {len(first)} within {ramp:.2f} s "
          f"({len(first) / ramp if ramp else float('inf'):.0f} Jobs/s)")
    print(f"slot utilisation: {sum(samples) / len(samples):.3f} over {len(samples)} samples "
          f"(target: at least 0.95)")
    print(f"status size: {status_size / 1024:.1f} KiB (limit: 256 KiB)")


def _ended(job: dict) -> bool:
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


if __name__ == "__main__":
    main()
