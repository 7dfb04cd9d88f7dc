"""Runs you can trust: no result lost, no agent asked twice, clear exits (issue 14).

Each test is named after the defect it covers, and runs the real thing: `proctor run`
(in process, or as a subprocess sent SIGINT), real A2A agents on loopback, real eval
scripts in the process sandbox.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from proctor.cli.main import main
from proctor.core.model import ErrorKind, Outcome
from proctor.results import ResultsFolder
from support.trust_support import (
    NEVER,
    agent_manifests,
    gold_manifest,
    long_eval_dataset,
    processes_naming,
    start_agent,
    start_run,
    wait_for,
    write,
)


def result_lines(out: Path) -> list[bytes]:
    path = out / "results.jsonl"
    return path.read_bytes().splitlines(keepends=True) if path.exists() else []


def stamps(out: Path) -> dict[str, int]:
    """item id -> mtime of its result.json."""
    return {r.item_id: (out / "items" / r.instance_id / r.variant_id / str(r.repeat) /
                        "result.json").stat().st_mtime_ns
            for r in ResultsFolder(out).load()}


def test_a_corrupt_middle_line_stops_the_run_and_leaves_the_file_as_it_was(tmp_path, capsys):
    manifest = write(tmp_path / "ev.yaml", gold_manifest(3))
    out = tmp_path / "out"
    assert main(["run", "-q", "-f", str(manifest), "--output-dir", str(out)]) == 0
    lines = result_lines(out)
    damaged = lines[0] + b'{"schema_version": 1, "item_id": "oops"}\n' + b"".join(lines[1:])
    (out / "results.jsonl").write_bytes(damaged)
    capsys.readouterr()
    code = main(["run", "-q", "-f", str(manifest), "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert code in (2, 3)
    assert (out / "results.jsonl").read_bytes() == damaged, "the file must stay as it was"
    assert "line 2" in err and len(err.strip().splitlines()) == 1


def _first_run_asking(tmp_path: Path, server, agent) -> tuple[Path, Path, subprocess.Popen]:
    """A `proctor run` of one item, started once the agent has been sent its task."""
    manifest = write(tmp_path / "ev.yaml", agent_manifests(server.url, rows=1))
    out = tmp_path / "out"
    first = start_run(manifest, out)
    wait_for(lambda: agent.asked == 1, "the first run to ask the agent")
    return manifest, out, first


def test_a_second_run_on_the_folder_is_refused_naming_the_first(tmp_path, capsys):
    server, agent = start_agent(delay=8)
    with server:
        manifest, out, first = _first_run_asking(tmp_path, server, agent)
        assert main(["run", "-q", "-f", str(manifest), "--output-dir", str(out)]) == 3
        assert first.poll() is None, "refused at once, not after the first run ended"
        err = capsys.readouterr().err
        assert f"pid {first.pid}" in err and socket.gethostname() in err
        assert first.wait(timeout=120) == 0, first.stderr.read()
    assert agent.asked == 1, "the agent was asked once for the one item"
    assert len(result_lines(out)) == 1


def test_a_killed_run_leaves_no_lock_behind(tmp_path):
    server, agent = start_agent(delay=2)
    with server:
        manifest, out, first = _first_run_asking(tmp_path, server, agent)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        assert f"pid {first.pid}" in (out / "run.lock").read_text()
        assert main(["run", "-q", "-f", str(manifest), "--output-dir", str(out)]) == 0
    assert len(result_lines(out)) == 1


def _mark(out: Path, item_id: str, kind: ErrorKind) -> None:
    """Rewrite one result as the error an earlier run would have recorded."""
    path = out / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        if row["item_id"] == item_id:
            row.update(outcome="error", error_kind=kind.value, tests_ran=False,
                       error_message=f"{kind.value} trouble")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_resume_retests_infra_and_sandbox_errors_without_asking_the_agent(tmp_path, capsys):
    server, agent = start_agent()
    with server:
        manifest = write(tmp_path / "ev.yaml", agent_manifests(server.url, rows=4))
        out = tmp_path / "out"
        run = ["run", "-q", "-f", str(manifest), "--output-dir", str(out)]
        assert main(run) == 0
        assert agent.asked == 4
        ids = [r.item_id for r in ResultsFolder(out).load()]
        for item_id, kind in zip(ids, (ErrorKind.SANDBOX, ErrorKind.INFRA, ErrorKind.AGENT,
                                       ErrorKind.TIMEOUT), strict=True):
            _mark(out, item_id, kind)
        capsys.readouterr()
        assert main(run) == 1, "agent and timeout errors are kept by default"
        printed, err = capsys.readouterr()
        assert "2 items ended in error (agent 1, timeout 1)" in printed
        assert agent.asked == 4, "the kept patches were tested, the agent not asked"
        assert "2 that ended in infra or sandbox errors run again" in err
        by_id = {r.item_id: r for r in ResultsFolder(out).load()}
        assert [by_id[i].outcome for i in ids[:2]] == [Outcome.RESOLVED] * 2
        assert [by_id[i].attempts for i in ids[:2]] == [2, 2]
        assert {by_id[i].error_kind for i in ids[2:]} == {ErrorKind.AGENT, ErrorKind.TIMEOUT}

        assert main([*run, "--retry-errors"]) == 0
        assert "asking the agent again" in capsys.readouterr().err
        assert agent.asked == 6, "--retry-errors asks again for exactly the two errors"
        assert {r.outcome for r in ResultsFolder(out).load()} == {Outcome.RESOLVED}


def test_a_finished_run_extends_when_rows_are_added(tmp_path, capsys):
    out = tmp_path / "out"
    small = write(tmp_path / "small.yaml", gold_manifest(2))
    assert main(["run", "-q", "-f", str(small), "--output-dir", str(out)]) == 0
    before = stamps(out)
    big = write(tmp_path / "big.yaml", gold_manifest(4))
    capsys.readouterr()
    assert main(["run", "-q", "-f", str(big), "--output-dir", str(out)]) == 0
    assert "2 of 4 items already done" in capsys.readouterr().err
    after = stamps(out)
    assert len(after) == 4 and all(after[i] == s for i, s in before.items())
    assert json.loads((out / "summary.json").read_text())["results"]["total_instances"] == 4
    # Back to two rows: nothing runs, and the figures are the two rows'.
    assert main(["run", "-q", "-f", str(small), "--output-dir", str(out)]) == 0
    assert stamps(out) == after
    assert json.loads((out / "summary.json").read_text())["results"]["total_instances"] == 2


def _interrupt(proc: subprocess.Popen) -> tuple[int, str]:
    """Ctrl-C as a terminal sends it (to the foreground process group). What is interrupted
    (an agent that never answers, a script sleeping minutes) would not end by itself, so an
    exit at all shows the run stopped it; the wait's limit only keeps a failure from hanging."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        code = proc.wait(timeout=30)
    finally:
        proc.kill()
    return code, proc.stderr.read()


def test_ctrl_c_while_the_agent_hangs_stops_at_once(tmp_path):
    server, agent = start_agent(delay=NEVER)
    with server:
        manifest = write(tmp_path / "ev.yaml", agent_manifests(server.url, rows=3,
                                                                concurrent=2))
        out = tmp_path / "out"
        proc = start_run(manifest, out)
        wait_for(lambda: agent.asked == 2, "two requests in flight")
        code, err = _interrupt(proc)
    assert code == 130, (code, err)
    assert "stopping 2 items in flight" in err and "Traceback" not in err
    assert result_lines(out) == [], "abandoned requests leave no result"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["partial"] is True and summary["items"] == 0
    assert "Partial" in (out / "report.md").read_text()
    assert processes_naming(str(out)) == []


def test_ctrl_c_during_a_long_eval_script_kills_it_and_keeps_what_finished(tmp_path):
    marker = "sleep 317"
    rows = long_eval_dataset(tmp_path / "rows.jsonl", marker)
    manifest = write(tmp_path / "ev.yaml", gold_manifest(1, dataset=str(rows)))
    out = tmp_path / "out"
    proc = start_run(manifest, out)
    wait_for(lambda: processes_naming(marker), "the eval script to start")
    code, err = _interrupt(proc)
    assert code == 130, (code, err)
    assert "stopping 1 item in flight" in err
    assert processes_naming(marker) == [] and processes_naming(str(out)) == []
    assert result_lines(out) == []


def _mount_small_disk(where: Path, size: str) -> None:
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip()}")


def test_a_full_disk_stops_the_run_and_is_never_a_result(tmp_path):
    disk = tmp_path / "disk"
    _mount_small_disk(disk, "300k")
    try:
        manifest = write(tmp_path / "ev.yaml", gold_manifest(-1, concurrent=1))
        proc = start_run(manifest, disk / "out")
        code = proc.wait(timeout=120)
        err = proc.stderr.read()
        kept = ResultsFolder(disk / "out").load()
    finally:
        subprocess.run(["umount", str(disk)], check=False)
    assert code == 3, err
    assert "disk is full" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2, err
    assert 0 < len(kept) < 10 and {r.outcome for r in kept} == {Outcome.RESOLVED}
