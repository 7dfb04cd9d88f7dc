"""Real SWE-bench Verified rows on images built from source, in Proctor and in swebench's
harness: shared by tests/test_real_rows.py (a subset, in CI) and benchmarks/swebench_peer.py
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
from pathlib import Path

from proctor.core.model import Instance
from proctor.datasets import load

# Five pytest rows of four environments (two share 5.4's) and the flask row: under 30 s of
# tests each here. CI builds and runs these; the benchmark runs all 20.
SUBSET = ("pytest-dev__pytest-5262", "pytest-dev__pytest-7205", "pytest-dev__pytest-7236",
          "pytest-dev__pytest-7571", "pytest-dev__pytest-10051", "pallets__flask-5014")
# Gold patches that do not resolve here, with the reason read from their logs.
UNRESOLVED_HERE: dict[str, str] = {}

_HARNESS = """\
import json, sys
from swebench.harness.run_evaluation import run_instances
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
                workers: int, timeout: int, run_id: str = "real") -> float:
    """`proctor eval -p gold|empty --sandbox docker` on these rows; its wall seconds."""
    cwd.mkdir(parents=True, exist_ok=True)
    ids = [i.instance_id for i in instances]
    return _timed([sys.executable, "-m", "proctor.cli.main", "eval", "-p", source, "-d",
                   str(parquet), "-i", *ids, "-j", str(workers), "--run_id", run_id, "-t",
                   str(timeout), "--sandbox", "docker", "--pull", "never", "--output-dir",
                   ".", "-q"], cwd)


def run_harness(instances: list[Instance], source: str, cwd: Path, workers: int, timeout: int,
                run_id: str = "real", host: str | None = None) -> float:
    """swebench's harness on the same rows and images (`source`: gold or empty); its wall
    seconds. `host`: another daemon's DOCKER_HOST."""
    cwd.mkdir(parents=True, exist_ok=True)
    (cwd / "rows.json").write_text(json.dumps([i.swebench_row() for i in instances]))
    preds = {i.instance_id: {"instance_id": i.instance_id, "model_name_or_path": source,
                             "model_patch": i.patch if source == "gold" else ""}
             for i in instances}
    (cwd / "preds.json").write_text(json.dumps(preds))
    env = {**os.environ, **({"DOCKER_HOST": host} if host else {})}
    return _timed([sys.executable, "-c", _HARNESS, str(workers), run_id, str(timeout), source],
                  cwd, env)


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
