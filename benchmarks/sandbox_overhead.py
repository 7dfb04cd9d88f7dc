"""Per-item overhead of the process sandbox, beyond the eval script's own run time.

Runs every demo task with its gold patch through the real test step (fresh
checkout, apply chain, eval script, clean-up) and reports, per item, the test
step's wall time minus the eval script's own time (as run.sh clocks it).
Measured in-process. Target: median under 150 ms.

    python benchmarks/sandbox_overhead.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from proctor import demo
from proctor.dataset import to_instance
from proctor.model import WorkItem
from proctor.runner import sandbox
from proctor.runner.grade import eval_seconds
from proctor.runner.workdir import WorkDir, write_patch, write_task, write_test_step


def measure(rounds: int) -> list[float]:
    instances = [to_instance(r, i) for i, r in enumerate(demo.load_rows())]
    overheads = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(rounds):
            for inst in instances:
                work = WorkDir(Path(tmp) / f"{inst.instance_id}-{n}")
                write_task(work, inst, WorkItem(id="0" * 32, instance_id=inst.instance_id))
                write_patch(work, inst.patch)
                write_test_step(work, inst, 600)
                run = sandbox.run_test_step(work, inst, 600)
                assert run.error is None, run.error
                overheads.append(run.seconds - (eval_seconds(work) or 0.0))
    return overheads


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sandbox.network_wrapper()  # the one-off probe is not per-item cost
    values = sorted(measure(args.rounds))
    ms = [1000 * v for v in values]
    print(f"items: {len(ms)}  network isolated: {bool(sandbox.network_wrapper())}")
    print(f"sandbox overhead per item: median {statistics.median(ms):.0f} ms, "
          f"p90 {ms[int(0.9 * (len(ms) - 1))]:.0f} ms, max {ms[-1]:.0f} ms "
          f"(target: median < 150 ms)")


if __name__ == "__main__":
    main()
