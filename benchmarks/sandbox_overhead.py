"""Per-item overhead of a sandbox, beyond the eval script's own run time.

Runs every demo task with its gold patch through the real test step (fresh
checkout, apply chain, eval script, clean-up) and reports, per item, the test
step's wall time minus the eval script's own time (as run.sh clocks it).
Measured in-process. Target (process sandbox): median under 150 ms.

With `--sandbox docker`, the same in the Docker sandbox on the demo images
(`proctor images build-demo` first): a container created, files copied in,
started, waited for, files copied out, removed. No target: it is for comparison.

Then the time a test step past its limit takes to end: an eval script that sleeps ten
minutes under a 2 s limit, killed at it (the sandbox conformance test checks that it is
killed, not how soon). Target: ended within a minute of its start.

    python benchmarks/sandbox_overhead.py [--rounds 3] [--sandbox docker]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from proctor.core.model import WorkItem
from proctor.datasets import demo, to_instance
from proctor.runner.grade import eval_seconds
from proctor.runner.workdir import WorkDir, write_patch, write_task, write_test_step
from proctor.sandboxes import docker as docker_sandbox
from proctor.sandboxes import process


def measure(rounds: int, run_test_step=None) -> list[float]:
    run_test_step = run_test_step or process.ProcessSandbox().run_test_step
    instances = [to_instance(r, i) for i, r in enumerate(demo.load_rows())]
    overheads = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(rounds):
            for inst in instances:
                work = WorkDir(Path(tmp) / f"{inst.instance_id}-{n}")
                write_task(work, inst, WorkItem(id="0" * 32, instance_id=inst.instance_id))
                write_patch(work, inst.patch)
                write_test_step(work, inst, 600)
                run = run_test_step(work, inst, 600)
                assert run.error is None, run.error
                overheads.append(run.seconds - (eval_seconds(work) or 0.0))
    return overheads


LIMIT = 2
"""The time limit of the test step that overruns it, in seconds."""


def past_the_limit(rounds: int, run_test_step=None) -> list[float]:
    """Seconds from the start of a test step whose eval script sleeps 600 s under a
    LIMIT-second limit to its end, once per round."""
    run_test_step = run_test_step or process.ProcessSandbox().run_test_step
    inst = to_instance(demo.load_rows()[0], 0)
    took = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(rounds):
            work = WorkDir(Path(tmp) / f"limit-{n}")
            write_task(work, inst, WorkItem(id="0" * 32, instance_id=inst.instance_id))
            write_patch(work, inst.patch)
            write_test_step(work, inst, LIMIT)
            (work / "eval.sh").write_text("echo started; sleep 600\n")
            started = time.perf_counter()
            run_test_step(work, inst, LIMIT)
            took.append(time.perf_counter() - started)
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sandbox", choices=("process", "docker"), default="process")
    args = parser.parse_args()
    if args.sandbox == "docker":
        client, problem = docker_sandbox.connect()
        if client is None:
            raise SystemExit(problem)
        run_test_step = docker_sandbox.DockerSandbox(client, pull="never").run_test_step
        isolated, target = "no (the daemon's default network)", ""
    else:
        process.network_wrapper()  # the one-off probe is not per-item cost
        run_test_step = process.ProcessSandbox().run_test_step
        isolated, target = str(bool(process.network_wrapper())), " (target: median < 150 ms)"
    values = sorted(measure(args.rounds, run_test_step))
    ms = [1000 * v for v in values]
    print(f"items: {len(ms)}  sandbox: {args.sandbox}  network isolated: {isolated}")
    print(f"sandbox overhead per item: median {statistics.median(ms):.0f} ms, "
          f"p90 {ms[int(0.9 * (len(ms) - 1))]:.0f} ms, max {ms[-1]:.0f} ms{target}")
    ended = sorted(past_the_limit(args.rounds, run_test_step))
    print(f"a test step past its {LIMIT} s limit (its script sleeps 600 s): ended after "
          f"median {statistics.median(ended):.1f} s, max {ended[-1]:.1f} s, "
          f"over {len(ended)} (target: < 60 s)")


if __name__ == "__main__":
    main()
