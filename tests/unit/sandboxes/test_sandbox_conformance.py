"""The contract of a sandbox (`proctor.sandboxes.choose.Sandbox`), run on every one.

Each test runs the real steps (write the task and patch, the sandbox's test step, the
grade step) on the demo dataset's tasks, once per sandbox: the process sandbox always,
Docker where a daemon answers (skipped otherwise, unless PROCTOR_REQUIRE_DOCKER=1, as in
tests/unit/sandboxes/test_docker_sandbox.py). A new sandbox joins by adding itself to SANDBOXES.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from proctor.core.exits import Interrupted
from proctor.core.model import ErrorKind, Instance, Outcome, RunResult, WorkItem
from proctor.core.result_files import RESULT_FILE
from proctor.datasets import demo
from proctor.runner.grade import grade_step
from proctor.runner.workdir import (
    TEST_STEP_OUTPUTS,
    WorkDir,
    write_patch,
    write_task,
    write_test_step,
)
from proctor.sandboxes.choose import Sandbox
from proctor.sandboxes.process import ProcessSandbox

pytestmark = pytest.mark.slow
SANDBOXES = ["process", pytest.param("docker", marks=pytest.mark.docker)]
UNAPPLIABLE = ("diff --git a/no_such_module.py b/no_such_module.py\n"
               "--- a/no_such_module.py\n+++ b/no_such_module.py\n"
               "@@ -1 +1 @@\n-old line\n+new line\n")


@dataclass
class Subject:
    """A sandbox under test, and what it left behind (containers, for Docker)."""

    sandbox: Sandbox
    leftovers: Callable[[], list[str]]


@pytest.fixture(params=SANDBOXES)
def subject(request) -> Iterator[Subject]:
    if request.param == "process":
        yield Subject(ProcessSandbox(), lambda: [])
        return
    from proctor.core.labels import LABEL_EVALUATION
    from proctor.sandboxes import docker as ds

    client = request.getfixturevalue("docker_client")
    label = f"conformance-{uuid.uuid4().hex[:8]}"
    sandbox = ds.DockerSandbox(client, pull="never", labels={LABEL_EVALUATION: label})

    def containers() -> list[str]:
        return [c.name for c in client.containers.list(
            all=True, filters={"label": f"{LABEL_EVALUATION}={label}"})]

    yield Subject(sandbox, containers)
    sandbox.stop_all()


def _instance(index: int = 0) -> Instance:
    return Instance.model_validate(demo.load_rows()[index])


def _work(folder: Path, instance: Instance, patch: str, time_limit: int = 120,
          eval_script: str | None = None) -> WorkDir:
    """A work folder ready for the test step, as the engine and `runner solve` leave it."""
    work = WorkDir(folder)
    write_task(work, instance, WorkItem(id=uuid.uuid4().hex, instance_id=instance.instance_id))
    write_patch(work, patch)
    write_test_step(work, instance, time_limit, test_without_patch=not patch)
    if eval_script is not None:
        (work / "eval.sh").write_text(eval_script)
    return work


def _run(subject: Subject, work: WorkDir, time_limit: int = 120) -> RunResult:
    run = subject.sandbox.run_test_step(work, work.instance(), time_limit)
    return grade_step(work, network_isolated=run.network_isolated)


@pytest.mark.parametrize("index", [0, 1])
def test_the_gold_patch_resolves_and_the_empty_one_is_a_no_op(subject, tmp_path, index):
    instance = _instance(index)
    gold = _run(subject, _work(tmp_path / "gold", instance, instance.patch))
    assert gold.outcome == Outcome.RESOLVED, gold.error_message
    assert gold.FAIL_TO_PASS.failure == [] and gold.FAIL_TO_PASS.success
    empty = _run(subject, _work(tmp_path / "empty", instance, ""))
    assert empty.outcome == Outcome.NO_OP, empty.error_message
    assert empty.FAIL_TO_PASS.success == [] and empty.FAIL_TO_PASS.failure
    # The grade step kept what it returned.
    kept = RunResult.model_validate_json((tmp_path / "gold" / RESULT_FILE).read_text())
    assert kept == gold
    assert subject.leftovers() == []


def test_a_patch_that_does_not_apply_is_graded_so(subject, tmp_path):
    work = _work(tmp_path, _instance(), UNAPPLIABLE)
    result = _run(subject, work)
    assert result.outcome == Outcome.NO_OP and result.error_message == "patch did not apply"
    assert not result.patch.applied and result.tests_ran is False
    assert (work.read("apply_method") or "").strip() == "none"


def test_a_test_step_past_its_limit_is_a_timeout(subject, tmp_path):
    instance = _instance()
    token = f"600.{uuid.uuid4().int % 10**9:09d}"  # a sleep no other process runs
    work = _work(tmp_path, instance, instance.patch, time_limit=2,
                 eval_script=f"echo started; sleep {token}; echo slept\n")
    result = _run(subject, work, time_limit=2)
    assert result.outcome == Outcome.ERROR and result.error_kind == ErrorKind.TIMEOUT, \
        result.error_message
    # Killed at its limit, not after the sleep: the script never got past it, and its
    # sleep is gone (how long the kill takes: benchmarks/sandbox_overhead.py).
    output = work.read("test_output.txt") or ""
    assert "started" in output and "slept" not in output, output
    assert _wait_for(lambda: not _processes_with(token), 10), _processes_with(token)
    assert subject.leftovers() == []


def test_only_regular_files_come_back(subject, tmp_path):
    # The eval script turns outputs beside it (ones run.sh does not write after it) into
    # a link to a file outside and a folder.
    instance = _instance()
    script = ('W="$(dirname "$0")"\n'
              'rm -f "$W/apply_method" && ln -s /etc/passwd "$W/apply_method"\n'
              'mkdir "$W/timed_out"\n'
              'echo done\n')
    work = _work(tmp_path, instance, instance.patch, eval_script=script)
    _run(subject, work)
    for name in TEST_STEP_OUTPUTS:
        path = work / name
        assert not path.is_symlink(), name
        assert not path.exists() or path.is_file(), name
    assert "root:" not in (work.read("apply_method") or "")


def test_nothing_of_one_item_is_left_for_the_next(subject, tmp_path):
    instance = _instance()
    token = uuid.uuid4().hex
    leave = (f'W="$(dirname "$0")"\n'
             f'touch "$TESTBED/left-{token}" "$HOME/left-{token}" '
             f'"${{TMPDIR:-/tmp}}/left-{token}" "$W/left-{token}"\n'
             f'echo changed >> "$TESTBED/$(git -C "$TESTBED" ls-files | head -n1)"\n')
    look = (f'W="$(dirname "$0")"\n'
            f'for f in "$TESTBED/left-{token}" "$HOME/left-{token}" '
            f'"${{TMPDIR:-/tmp}}/left-{token}" "$W/left-{token}"; do\n'
            f'  [ -e "$f" ] && echo "LEFT $f"\ndone\n'
            f'git -C "$TESTBED" status --porcelain | sed "s/^/CHANGED /"\n'
            f'echo looked\n')
    _run(subject, _work(tmp_path / "first", instance, "", eval_script=leave))
    second = _work(tmp_path / "second", instance, "", eval_script=look)
    _run(subject, second)
    log = second.read("test_output.txt") or ""
    assert "looked" in log, log
    assert "LEFT" not in log and "CHANGED" not in log, log
    assert not (tmp_path / "first" / f"left-{token}").exists()


def _processes_with(token: str) -> list[int]:
    """Processes on this machine (a container's too: the same kernel) whose command line
    holds `token`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue  # it ended meanwhile
    return found


def _wait_for(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


def _sleeping_step(tmp_path: Path) -> tuple[WorkDir, Instance, str]:
    """A test step whose eval script sleeps ten minutes, and the token its sleep names."""
    instance = _instance()
    token = f"600.{uuid.uuid4().int % 10**9:09d}"  # a sleep no other process runs
    work = _work(tmp_path, instance, instance.patch, time_limit=600,
                 eval_script=f"sleep {token}\n")
    return work, instance, token


def test_stop_all_ends_a_running_test_step_and_leaves_nothing_running(subject, tmp_path):
    work, instance, token = _sleeping_step(tmp_path)
    raised: list[Interrupted] = []

    def test_step() -> None:
        try:
            subject.sandbox.run_test_step(work, instance, 600)
        except Interrupted as exc:
            raised.append(exc)

    thread = threading.Thread(target=test_step)
    thread.start()
    try:
        assert _wait_for(lambda: bool(_processes_with(token)), 120), "the step never started"
    finally:  # as the engine stops a run (Ctrl-C): stop_all, from another thread
        subject.sandbox.stop_all()
        thread.join(60)  # the step would sleep 600 s: ended by stop_all, or not at all
    assert not thread.is_alive() and raised, "the stopped test step did not raise Interrupted"
    assert _wait_for(lambda: not _processes_with(token), 10), _processes_with(token)
    assert subject.leftovers() == []


def test_a_test_step_started_after_stop_all_runs_nothing(subject, tmp_path):
    work, instance, token = _sleeping_step(tmp_path)
    subject.sandbox.stop_all()
    with pytest.raises(Interrupted):
        subject.sandbox.run_test_step(work, instance, 600)
    assert not _processes_with(token)
    assert work.read("eval_exit") is None and work.read("test_output.txt") is None
    assert subject.leftovers() == []
