"""One cancellation scope per run (`local/scope.py`): Ctrl-C ends the run's items once,
a second Ctrl-C quits at once, and one Ctrl-C delivered twice (as `timeout -s INT`
delivers it: to the process, then to its group) is not a second one. Each case runs a
real process sent real signals; the embedded engine itself under Ctrl-C is in
test_trust_run.py."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from proctor.agents.server import start_reference_agent
from proctor.cli.demo import demo_manifests
from proctor.core.model import RunResult
from proctor.local.engine import run_evaluation
from proctor.local.scope import REPEAT_S, same_keypress
from support.paths import BENCHMARKS

# The run these cases signal (its one item waits at the edge), shared with the benchmark
# that times how soon it ends.
sys.path.insert(0, str(BENCHMARKS))
from engine import SCOPE_RUN


def start(tmp_path: Path, mode: str) -> subprocess.Popen:
    script = tmp_path / "run.py"
    script.write_text(SCOPE_RUN)
    proc = subprocess.Popen([sys.executable, str(script), mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == "in flight\n"
    return proc


def ended(proc: subprocess.Popen) -> tuple[int, str, str]:
    """Exit code, what the run printed after "in flight" (how its edge ended, if it did)
    and stderr; the edge would take a minute by itself (how soon the run ends:
    `python benchmarks/engine.py stop`)."""
    try:
        code = proc.wait(timeout=30)
    finally:
        proc.kill()
    assert proc.stdout is not None and proc.stderr is not None
    return code, proc.stdout.read(), proc.stderr.read()


def test_a_repeat_within_the_window_is_the_same_keypress():
    assert same_keypress(10.0, 10.0 + REPEAT_S / 2)
    assert not same_keypress(10.0, 10.0 + REPEAT_S + 0.01)
    assert not same_keypress(None, 10.0)


def test_ctrl_c_stops_the_edge_and_the_run_raises_keyboard_interrupt(tmp_path):
    proc = start(tmp_path, "obeys")
    os.killpg(proc.pid, signal.SIGINT)
    code, out, err = ended(proc)
    assert code == 130 and "interrupted: stopping 0 items in flight" in err, err
    assert "again" not in err.replace("Ctrl-C again", "")
    assert out == "edge: stopped\n", "the edge ended on the stop, not on its own wait"


@pytest.mark.parametrize("mode", ["obeys", "lingers"])
def test_one_ctrl_c_delivered_twice_is_not_a_second_one(tmp_path, mode):
    """The repeat comes while the run stops (`lingers`) or after it stopped (`obeys`)."""
    proc = start(tmp_path, mode)
    os.kill(proc.pid, signal.SIGINT)  # what `timeout -s INT` does: the process...
    # (a moment apart, so that both are delivered: at once the kernel may merge them)
    time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # ... then its whole process group
    code, _, err = ended(proc)
    assert code == 130 and "stopped" in err, err
    assert "interrupted again" not in err


def test_a_second_ctrl_c_while_stopping_quits_at_once(tmp_path):
    proc = start(tmp_path, "ignores")  # its edge does not end on stop: the run cannot
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(REPEAT_S + 0.3)
    assert proc.poll() is None, "the first Ctrl-C waits for the edge"
    os.killpg(proc.pid, signal.SIGINT)
    code, out, err = ended(proc)
    assert code == 130 and "interrupted again: quitting now" in err, err
    assert "stopped" not in err
    assert out == "", "the run quit while its edge still slept, not once it had ended"


def test_a_run_has_one_event_loop_and_calls_back_on_its_callers_thread(tmp_path):
    seen: list[tuple[int, int]] = []

    def on_result(result: RunResult) -> None:
        seen.append((id(asyncio.get_running_loop()), threading.get_ident()))

    with start_reference_agent("oracle") as server:
        evaluation, agent = demo_manifests("oracle", server.url, 2)
        summary = run_evaluation(evaluation, tmp_path / "out", progress=False,
                                 agents=[agent], on_result=on_result)
    assert len(seen) == summary.items > 1
    assert len({loop for loop, _ in seen}) == 1
    assert {thread for _, thread in seen} == {threading.get_ident()}
