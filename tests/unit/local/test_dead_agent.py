"""The dead-agent rule: an agent that dies mid-run stops the run; its errors are retried
once it is back, and no task that had an answer is asked again (its request log says so)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from proctor.agents.server import reference_app, start_in_thread
from proctor.cli.main import main
from proctor.core.exits import Interrupted
from proctor.core.model import ErrorKind, Instance, Outcome
from proctor.datasets import demo
from proctor.formats.harness_logs import results_dir
from proctor.local.agent_watch import (
    FAILURES_IN_A_ROW,
    AgentGone,
    AgentWatch,
    Health,
    after_reply,
    card_serves,
    decide,
)
from proctor.results import ResultsFolder
from support.a2a03 import sdk03
from support.ports import free_port


def test_three_transport_failures_in_a_row_stop_new_tasks_until_a_probe():
    health = Health()
    for _ in range(FAILURES_IN_A_ROW - 1):
        health, kept = after_reply(health, transport_failure=True)
        assert kept and decide(health) == "send"
    health, kept = after_reply(health, transport_failure=True, error="refused")
    assert kept and decide(health) == "probe" and health.last_error == "refused"
    # A request already in flight that fails now is not stored: as if never sent.
    assert after_reply(health, transport_failure=True) == (health, False)
    assert decide(Health(failures_in_a_row=3, probing=True)) == "wait"
    assert decide(Health(gone=True)) == "stop"


def test_an_answer_resets_the_count_and_a_failed_answer_is_not_a_transport_failure():
    health, _ = after_reply(Health(failures_in_a_row=2), transport_failure=False)
    assert health.failures_in_a_row == 0 and decide(health) == "send"


def test_the_watch_goes_on_when_the_card_comes_back_and_stops_when_it_does_not():
    answers = iter([False, False, True])

    async def probe(_t: float) -> bool:
        return next(answers)
    watch = AgentWatch("http://a/", 10, threading.Event(), probe=probe)
    for _ in range(FAILURES_IN_A_ROW):
        assert watch.report(True, "refused")
    asyncio.run(watch.admitted())  # probed three times, back
    assert watch.health == Health()

    async def down(_t: float) -> bool:
        return False
    dead = AgentWatch("http://b/", 0.3, threading.Event(), probe=down)
    for _ in range(FAILURES_IN_A_ROW):
        dead.report(True)
    for _ in range(2):  # the prober, then anyone after it
        with pytest.raises(AgentGone, match=r"http://b/ stopped answering.*--retry-errors"):
            asyncio.run(dead.admitted())


def test_a_stopping_run_ends_the_probe():
    stop = threading.Event()
    async def stopping(_t: float) -> bool:
        stop.set()
        return False
    watch = AgentWatch("http://a/", 30, stop, probe=stopping)
    for _ in range(FAILURES_IN_A_ROW):
        watch.report(True)
    with pytest.raises(Interrupted):
        asyncio.run(watch.admitted())


def _instances() -> list[Instance]:
    return [Instance.model_validate(row) for row in demo.load_rows()]


def _serve(port: int, log: Path, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "proctor.agents", "serve", "--kind", "oracle",
            "--port", str(port), "--request-log", str(log), *extra]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sdk03.wait_until_up(f"http://127.0.0.1:{port}/", proc)
    return proc


def _asked(log: Path) -> list[str]:
    """The instance of each task the agent received, in order."""
    by_hash = {hashlib.sha256(i.problem_statement.strip().encode()).hexdigest(): i.instance_id
               for i in _instances()}
    return [by_hash[json.loads(line)["problem_sha256"]] for line in log.read_text().splitlines()]


def test_an_agent_that_dies_after_two_answers_stops_the_run_and_retry_completes_it(
        tmp_path, capsys):
    port, log, out = free_port(), tmp_path / "requests.jsonl", tmp_path / "out"
    url = f"http://127.0.0.1:{port}/"
    ids = [i.instance_id for i in _instances()]
    run = ["eval", "--agent", url, "-d", "proctor-demo", "-j", "1", "-q", "--sandbox",
           "process", "--agent-wait", "2", "--output-dir", str(out)]
    kept = results_dir(out, "run")  # proctor eval's results folder of the run

    agent = _serve(port, log, "--exit-after", "2")
    try:
        assert main(run) == 3
        agent.wait(timeout=10)  # it did die
    finally:
        sdk03.stop(agent)
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"proctor: error: the agent at {url} stopped answering")
    results = ResultsFolder(kept).load()
    assert [r.outcome for r in results if r.error_kind is None] == [Outcome.RESOLVED] * 2
    errors = [r for r in results if r.error_kind is not None]
    assert len(errors) == FAILURES_IN_A_ROW
    assert {r.error_kind for r in errors} == {ErrorKind.AGENT}
    assert len(results) == 5  # the 5 items never sent are not stored
    assert _asked(log) == ids[:2]
    summary = json.loads((kept / "summary.json").read_text())
    assert summary["partial"] and summary["items"] == 5

    # A rerun of only those items finds only finished ones and errors: it says how to retry.
    assert main([*run[:-2], "--output-dir", str(out), "-i", *ids[:5]]) == 1
    assert "add --retry-errors to run them again" in capsys.readouterr().err

    agent = _serve(port, log)
    try:
        assert main([*run, "--retry-errors"]) == 0
    finally:
        sdk03.stop(agent)
    results = ResultsFolder(kept).load()
    assert len(results) == 10 and {r.outcome for r in results} == {Outcome.RESOLVED}
    # Every task asked exactly once over both runs: none that had an answer asked again.
    assert sorted(_asked(log)) == sorted(ids)


def test_an_agent_stopped_and_started_again_on_its_port_answers_at_the_same_address():
    """What the cluster test of an agent that goes away relies on: the same URL refuses
    while it is stopped and answers once it is started again there."""
    def app(url):
        return reference_app("oracle", url)

    first = start_in_thread(app)
    assert asyncio.run(card_serves(first.url, 5))
    first.stop()
    assert not asyncio.run(card_serves(first.url, 2))
    port = int(first.url.rstrip("/").rsplit(":", 1)[1])
    with start_in_thread(app, port=port) as again:
        assert again.url == first.url and asyncio.run(card_serves(again.url, 5))
