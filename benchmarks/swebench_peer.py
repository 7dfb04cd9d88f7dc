"""Proctor against the swebench harness, side by side, on the demo images or on real rows.

    .venv/bin/python benchmarks/swebench_peer.py [--workers 2] [--timeout 300]
    .venv/bin/python benchmarks/swebench_peer.py --real [--rounds 3] [-i ID ...] [--data DIR]

One invocation, the same rows (the demo dataset, whose `image` names the local demo
images), the same gold predictions and the same number of workers:

1. `proctor eval --sandbox docker` on the default daemon;
2. swebench 5.0.2's harness (`python -m swebench.harness.run_evaluation`) on a second
   daemon this script starts with `--init` (its own data-root, pidfile, exec-root,
   socket and containerd namespace; the demo images copied into it first, untimed), where
   `docker stop` ends the harness's `tail -f /dev/null` at once;
3. the harness on the default daemon, where that stop waits out its 15 s grace.

Each runs as its own process, timed from start to exit. Printed: wall times, Proctor's
over the harness's best, the floor (the eval scripts' own time spread over the workers),
Proctor's per-item overhead beyond its eval script, and whether every verdict agrees.
Target: identical verdicts and Proctor <= 0.8x the harness's best. Needs root and a
Docker daemon (scripts/docker-daemon.sh starts one); builds the demo images if missing.

With `--real`: the 20 real Verified rows whose repositories the shared data's bundles hold
(19 pytest, 1 flask; or `-i` some of them), their images built from those bundles when
missing (`proctor images build`). Gold predictions; each round runs Proctor and the
harness on the --init daemon one after the other, the order alternating between rounds
(the load of a shared machine drifts; alternation spreads it over both). Printed per
round and overall: wall times and their ratio, the floor (Proctor's eval scripts' seconds
over the workers, against the harness's wall: what a tool with no overhead at all would
reach), each tool's overhead per item beyond its eval scripts ((wall x workers - the eval
scripts' seconds) / items), verdict agreement.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import real_rows

from proctor.datasets import demo
from proctor.formats.harness_logs import results_dir
from proctor.sandboxes.demo_images import build_demo_images
from proctor.sandboxes.images.build import build_images

HARNESS = "swebench.harness.run_evaluation"
RUN_ID = "peer"


def timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    """Wall seconds of a command, which must succeed (its output goes to cwd/run.log)."""
    start = time.perf_counter()
    with open(cwd / "run.log", "w") as log:
        done = subprocess.run(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])} ... failed ({done.returncode}); see {cwd}/run.log")
    return seconds


@contextlib.contextmanager
def init_daemon(root: Path) -> Iterator[str]:
    """A second dockerd with --init, all its state under `root`; yields its DOCKER_HOST."""
    host = f"unix://{root}/docker.sock"
    log = open(root / "dockerd.log", "w")  # noqa: SIM115 - open while the daemon runs
    daemon = subprocess.Popen(
        ["dockerd", "--init", "--data-root", f"{root}/data", "--exec-root", f"{root}/exec",
         "--pidfile", f"{root}/docker.pid", "--host", host, "--storage-driver=overlay2",
         "--iptables=false", "--bridge=none", "--containerd-namespace", "proctor-peer",
         "--containerd-plugins-namespace", "proctor-peer-plugins"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(240):
            with contextlib.suppress(docker.errors.DockerException):
                docker.DockerClient(base_url=host, timeout=30).ping()
                break
            if daemon.poll() is not None:
                sys.exit(f"the --init daemon exited; see {root}/dockerd.log")
            time.sleep(0.5)
        yield host
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()


def copy_images(images: list[str], host: str) -> None:
    """The default daemon's images, loaded into the daemon at `host`."""
    save = subprocess.Popen(["docker", "save", *images], stdout=subprocess.PIPE)
    subprocess.run(["docker", "--host", host, "load", "-q"], stdin=save.stdout, check=True,
                   stdout=subprocess.DEVNULL)
    if save.wait() != 0:
        sys.exit("docker save failed")


def harness(rows: Path, cwd: Path, workers: int, timeout: int, host: str | None) -> float:
    cwd.mkdir()
    env = {**os.environ, **({"DOCKER_HOST": host} if host else {})}
    return timed([sys.executable, "-m", HARNESS, "--dataset_name", str(rows),
                  "--predictions_path", "gold", "--max_workers", str(workers),
                  "--run_id", RUN_ID, "--timeout", str(timeout)], cwd, env)


def proctor(cwd: Path, workers: int, timeout: int) -> float:
    cwd.mkdir()
    return timed([sys.executable, "-m", "proctor.cli.main", "eval", "-p", "gold", "-d",
                  demo.DATASET_NAME, "-j", str(workers), "--run_id", RUN_ID, "-t", str(timeout),
                  "--sandbox", "docker", "--pull", "never", "--output-dir", ".", "-q"], cwd)


def verdicts(cwd: Path) -> dict[str, bool]:
    """Each instance's `resolved`, from the report.json files the run left."""
    found = {}
    for report in (cwd / "logs" / "run_evaluation" / RUN_ID / "gold").glob("*/report.json"):
        found.update({k: v["resolved"] for k, v in json.loads(report.read_text()).items()})
    return found


def harness_eval_seconds(cwd: Path) -> list[float]:
    """The eval script's run time of each instance, as the harness logged it."""
    logs = (cwd / "logs" / "run_evaluation" / RUN_ID / "gold").glob("*/run_instance.log")
    pattern = re.compile(r"Test runtime: ([\d_.]+) seconds")
    return [float(m.group(1).replace("_", "")) for log in logs
            for m in pattern.finditer(log.read_text())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument("--real", action="store_true", help="real Verified rows")
    parser.add_argument("--rounds", type=int, default=3, help="with --real")
    parser.add_argument("-i", "--instance", nargs="+", default=(), help="with --real")
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2]
                        / "shared" / "data" / "swebench-verified",
                        help="the folder with the Verified parquet and repos/")
    args = parser.parse_args()
    if args.real:
        real(args)
        return
    client = docker.from_env()
    build_demo_images(client)
    rows_list = demo.load_rows()
    images = sorted({r["image"] for r in rows_list})
    with tempfile.TemporaryDirectory(prefix="peer-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        rows = root / "rows.json"
        rows.write_text(json.dumps(rows_list))
        (root / "init").mkdir()
        walls = {"proctor": proctor(root / "proctor", args.workers, args.timeout)}
        with init_daemon(root / "init") as host:
            copy_images(images, host)
            walls["harness --init"] = harness(rows, root / "harness-init", args.workers,
                                              args.timeout, host)
        walls["harness default"] = harness(rows, root / "harness-default", args.workers,
                                           args.timeout, None)
        report(root, walls, args.workers, len(rows_list))


def report(root: Path, walls: dict[str, float], workers: int, count: int) -> None:
    results = [json.loads(line) for line in (results_dir(root / "proctor", RUN_ID)
                                             / "results.jsonl").read_text().splitlines()]
    evals = [r["timings"]["eval_seconds"] for r in results]
    overhead = [r["timings"]["total_seconds"] - r["timings"]["eval_seconds"] for r in results]
    best = min(walls["harness --init"], walls["harness default"])
    print(f"{count} demo tasks, gold, {workers} workers; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    for name, wall in walls.items():
        print(f"  {name:16} {wall:7.2f} s")
    print(f"  Proctor / harness's best: {walls['proctor'] / best:.2f}x (target <= 0.8x)")
    theirs = sum(harness_eval_seconds(root / "harness-init"))
    print(f"  floor (eval scripts / workers): Proctor's {sum(evals) / workers:.2f} s, "
          f"the harness's (--init) {theirs / workers:.2f} s")
    print(f"  Proctor's overhead per item beyond its eval script: median "
          f"{statistics.median(overhead) * 1000:.0f} ms, max {max(overhead) * 1000:.0f} ms")
    runs = {"proctor": verdicts(root / "proctor"),
            "harness --init": verdicts(root / "harness-init"),
            "harness default": verdicts(root / "harness-default")}
    agree = all(v == runs["proctor"] and len(v) == count for v in runs.values())
    resolved = {name: sum(v.values()) for name, v in runs.items()}
    print(f"  verdicts agree on all {count}: {agree} (resolved: {resolved})")


def real(args: argparse.Namespace) -> None:
    parquet = args.data / "SWE-bench_Verified_test.parquet"
    instances = real_rows.rows(parquet, tuple(args.instance))
    client = docker.from_env()
    built = build_images(client, instances, source=args.data / "repos")
    if failed := [r.error for r in built if r.status == "failed"]:
        sys.exit("\n".join(failed))
    images = sorted({i.image for i in instances})
    with tempfile.TemporaryDirectory(prefix="peer-real-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        (root / "init").mkdir()
        with init_daemon(root / "init") as host:
            copy_images(images, host)
            rounds = [real_round(root / f"round{n}", n, instances, parquet, args, host)
                      for n in range(args.rounds)]
    ratios = [r["proctor"] / r["harness"] for r in rounds]
    print(f"{len(instances)} real rows, gold, {args.workers} workers, {args.rounds} rounds "
          f"(load average now {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores)")
    print(f"  Proctor / harness (--init): median {statistics.median(ratios):.2f}x, rounds "
          f"{', '.join(f'{x:.2f}' for x in ratios)} (target <= 0.8x)")
    floors = [r["floor"] / r["harness"] for r in rounds]
    print(f"  floor (Proctor's eval scripts alone / workers) / harness: median "
          f"{statistics.median(floors):.2f}x: no tool that runs the same scripts goes below it")
    for tool in ("proctor", "harness"):
        overheads = [r[f"{tool} overhead"] for r in rounds]
        print(f"  {tool}: wall {statistics.median(r[tool] for r in rounds):.1f} s (median), "
              f"overhead per item beyond its eval script {statistics.median(overheads):.2f} s")
    agree = [r["agree"] for r in rounds]
    print(f"  verdicts agree on all {len(instances)} rows in every round: {all(agree)}; "
          f"resolved (Proctor, last round): {rounds[-1]['resolved']}")


def real_round(root: Path, number: int, instances: list, parquet: Path,
               args: argparse.Namespace, host: str) -> dict:
    """One round: both tools on every row, in the order that alternates between rounds."""
    runs = {
        "proctor": lambda: real_rows.run_proctor(parquet, instances, "gold", root / "proctor",
                                                 args.workers, args.timeout),
        "harness": lambda: real_rows.run_harness(instances, "gold", root / "harness",
                                                 args.workers, args.timeout, host=host),
    }
    order = ["proctor", "harness"] if number % 2 == 0 else ["harness", "proctor"]
    walls = {name: runs[name]() for name in order}
    results = [json.loads(line) for line in (results_dir(root / "proctor", "real")
                                             / "results.jsonl").read_text().splitlines()]
    ours_eval = sum(r["timings"]["eval_seconds"] or 0 for r in results)
    theirs_eval = sum(real_rows.eval_seconds(root / "harness").values())
    count = len(instances)
    ours = real_rows.reports(root / "proctor", "gold")
    theirs = real_rows.reports(root / "harness", "gold")
    agree = len(ours) == len(theirs) == count and all(
        real_rows.verdict(ours[i]) == real_rows.verdict(theirs[i]) for i in ours)
    found = {**walls, "agree": agree, "resolved": sum(e["resolved"] for e in ours.values()),
             "floor": ours_eval / args.workers,
             "proctor overhead": (walls["proctor"] * args.workers - ours_eval) / count,
             "harness overhead": (walls["harness"] * args.workers - theirs_eval) / count}
    print(f"round {number}: Proctor {walls['proctor']:.1f} s, harness {walls['harness']:.1f} s"
          f", agree {agree}", flush=True)
    return found


if __name__ == "__main__":
    main()
