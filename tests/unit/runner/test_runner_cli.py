"""The steps a Job runs, through the `proctor runner` command, on a demo task."""

from __future__ import annotations

import json
import socket

from proctor.agents.server import reference_app, start_in_thread
from proctor.cli.main import main
from proctor.core.model import WorkItem
from proctor.datasets import demo, to_instance
from proctor.runner.grade import TERMINATION_MESSAGE_LIMIT, compact_result
from proctor.runner.solve import patch_from_log


def task_dir(tmp_path, row):
    task = tmp_path / "task"
    task.mkdir()
    instance = to_instance(row, 0)
    (task / "instance.json").write_text(instance.model_dump_json())
    (task / "item.json").write_text(
        WorkItem(id="c" * 32, instance_id=instance.instance_id).model_dump_json())
    return task


def test_solve_test_grade_with_a_given_patch(tmp_path, capsys):
    row = demo.load_rows()[0]
    gold = tmp_path / "gold.diff"
    gold.write_text(row["patch"])
    work = tmp_path / "work"
    assert main(["runner", "solve", "--work-dir", str(work), "--task-dir",
                 str(task_dir(tmp_path, row)), "--patch-file", str(gold)]) == 0
    solve_log = capsys.readouterr().out
    assert patch_from_log(solve_log) == row["patch"]
    assert (work / "run.sh").exists() and (work / "eval.sh").exists()
    assert main(["runner", "test", "--work-dir", str(work)]) == 0
    capsys.readouterr()
    term = tmp_path / "termination-log"
    assert main(["runner", "grade", "--work-dir", str(work), "--termination-log",
                 str(term)]) == 0
    full = json.loads(capsys.readouterr().out)
    compact = json.loads(term.read_text())
    assert full["outcome"] == compact["outcome"] == "resolved"
    assert compact["f2p"] == [len(full["FAIL_TO_PASS"]["success"])] * 2
    assert len(term.read_bytes()) <= TERMINATION_MESSAGE_LIMIT


def test_solve_with_an_empty_patch_file_means_no_patch(tmp_path, capsys):
    row = demo.load_rows()[1]
    work = tmp_path / "work"
    assert main(["runner", "solve", "--work-dir", str(work), "--task-dir",
                 str(task_dir(tmp_path, row)), "--patch-file", ""]) == 0
    assert patch_from_log(capsys.readouterr().out) == ""
    assert not (work / "patch.diff").exists()


def test_compact_result_stays_under_the_limit_with_a_huge_message():
    from proctor.core.model import Outcome, RunResult

    result = RunResult(item_id="d" * 32, instance_id="x", outcome=Outcome.ERROR,
                       error_message="boom " * 10_000)
    assert len(json.dumps(compact_result(result)).encode()) <= TERMINATION_MESSAGE_LIMIT


def test_patch_from_a_torn_log_is_none():
    assert patch_from_log(">>>>> Proctor Patch Begin\ndiff --git a/x") is None
    assert patch_from_log("nothing here") is None


def test_agent_credentials_come_from_the_environment():
    from proctor.cli.runner import _auth_header

    assert _auth_header({}) is None
    assert _auth_header({"PROCTOR_AGENT_TOKEN": "t"}) == ("Authorization", "Bearer t")
    assert _auth_header({"PROCTOR_AGENT_TOKEN": "t", "PROCTOR_AGENT_AUTH_HEADER": "X-Key",
                         "PROCTOR_AGENT_AUTH_SCHEME": ""}) == ("X-Key", "t")
    # A Secret made from a file ends in a newline: sent without it, as the operator sends it.
    assert _auth_header({"PROCTOR_AGENT_TOKEN": "t\n"}) == ("Authorization", "Bearer t")


def _late(app, not_yet: int):
    """The app, answering 503 to its first `not_yet` card requests: an agent whose port is
    open (the sidecar's startupProbe passed) before its app serves."""
    asked = []

    async def late(scope, receive, send):
        if scope["type"] == "http" and "agent" in scope["path"] and len(asked) < not_yet:
            asked.append(scope["path"])
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b"starting"})
            return
        await app(scope, receive, send)
    return late, asked


def test_solve_waits_for_a_starting_sidecars_card_then_sends_the_task(tmp_path, capsys):
    row = demo.load_rows()[0]
    made = {}

    def app(url):
        made["app"], made["asked"] = _late(reference_app("oracle", url), 2)
        return made["app"]

    with start_in_thread(app) as server:
        assert main(["runner", "solve", "--work-dir", str(tmp_path / "work"), "--task-dir",
                     str(task_dir(tmp_path, row)), "--endpoint", server.url,
                     "--card-wait", "20"]) == 0
    assert len(made["asked"]) == 2  # refused twice, then fetched
    assert patch_from_log(capsys.readouterr().out) == row["patch"]


def test_a_sidecar_that_never_serves_its_card_is_an_agent_error_naming_it(tmp_path, capsys):
    row = demo.load_rows()[0]
    made = {}

    def app(url):  # its port open, its app never serving (503 to every card request)
        made["app"], made["asked"] = _late(reference_app("oracle", url), 10**9)
        return made["app"]

    work = tmp_path / "work"
    with start_in_thread(app) as server:
        url = server.url
        assert main(["runner", "solve", "--work-dir", str(work), "--task-dir",
                     str(task_dir(tmp_path, row)), "--endpoint", url, "--card-wait",
                     "2"]) == 0
    # Asked again after a refusal (not given up at the first), and returned: not forever.
    assert len(made["asked"]) >= 2
    solve = json.loads((work / "solve.json").read_text())
    assert solve["error_kind"] == "agent"
    assert f"sidecar agent at {url} did not serve its card within 2 s" in solve["error"]
    assert patch_from_log(capsys.readouterr().out) == ""
    assert main(["runner", "grade", "--work-dir", str(work)]) == 0
    graded = json.loads(capsys.readouterr().out)
    assert graded["outcome"] == "error" and url in graded["error_message"]
    assert graded["agent_unanswered"] is False  # its image's to fix: not asked again


def test_an_agent_that_went_away_is_graded_unanswered_in_the_compact_result(tmp_path, capsys):
    """The solve step's request got no connection: the grade step's compact result (what
    the operator reads) says the agent never answered, so that it is asked again."""
    row = demo.load_rows()[0]
    with socket.socket() as sock:  # a port no one listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    work, term = tmp_path / "work", tmp_path / "termination-log"
    assert main(["runner", "solve", "--work-dir", str(work), "--task-dir",
                 str(task_dir(tmp_path, row)), "--endpoint", url]) == 0
    assert main(["runner", "grade", "--work-dir", str(work), "--termination-log",
                 str(term)]) == 0
    full, compact = json.loads(capsys.readouterr().out.splitlines()[-1]), json.loads(
        term.read_text())
    assert (compact["outcome"], compact["error_kind"], compact["unanswered"]) == (
        "error", "agent", True)
    assert full["agent_unanswered"] is True
