"""Real SWE-bench Verified rows on images built from source, in Proctor and in swebench's
harness: shared by tests/e2e/test_real_rows.py (a subset, in CI) and benchmarks/swebench_peer.py
(all 20 rows of the shared data's bundles).

Each tool runs as its own process, as a user runs it: `proctor eval --sandbox docker`, and
swebench 5.0.2's `run_instances` (what `python -m swebench.harness.run_evaluation` calls
once it has its predictions; called directly so that `empty` runs too: the harness's CLI
skips empty patches, its `skip_patch` mode runs the tests on the untouched repository).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from proctor.core.model import Instance
from proctor.datasets import load
from proctor.formats.harness_logs import results_dir

# Five pytest rows of four environments (two share 5.4's) and the flask row: under 30 s of
# tests each here. CI builds and runs these; the benchmark runs all 20.
SUBSET = ("pytest-dev__pytest-5262", "pytest-dev__pytest-7205", "pytest-dev__pytest-7236",
          "pytest-dev__pytest-7571", "pytest-dev__pytest-10051", "pallets__flask-5014")
# Gold patches that do not resolve here, with the reason read from their logs.
UNRESOLVED_HERE: dict[str, str] = {}

_HARNESS = """\
import json, sys
from swebench.harness.run_evaluation import run_instances
if len(sys.argv) > 5:  # the containers' network, as Proctor's --network gives its own
    import docker.models.containers as containers
    create = containers.ContainerCollection.create
    containers.ContainerCollection.create = lambda self, *a, **kw: create(
        self, *a, **{**kw, "network_mode": sys.argv[5]})
rows = json.load(open("rows.json"))
preds = json.load(open("preds.json"))
run_instances(preds, rows, int(sys.argv[1]), sys.argv[2], int(sys.argv[3]),
              skip_patch=sys.argv[4] == "empty")
"""


def rows(parquet: Path, ids: tuple[str, ...] = ()) -> list[Instance]:
    """The Verified rows whose repositories the shared data's bundles hold, or `ids`."""
    every = load(str(parquet), max_rows=-1).instances
    wanted = ids or tuple(i.instance_id for i in every
                          if i.repo in ("pytest-dev/pytest", "pallets/flask"))
    by_id = {i.instance_id: i for i in every}
    return [by_id[iid] for iid in wanted]


def _timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    with open(cwd / "run.log", "w") as log:
        done = subprocess.run(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):  # 1: some items ended in error, shown by the verdicts
        raise RuntimeError(f"{' '.join(cmd[:5])} ... failed ({done.returncode}); "
                           f"see {cwd}/run.log")
    return seconds


def run_proctor(parquet: Path, instances: list[Instance], source: str, cwd: Path,
                workers: int, timeout: int, run_id: str = "real",
                network: str | None = None) -> float:
    """`proctor eval -p gold|empty|FILE --sandbox docker` on these rows; its wall seconds."""
    cwd.mkdir(parents=True, exist_ok=True)
    ids = [i.instance_id for i in instances]
    return _timed([sys.executable, "-m", "proctor.cli.main", "eval", "-p", source, "-d",
                   str(parquet), "-i", *ids, "-j", str(workers), "--run_id", run_id, "-t",
                   str(timeout), "--sandbox", "docker", "--pull", "never", "--output-dir",
                   ".", "-q", *(["--network", network] if network else [])], cwd)


def run_harness(instances: list[Instance], source: str, cwd: Path, workers: int, timeout: int,
                run_id: str = "real", host: str | None = None,
                patches: dict[str, str] | None = None, network: str | None = None) -> float:
    """swebench's harness on the same rows and images (`source`: gold or empty, or the
    model name of `patches`, each instance's patch); its wall seconds. `host`: another
    daemon's DOCKER_HOST. `network`: its containers' Docker network (the harness has no
    option for it: its create call is given one), default the daemon's."""
    cwd.mkdir(parents=True, exist_ok=True)
    (cwd / "rows.json").write_text(json.dumps([i.swebench_row() for i in instances]))
    chosen = patches if patches is not None else {
        i.instance_id: i.patch if source == "gold" else "" for i in instances}
    preds = {i.instance_id: {"instance_id": i.instance_id, "model_name_or_path": source,
                             "model_patch": chosen[i.instance_id]} for i in instances}
    (cwd / "preds.json").write_text(json.dumps(preds))
    env = {**os.environ, **({"DOCKER_HOST": host} if host else {})}
    return _timed([sys.executable, "-c", _HARNESS, str(workers), run_id, str(timeout), source,
                   *([network] if network else [])], cwd, env)


def bundle_reader(repos: Path, work: Path) -> Callable[[Instance], Callable[[str], str]]:
    """For each row, a reader of its repository's files at its base commit (from the
    shared data's bundles; "" for a file that is not there)."""
    def read_for(instance: Instance) -> Callable[[str], str]:
        clone = work / instance.repo.replace("/", "__")
        if not clone.exists():
            subprocess.run(["git", "clone", "-q", "--bare",
                            str(repos / f"{instance.repo.replace('/', '__')}.bundle"),
                            str(clone)], check=True, capture_output=True)

        def read(path: str) -> str:
            shown = subprocess.run(["git", "-C", str(clone), "show",
                                    f"{instance.base_commit}:{path}"], capture_output=True)
            return shown.stdout.decode(errors="replace") if shown.returncode == 0 else ""
        return read
    return read_for


def reports(cwd: Path, source: str, run_id: str = "real") -> dict[str, dict]:
    """Each instance's report.json entry that a run left (Proctor's or the harness's)."""
    found: dict[str, dict] = {}
    for path in (cwd / "logs" / "run_evaluation" / run_id / source).glob("*/report.json"):
        found.update(json.loads(path.read_text()))
    return found


def verdict(entry: dict) -> tuple[bool, dict]:
    """What two runs must agree on: resolved, and every test's result."""
    return entry["resolved"], entry.get("tests_status", {})


def eval_seconds(cwd: Path, run_id: str = "real") -> dict[str, float]:
    """The eval script's run time of each instance, as the harness logged it."""
    found = {}
    for log in (cwd / "logs" / "run_evaluation" / run_id).glob("*/*/run_instance.log"):
        for line in log.read_text().splitlines():
            if "Test runtime: " in line:
                found[log.parent.name] = float(line.split("Test runtime: ")[1].split()[0]
                                               .replace("_", ""))
    return found


def main() -> None:
    """Gold (or empty) predictions on the bundled real rows through `proctor eval --sandbox
    docker`: each row's outcome, its eval script's time and its item's wall time."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2]
                        / "shared" / "data" / "swebench-verified",
                        help="the shared data's swebench-verified folder")
    parser.add_argument("-p", "--predictions", choices=("gold", "empty"), default="gold")
    parser.add_argument("-i", "--instance", nargs="+", default=())
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=900)
    args = parser.parse_args()
    instances = rows(args.data / "SWE-bench_Verified_test.parquet", tuple(args.instance))
    with tempfile.TemporaryDirectory(prefix="real-rows-") as tmp:
        wall = run_proctor(args.data / "SWE-bench_Verified_test.parquet", instances,
                           args.predictions, Path(tmp), args.workers, args.timeout)
        results = {r["instance_id"]: r for r in map(
            json.loads, (results_dir(Path(tmp), "real") / "results.jsonl").read_text()
            .splitlines())}
    print(f"{len(instances)} real rows, {args.predictions}, {args.workers} workers, "
          f"wall {wall:.0f} s, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'instance':<28} {'outcome':<18} {'F2P':>7} {'P2P':>9} {'eval s':>7} {'item s':>7}")
    for instance in instances:
        r = results.get(instance.instance_id)
        if r is None:
            print(f"{instance.instance_id:<28} (no result)")
            continue
        t, f2p, p2p = r["timings"], r["FAIL_TO_PASS"], r["PASS_TO_PASS"]
        print(f"{instance.instance_id:<28} {r['outcome']:<18} "
              f"{_ratio(f2p):>7} {_ratio(p2p):>9}"
              f" {t.get('eval_seconds') or 0:>7.1f} {t.get('total_seconds') or 0:>7.1f}"
              + (f"  {r['error_message']}" if r.get("error_message") else ""))


def _ratio(tests: dict) -> str:
    return f"{len(tests['success'])}/{len(tests['success']) + len(tests['failure'])}"


if __name__ == "__main__":
    main()
