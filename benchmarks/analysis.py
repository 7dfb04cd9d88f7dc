"""`proctor analyze` at scale: 500 tasks x 4 variants x 5 repeats x 10 agents.

Writes 10 results folders (100,000 results.jsonl lines) whose lines are as large as real
ones: each result carries its task's FAIL_TO_PASS / PASS_TO_PASS test lists, taken from
the real SWE-bench Verified rows when the parquet is given (their lists average 9 KB a
row), else made up to that size. Outcomes follow a simple model (task difficulty, a
per-variant shift, 3% errors). Then prints, each apart: the time to load the folders,
the time to compute every figure (bootstrap of 2,000 resamples per agent, 45 paired
comparisons), the time to write the CSVs, PNGs and report, and the peak memory; each as
wall time and as this process's CPU time, with the load average: on a shared machine the
CPU time is the figure that does not depend on the neighbours.
Target: analysis (compute + write) under 5 s.

    python benchmarks/analysis.py [--verified PATH.parquet] [--agents 10] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import tempfile
import time
from pathlib import Path

import orjson

from proctor.analysis.load import load_agents
from proctor.analysis.run import compute, write
from proctor.core.model import Outcome, PassFail, PatchInfo, RunResult, Timings, Usage

VARIANTS = ("original", "formal", "terse", "steps")


def test_lists(verified: Path | None, tasks: int, rng: random.Random) -> list[tuple[list, list]]:
    """Per task, (FAIL_TO_PASS, PASS_TO_PASS) lists as large as Verified's."""
    if verified and verified.exists():
        import pyarrow.parquet as pq

        table = pq.read_table(verified, columns=["FAIL_TO_PASS", "PASS_TO_PASS"]).to_pylist()
        rows = [(json.loads(r["FAIL_TO_PASS"]), json.loads(r["PASS_TO_PASS"])) for r in table]
        return [rows[i % len(rows)] for i in range(tasks)]
    made = []
    for t in range(tasks):
        n = rng.randint(20, 200)  # about 9 KB of test ids on average
        made.append(([f"tests/test_mod{t}.py::test_fixed_{k}" for k in range(2)],
                     [f"tests/test_mod{t}.py::TestSuite::test_case_number_{k}"
                      for k in range(n)]))
    return made


def templates(f2p: list, p2p: list) -> dict[Outcome, dict]:
    """One result per outcome for a task, as dicts (lines differ only in a few fields)."""
    out = {}
    for outcome in (Outcome.RESOLVED, Outcome.NO_OP, Outcome.ERROR):
        ok = outcome == Outcome.RESOLVED
        out[outcome] = RunResult(
            item_id="x", instance_id="x", outcome=outcome, tests_ran=outcome != Outcome.ERROR,
            patch=PatchInfo(present=ok),
            FAIL_TO_PASS=PassFail(success=f2p if ok else [], failure=[] if ok else f2p),
            PASS_TO_PASS=PassFail(success=p2p)).model_dump(mode="json")
    return out


def write_agent(folder: Path, agent: int, lists: list[tuple[list, list]],
                repeats: int, rng: random.Random) -> int:
    folder.mkdir(parents=True)
    spec = {"spec": {"agentRef": {"name": f"agent-{agent}"}}}
    (folder / "spec.json").write_text(json.dumps(spec))
    skill, size = 0.2 + 0.06 * agent, 0
    with open(folder / "results.jsonl", "wb") as fh:
        for t, (f2p, p2p) in enumerate(lists):
            easy, shapes = rng.random(), templates(f2p, p2p)
            for variant in VARIANTS:
                chance = min(0.95, max(0.02, easy * skill * 2 + rng.gauss(0, 0.1)))
                for k in range(repeats):
                    outcome = (Outcome.ERROR if rng.random() < 0.03 else Outcome.RESOLVED
                               if rng.random() < chance else Outcome.NO_OP)
                    line = orjson.dumps({
                        **shapes[outcome], "item_id": f"{agent:02d}{t:04d}{variant}{k}",
                        "instance_id": f"task-{t}", "variant_id": variant, "repeat": k,
                        "timings": Timings(total_seconds=60 + 30 * rng.random()).model_dump(),
                        "usage": Usage(total_tokens=rng.randint(10_000, 20_000),
                                       cost_usd=0.1).model_dump()}) + b"\n"
                    size += len(line)
                    fh.write(line)
    return size


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verified", type=Path, default=None,
                        help="SWE-bench Verified parquet, for real test lists")
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep", type=Path, default=None, help="write the folders here")
    args = parser.parse_args()
    rng = random.Random(7)
    root = args.keep or Path(tempfile.mkdtemp(prefix="proctor-analysis-bench-"))
    lists = test_lists(args.verified, args.tasks, rng)
    started = time.perf_counter()
    sizes = [write_agent(root / f"agent-{a}", a, lists, args.repeats, rng)
             for a in range(args.agents)]
    lines = args.agents * args.tasks * len(VARIANTS) * args.repeats
    print(f"wrote {lines} results ({sum(sizes) / 1e6:.0f} MB, {sum(sizes) / lines / 1e3:.1f} KB "
          f"a line) in {time.perf_counter() - started:.1f} s")
    before = peak_mb()
    marks = [(time.perf_counter(), time.process_time())]
    runs = load_agents([root / f"agent-{a}" for a in range(args.agents)])
    marks.append((time.perf_counter(), time.process_time()))
    found = compute(runs)
    marks.append((time.perf_counter(), time.process_time()))
    write(found, root / "analysis")
    marks.append((time.perf_counter(), time.process_time()))

    def took(a: int, b: int) -> str:
        return (f"{marks[b][0] - marks[a][0]:.2f} s wall, {marks[b][1] - marks[a][1]:.2f} s "
                f"CPU")

    print(f"load:    {took(0, 1)}")
    print(f"compute: {took(1, 2)}  ({len(found.comparisons)} paired comparisons)")
    print(f"write:   {took(2, 3)}  (CSVs, PNGs, report)")
    print(f"analysis (compute + write): {took(1, 3)}  (target < 5 s)")
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"peak memory: {peak_mb():.0f} MB (process; {before:.0f} MB before loading)")
    print(f"folders in {root}")


if __name__ == "__main__":
    main()
