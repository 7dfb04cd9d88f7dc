"""The embedded engine's figures, on the demo dataset with real A2A agents on loopback.

* overhead per item, in-process: wall time minus the eval script's own time minus
  the agent's time (target: median under 150 ms);
* the wall time of `proctor demo` (four reference agents x every demo task);
* the speed-up from maxConcurrentRows 1 to 2 (oracle agent);
* the time to stop in flight: `proctor run` as a process with items in flight (requests
  to an agent on loopback that never answers; an eval script that sleeps), sent SIGINT
  as a terminal's Ctrl-C would: seconds from the signal to its exit (130);
* the same for one run's cancellation scope (`local/scope.py`) on its own: a run whose one
  item waits at the edge (`SCOPE_RUN`, which tests/unit/local/test_run_scope.py runs too),
  from Ctrl-C to its exit when the edge ends on the stop, and from a second Ctrl-C to its
  exit when the edge ignores the stop (target: each under 10 s; the edge alone would take
  a minute).

    python benchmarks/engine.py          # all of them
    python benchmarks/engine.py stop     # only the times to stop in flight
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

from waits import until

from proctor.agents.kinds import Tasks, solver_for
from proctor.agents.server import (
    SolverExecutor,
    agent_card,
    build_app,
    start_in_thread,
    start_reference_agent,
)
from proctor.cli.demo import demo_manifests, run_demo
from proctor.datasets import demo
from proctor.local.engine import run_evaluation
from proctor.local.scope import REPEAT_S
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


class Silent(SolverExecutor):
    """An agent that takes every task and never answers; counts the tasks it was sent."""

    def __init__(self) -> None:
        super().__init__(solver_for("oracle", Tasks.load()))
        self.asked = 0

    async def execute(self, context, event_queue) -> None:
        self.asked += 1
        await asyncio.sleep(3600)


def _stop_time(manifest: str, root: Path, ready: Callable[[], bool]) -> tuple[float, float]:
    """Seconds from SIGINT to the last line of a `proctor run` with items in flight (its
    items stopped, its partial summary written), and to its exit."""
    (root / "ev.yaml").write_text(manifest)
    proc = subprocess.Popen([sys.executable, "-m", "proctor.cli.main", "run", "-q", "-f",
                             str(root / "ev.yaml"), "--output-dir", str(root / "out")],
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines: list[tuple[float, str]] = []
    err = proc.stderr
    assert err is not None
    reader = threading.Thread(target=lambda: lines.extend(
        (time.perf_counter(), line) for line in err), daemon=True)
    reader.start()
    try:
        until(lambda: ready() or proc.poll() is not None, "items in flight")
        if proc.poll() is not None:
            reader.join(5)
            raise SystemExit(f"the run ended by itself ({proc.returncode}): "
                             f"{''.join(line for _, line in lines)[-500:]}")
        time.sleep(0.3)  # each item well inside its wait, not at its start
        sent = time.perf_counter()
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole group
        code = proc.wait(timeout=60)
        exited = time.perf_counter() - sent
    finally:
        proc.kill()
    reader.join(5)
    if code != 130:
        raise SystemExit(f"the run exited {code}, not 130: "
                         f"{''.join(line for _, line in lines)[-500:]}")
    return lines[-1][0] - sent, exited


def _sleeping_row(path: Path) -> Path:
    """The first demo task with an eval script that sleeps (a long test step)."""
    row = dict(demo.load_rows()[0])
    row["eval_script"] = row["eval_script"].replace('cd "$TESTBED"\n',
                                                    'cd "$TESTBED"\nsleep 293\n', 1)
    path.write_text(json.dumps(row) + "\n")
    return path


def _sleeping(marker: str) -> bool:
    """Whether a process running `marker` is alive."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes() \
                    .replace(b"\0", b" "):
                return True
        except OSError:
            continue
    return False


def stop_figures(root: Path, rounds: int = 5) -> None:
    """The time to stop in flight, for each kind of wait, median of `rounds`."""
    agent = Silent()
    with start_in_thread(lambda url: build_app(agent, agent_card("oracle", url))) as server:
        waits = []
        for n in range(rounds):
            asked = agent.asked
            manifest = f"""apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {{name: stop-agent}}
spec:
  agentRef: {{name: silent}}
  dataset: {{name: proctor-demo, maxRows: 3}}
  maxConcurrentRows: 2
---
apiVersion: proctor.dev/v1alpha1
kind: AgentUnderTest
metadata: {{name: silent}}
spec: {{endpoint: "{server.url}", requestTimeoutSeconds: 1800}}
"""
            (root / f"a{n}").mkdir()
            waits.append(_stop_time(manifest, root / f"a{n}",
                                    lambda asked=asked: agent.asked >= asked + 2))
    rows = _sleeping_row(root / "rows.jsonl")
    scripts = []
    for n in range(rounds):
        manifest = f"""apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {{name: stop-test}}
spec:
  dataset: {{name: "{rows}"}}
  predictions: {{source: gold}}
"""
        (root / f"t{n}").mkdir()
        scripts.append(_stop_time(manifest, root / f"t{n}", lambda: _sleeping("sleep 293")))
    for what, times in (("2 agent requests", waits), ("1 test step", scripts)):
        print(f"time to stop in flight, {what} (SIGINT to, median of {rounds}): its last "
              f"line {1000 * statistics.median(t[0] for t in times):.0f} ms, its exit (130) "
              f"{1000 * statistics.median(t[1] for t in times):.0f} ms")


# A run whose one item waits in a thread at the edge: until `stop` (`obeys`), until
# `stop` and then a while, as a container's removal takes (`lingers`), or a minute
# whatever happens (`ignores`). It prints "in flight" once the thread runs, and how the
# edge ended, when it does.
SCOPE_RUN = textwrap.dedent("""
    import asyncio, sys, threading, time
    from proctor.local.scope import RunScope

    mode = sys.argv[1]
    stop = threading.Event()

    def edge():
        print("in flight", flush=True)
        if mode == "ignores":
            time.sleep(60)
        stopped = stop.wait(60)
        print("edge: stopped" if stopped else "edge: timed out", flush=True)
        time.sleep(0.5 if mode == "lingers" else 0)

    async def run():
        scope = RunScope(stop)
        with scope.owning(asyncio.current_task()):
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(scope.at_edge(edge))
            except asyncio.CancelledError:
                raise scope.why from None

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        time.sleep(0.3)  # what a command does after its run: its last lines, say
        print("stopped", file=sys.stderr)
        sys.exit(130)
""")


def _scope_exit(root: Path, mode: str, second: bool) -> float:
    """Seconds from the Ctrl-C that should end a SCOPE_RUN in `mode` (the first, or with
    `second` the second, sent once the first's window has passed) to its exit (130)."""
    script = root / "scope_run.py"
    script.write_text(SCOPE_RUN)
    proc = subprocess.Popen([sys.executable, str(script), mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline() != "in flight\n":
            raise SystemExit(f"the scope run did not start: {proc.stderr.read()[-500:]}")
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole group
        if second:
            time.sleep(REPEAT_S + 0.3)  # past the window in which it is the same keypress
            os.killpg(proc.pid, signal.SIGINT)
        sent = time.perf_counter()
        code = proc.wait(timeout=120)
        took = time.perf_counter() - sent
    finally:
        proc.kill()
    if code != 130:
        raise SystemExit(f"the scope run exited {code}, not 130")
    return took


def scope_figures(root: Path, rounds: int = 5) -> None:
    """The time a run's cancellation scope takes to end, median of `rounds`."""
    for what, mode, second in (("Ctrl-C, the edge ending on the stop", "obeys", False),
                               ("a second Ctrl-C, the edge ignoring the stop", "ignores",
                                True)):
        times = [_scope_exit(root, mode, second) for _ in range(rounds)]
        print(f"one run's scope: {what}, to its exit (130) (median of {rounds}): "
              f"{1000 * statistics.median(times):.0f} ms, max {1000 * max(times):.0f} ms "
              f"(target: under 10 s)")


def main() -> None:
    if sys.argv[1:] == ["stop"]:
        with tempfile.TemporaryDirectory() as tmp:
            stop_figures(Path(tmp))
            scope_figures(Path(tmp))
        return
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
        (root / "stop").mkdir()
        stop_figures(root / "stop")
        scope_figures(root / "stop")


if __name__ == "__main__":
    main()
