"""`proctor run` killed with SIGKILL mid-run loses nothing and redoes nothing finished."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from proctor.results import ResultsFolder
from support.paths import EXAMPLES


def start_run(out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "proctor.cli.main", "run", "-q", "-f",
         str(EXAMPLES / "demo-gold.yaml"), "--output-dir", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def lines(out: Path) -> list[bytes]:
    path = out / "results.jsonl"
    return path.read_bytes().splitlines(keepends=True) if path.exists() else []


def kill_after(proc: subprocess.Popen, out: Path, n_results: int) -> None:
    """SIGKILL the whole run (its eval scripts too) once n results are on disk."""
    deadline = time.monotonic() + 120
    while len(lines(out)) < n_results and proc.poll() is None:
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def finished_stamps(out: Path) -> dict[str, int]:
    """item id -> mtime of its result.json, for every result on disk."""
    folder = ResultsFolder(out)
    return {r.item_id: (folder.root / "items" / r.instance_id / r.variant_id / str(r.repeat)
                        / "result.json").stat().st_mtime_ns for r in folder.load()}


def test_sigkill_mid_item_then_resume(tmp_path):
    out = tmp_path / "run"
    first = start_run(out)
    kill_after(first, out, 3)
    before = finished_stamps(out)
    assert 3 <= len(before) < 10, "the kill should land mid-run"
    # A second kill, now also tearing the last line as a kill mid-write would.
    second = start_run(out)
    kill_after(second, out, len(before) + 2)
    middle = finished_stamps(out)
    with open(out / "results.jsonl", "ab") as fh:
        fh.write(b'{"schema_version": 1, "item_id": "torn')
    final = start_run(out)
    assert final.wait(timeout=300) == 0, final.stderr.read().decode()
    results = ResultsFolder(out).load()
    ids = [r.item_id for r in results]
    assert len(ids) == len(set(ids)) == 10, "every item exactly once"
    assert len(lines(out)) == 10, "no duplicate or torn lines remain"
    after = finished_stamps(out)
    assert all(after[i] == stamp for i, stamp in middle.items()), "finished items were redone"
    assert all(after[i] == stamp for i, stamp in before.items())
    assert {r.outcome.value for r in results} == {"resolved"}
