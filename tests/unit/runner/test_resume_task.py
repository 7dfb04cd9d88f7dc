"""A solve step killed while it waits (a preempted pod) is followed up by its task id:
`proctor runner solve --resume-task ID` gets the agent's answer without sending the
item again. Real processes, a real reference agent on loopback, SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from proctor.agents.answers import TaskRequest
from proctor.agents.kinds import Tasks, solver_for
from proctor.agents.server import SolverExecutor, agent_card, build_app, start_in_thread
from proctor.cli.main import main
from proctor.core.model import WorkItem
from proctor.datasets import demo, to_instance
from proctor.runner.solve import TASK_LINE, patch_from_log, task_id_from_log, task_line

ROW = demo.load_rows()[0]
HOLD_LIMIT_S = 60


class HeldAgent:
    """The oracle agent, counting the tasks it is given; each answer waits for `release`,
    so that a test decides whether the client is still there when it comes."""

    def __init__(self, streaming: bool, request_log: Path):
        self.calls = 0
        self.release = threading.Event()
        self.request_log = request_log
        oracle = solver_for("oracle", Tasks.load())

        def held(request: TaskRequest):
            self.calls += 1
            self.release.wait(HOLD_LIMIT_S)
            return oracle(request)

        executor = SolverExecutor(held, request_log=request_log)
        self.server = start_in_thread(
            lambda url: build_app(executor, agent_card("oracle", url, streaming)))
        self.url = self.server.url

    def task_ids(self) -> list[str]:
        """The agent's ids of the tasks it was sent, from its request log."""
        if not self.request_log.exists():
            return []
        return [json.loads(line)["task_id"] for line in self.request_log.read_text().splitlines()]


@pytest.fixture
def start_agent(tmp_path):
    """Start a held agent, streaming or not; stopped (and let go) at the test's end."""
    started: list[HeldAgent] = []

    def start(streaming: bool) -> HeldAgent:
        started.append(HeldAgent(streaming, tmp_path / f"requests-{len(started)}.jsonl"))
        return started[-1]

    yield start
    for held in started:
        held.release.set()
        held.server.stop()


def task_dir(tmp_path: Path) -> Path:
    task = tmp_path / "task"
    task.mkdir(exist_ok=True)
    instance = to_instance(ROW, 0)
    (task / "instance.json").write_text(instance.model_dump_json())
    (task / "item.json").write_text(
        WorkItem(id="c" * 32, instance_id=instance.instance_id).model_dump_json())
    return task


def solve_args(tmp_path: Path, work: str, url: str, *more: str) -> list[str]:
    return ["runner", "solve", "--work-dir", str(tmp_path / work), "--task-dir",
            str(task_dir(tmp_path)), "--endpoint", url, *more]


def start_solve(tmp_path: Path, url: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "proctor.cli.main",
                             *solve_args(tmp_path, "first", url)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def read_until_task_line(proc: subprocess.Popen) -> str:
    """The solve step's stderr up to and including its task line (or to its end)."""
    seen = []
    assert proc.stderr is not None
    for line in proc.stderr:
        seen.append(line)
        if line.startswith(TASK_LINE):
            break
    return "".join(seen)


def kill(proc: subprocess.Popen) -> None:
    """As a preempted pod dies: SIGKILL, no goodbye to the agent."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def wait_for(condition, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def resume_after_kill(agent: HeldAgent, tmp_path: Path, task_id: str, capsys) -> dict:
    """`--resume-task` in a fresh work folder, the agent answering a second into it."""
    threading.Timer(1.0, agent.release.set).start()
    capsys.readouterr()
    assert main(solve_args(tmp_path, "second", agent.url, "--resume-task", task_id)) == 0
    out, err = capsys.readouterr()
    assert patch_from_log(out) == ROW["patch"]
    assert task_id_from_log(err) == task_id  # a resumed attempt may be killed too
    work = tmp_path / "second"
    assert (work / "patch.diff").read_text() == ROW["patch"]
    assert (work / "transcript.json.gz").exists() and (work / "run.sh").exists()
    return json.loads((work / "solve.json").read_text())


def test_a_solve_step_killed_after_naming_its_task_is_resumed_by_its_id(start_agent, tmp_path,
                                                                        capsys):
    agent = start_agent(True)
    proc = start_solve(tmp_path, agent.url)
    try:
        log = read_until_task_line(proc)
    finally:
        kill(proc)
    task_id = task_id_from_log(log)
    assert task_id is not None, log
    assert agent.task_ids() == [task_id] and agent.calls == 1
    assert not (tmp_path / "first" / "solve.json").exists()  # killed before the answer
    solve = resume_after_kill(agent, tmp_path, task_id, capsys)
    assert (solve["state"], solve["error_kind"], solve["resumed_task"]) == (
        "completed", None, task_id)
    assert agent.calls == 1 and agent.task_ids() == [task_id]  # sent once, in all


def test_a_task_whose_blocking_send_was_killed_is_kept_by_the_agent(start_agent, tmp_path,
                                                                    capsys):
    """A non-streaming agent names its task only in its answer, so a step killed while
    it waits has logged no id; the agent still finishes and keeps the task (a2a-sdk), so
    the id, when known some other way (here: the agent's own log), gets the answer."""
    agent = start_agent(False)
    proc = start_solve(tmp_path, agent.url)
    try:
        wait_for(lambda: agent.calls == 1)
    finally:
        kill(proc)
    log = proc.stderr.read() if proc.stderr else ""
    assert task_id_from_log(log) is None, log
    [task_id] = agent.task_ids()
    solve = resume_after_kill(agent, tmp_path, task_id, capsys)
    assert (solve["state"], solve["resumed_task"]) == ("completed", task_id)
    assert agent.calls == 1


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "blocking"])
def test_a_finished_solve_logs_its_task_id(start_agent, tmp_path, capsys, streaming):
    agent = start_agent(streaming)
    agent.release.set()
    assert main(solve_args(tmp_path, "work", agent.url)) == 0
    out, err = capsys.readouterr()
    assert patch_from_log(out) == ROW["patch"]
    assert task_id_from_log(err) == agent.task_ids()[0]
    assert "resumed_task" not in json.loads((tmp_path / "work" / "solve.json").read_text())


def test_resuming_a_task_the_agent_does_not_know_is_an_agent_error_naming_it(start_agent,
                                                                             tmp_path, capsys):
    agent = start_agent(True)
    assert main(solve_args(tmp_path, "work", agent.url, "--resume-task", "no-such-task")) == 0
    assert main(["runner", "grade", "--work-dir", str(tmp_path / "work")]) == 0
    out = capsys.readouterr().out
    assert patch_from_log(out) == ""
    solve = json.loads((tmp_path / "work" / "solve.json").read_text())
    assert solve["error_kind"] == "agent" and solve["resumed_task"] == "no-such-task"
    assert "does not know the task no-such-task" in solve["error"]
    graded = json.loads(out.splitlines()[-1])
    assert graded["outcome"] == "error" and "no-such-task" in graded["error_message"]
    assert agent.calls == 0  # nothing was sent


def test_task_id_from_log_reads_the_last_task_line_only():
    summary = "solve: agent task (streaming); task abc; state completed; 3 events"
    assert task_id_from_log(summary) is None  # an agent named "task"
    assert task_id_from_log("solve: agent task \nsolve: agent task a b\n") is None
    log = "\n".join(["starting", task_line("first-1"), summary, task_line("9f0e:2"), "x"])
    assert task_id_from_log(log) == "9f0e:2"
    assert task_id_from_log(task_line("id with spaces")) is None  # sent again instead
