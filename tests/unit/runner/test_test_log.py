"""The test log on a cluster: the pod's test, test-log and grade steps, run here as real
processes over real folders and a real named pipe, with an eval script that tries to
rewrite everything the grade step reads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proctor.k8s.children import manifests as m
from proctor.runner import testlog
from proctor.runner.workdir import RUN_SCRIPT, TEST_STEP_INPUTS, WorkDir

# What the patch's code could do once the eval script runs it, as root in a pod: take back
# what it printed, forge the log where the test step writes, and point an output at a file
# of its choosing. (The work folder is mounted read-only in the pod, which the manifests'
# tests check; here it is not.)
HOSTILE_EVAL = """\
echo "FAILED tests/test_a.py::test_fix"
echo "== 1 failed in 0.1s =="
: > "$PROCTOR_TEST_LOG"
echo "PASSED tests/test_a.py::test_fix" > "$TEST_DIR/test_output.txt"
ln -s /etc/hostname "$TEST_DIR/eval_clock"
echo "PASSED tests/test_a.py::test_fix (printed after)"
"""


@pytest.fixture
def pod(tmp_path: Path):
    """A pod's volumes, and the test-log step running as `proctor runner keep-log`."""
    dirs = {name: tmp_path / name for name in ("work", "test", "log")}
    for folder in dirs.values():
        folder.mkdir()
    (dirs["work"] / "run.sh").write_text(RUN_SCRIPT)
    (dirs["work"] / "eval.sh").write_text(HOSTILE_EVAL)
    (dirs["work"] / "instance.json").write_text("{}")
    pipe = dirs["test"] / "test_output.pipe"
    keeper = subprocess.Popen([sys.executable, "-m", "proctor.cli.main", "runner", "keep-log",
                               "--fifo", str(pipe), "--out", str(dirs["log"] / "test.log")])
    deadline = time.monotonic() + 30
    while not pipe.exists():  # the pod's startup probe: `test -p`
        assert time.monotonic() < deadline and keeper.poll() is None, "no pipe"
        time.sleep(0.05)
    yield dirs, pipe, keeper
    keeper.send_signal(signal.SIGTERM)
    assert keeper.wait(10) == 0  # stopped with the pod, without a complaint


def run_test_step(dirs: dict[str, Path], pipe: Path) -> subprocess.CompletedProcess:
    (dirs["work"] / "patch.diff").unlink(missing_ok=True)
    (dirs["work"] / "test_without_patch").write_text("")
    env = {**os.environ, "TEST_DIR": str(dirs["test"]), "PROCTOR_TEST_LOG": str(pipe),
           "TESTBED": str(dirs["work"])}
    return subprocess.run(["bash", "-c", m.TEST_SCRIPT, "test", str(dirs["work"]),
                           *TEST_STEP_INPUTS], env=env, capture_output=True, text=True,
                          timeout=60)


def test_the_grade_step_reads_what_the_eval_script_printed_not_what_it_rewrote(pod) -> None:
    dirs, pipe, _ = pod
    assert run_test_step(dirs, pipe).returncode == 0
    work = WorkDir(dirs["work"])
    assert testlog.collect(work, dirs["test"], dirs["log"] / "test.log") is None
    log = work.read("test_output.txt")
    # Printed lines stay; truncating the pipe takes nothing back; a later print is appended
    # (as on stdout), and the grade step's check of the runner's summary treats it.
    assert log == ("FAILED tests/test_a.py::test_fix\n== 1 failed in 0.1s ==\n"
                   "PASSED tests/test_a.py::test_fix (printed after)\n")
    assert work.read("eval_exit") == "0\n"
    assert not (work / "eval_clock").exists()  # a symbolic link is not brought back


def test_a_log_that_never_closed_is_an_error_not_a_pass(tmp_path: Path) -> None:
    test, log = tmp_path / "test", tmp_path / "log"
    for folder in (test, log, tmp_path / "work"):
        folder.mkdir()
    (test / "eval_exit").write_text("0\n")
    (log / "test.log").write_text("PASSED everything\n")  # no complete marker
    why = testlog.collect(WorkDir(tmp_path / "work"), test, log / "test.log",
                          wait_seconds=0.5)
    assert why and "not complete" in why
    assert not (tmp_path / "work" / "test_output.txt").exists()


def test_without_an_eval_run_no_log_is_expected(tmp_path: Path) -> None:
    test, work = tmp_path / "test", tmp_path / "work"
    test.mkdir(), work.mkdir()
    (test / "apply_method").write_text("none\n")
    assert testlog.collect(WorkDir(work), test, tmp_path / "absent.log", 0.1) is None
    assert (work / "apply_method").read_text() == "none\n"


def test_the_kept_log_is_bounded(tmp_path: Path) -> None:
    pipe, out = tmp_path / "pipe", tmp_path / "log.txt"
    os.mkfifo(pipe)
    writer = subprocess.Popen(["bash", "-c", f'printf "%0100d" 0 > "{pipe}"'])
    testlog.keep(pipe, out, limit=40)
    writer.wait(10)
    assert out.read_text().startswith("0" * 40 + "\n[proctor: 60 more bytes")
    assert (tmp_path / testlog.COMPLETE).read_text() == "100\n"
    testlog.keep(pipe, out, limit=40)  # restarted after it is complete: returns at once
