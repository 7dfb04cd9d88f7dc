"""The embedded engine's figures, on the demo dataset with real A2A agents on loopback.

* overhead per item, in-process: wall time minus the eval script's own time minus
  the agent's time (target: median under 150 ms);
* the wall time of `proctor demo` (four reference agents x every demo task);
* the speed-up from maxConcurrentRows 1 to 2 (oracle agent).

    python benchmarks/engine.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from proctor.agents.server import start_reference_agent
from proctor.cli.demo import demo_manifests, run_demo
from proctor.local.engine import run_evaluation
from proctor.results import ResultsFolder


def timed_run(kind: str, out: Path, rows: int) -> tuple[float, list[float]]:
    """Wall time of one evaluation, and each item's engine overhead."""
    with start_reference_agent(kind) as server:
        evaluation, agent = demo_manifests(kind, server.url, rows)
        started = time.perf_counter()
        run_evaluation(evaluation, out, progress=False, agents=[agent])
        wall = time.perf_counter() - started
    overheads = [r.timings.total_seconds - (r.timings.eval_seconds or 0)
                 - (r.timings.solve_seconds or 0) for r in ResultsFolder(out).load()]
    return wall, overheads


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        timed_run("oracle", root / "warm-up", 2)  # first clones and imports are not per item
        one, overheads = timed_run("oracle", root / "c1", 1)
        two, more = timed_run("oracle", root / "c2", 2)
        ms = sorted(1000 * v for v in overheads + more)
        print(f"engine overhead per item: median {statistics.median(ms):.0f} ms, "
              f"p90 {ms[int(0.9 * (len(ms) - 1))]:.0f} ms over {len(ms)} items "
              f"(target: median < 150 ms)")
        print(f"maxConcurrentRows 1: {one:.1f} s, 2: {two:.1f} s, speed-up x{one / two:.2f}")
        started = time.perf_counter()
        run_demo(root / "demo", progress=False)
        print(f"proctor demo (4 agents x 10 tasks): {time.perf_counter() - started:.1f} s "
              f"(target: under 120 s on 2 cores)")


if __name__ == "__main__":
    main()
