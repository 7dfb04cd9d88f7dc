"""Real things the trust tests run against: slow and hanging A2A agents on loopback,
`proctor run` as a subprocess, and a look at the processes a run leaves behind.

The agents are the reference agents' own server with a delay (`SlowOracle`) or no answer
at all: a real agent cannot be made to take a given time, or to hang, on demand, and
what a run does then is what these tests are about."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from proctor.agents.kinds import Tasks, solver_for
from proctor.agents.server import (
    RunningServer,
    SolverExecutor,
    agent_card,
    build_app,
    start_in_thread,
)
from proctor.datasets import demo

NEVER = 3600.0


class SlowOracle(SolverExecutor):
    """The oracle agent, answering after `delay` seconds; counts the tasks it is sent."""

    def __init__(self, delay: float = 0.0):
        super().__init__(solver_for("oracle", Tasks.load()))
        self.delay, self.asked = delay, 0

    async def execute(self, context, event_queue) -> None:
        self.asked += 1
        await asyncio.sleep(self.delay)
        await super().execute(context, event_queue)


def start_agent(delay: float = 0.0) -> tuple[RunningServer, SlowOracle]:
    executor = SlowOracle(delay)
    return start_in_thread(lambda url: build_app(executor, agent_card("oracle", url))), executor


def agent_manifests(endpoint: str, rows: int, concurrent: int = 1) -> str:
    return f"""apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {{name: trust}}
spec:
  agentRef: {{name: slow}}
  dataset: {{name: proctor-demo, maxRows: {rows}}}
  maxConcurrentRows: {concurrent}
---
apiVersion: proctor.dev/v1alpha1
kind: AgentUnderTest
metadata: {{name: slow}}
spec:
  endpoint: {endpoint}
  requestTimeoutSeconds: 1800
"""


def gold_manifest(rows: int | str, dataset: str = demo.DATASET_NAME, concurrent: int = 2) -> str:
    return f"""apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {{name: trust-gold}}
spec:
  dataset: {{name: "{dataset}", maxRows: {rows}}}
  predictions: {{source: gold}}
  maxConcurrentRows: {concurrent}
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def start_run(manifest: Path, out: Path, *extra: str, **env: str) -> subprocess.Popen:
    """`proctor run` in a session of its own, as a terminal would start it."""
    return subprocess.Popen(
        [sys.executable, "-m", "proctor.cli.main", "run", "-q", "-f", str(manifest),
         "--output-dir", str(out), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, **env})


def wait_for(check, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(0.05)


def processes_naming(text: str) -> list[str]:
    """Command lines of live processes that mention `text` (zombies excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or entry.name == str(os.getpid()):
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(cmdline)
    return found


def long_eval_dataset(path: Path, marker: str) -> Path:
    """The first demo task, with an eval script that sleeps `marker` (e.g. `sleep 317`)."""
    row = dict(demo.load_rows()[0])
    row["eval_script"] = row["eval_script"].replace('cd "$TESTBED"\n',
                                                    f'cd "$TESTBED"\n{marker}\n', 1)
    path.write_text(json.dumps(row) + "\n")
    return path
