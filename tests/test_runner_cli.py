"""The steps a Job runs, through the `proctor runner` command, on a demo task."""

from __future__ import annotations

import json

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
    from proctor.cli.main import _auth_header

    assert _auth_header({}) is None
    assert _auth_header({"PROCTOR_AGENT_TOKEN": "t"}) == ("Authorization", "Bearer t")
    assert _auth_header({"PROCTOR_AGENT_TOKEN": "t", "PROCTOR_AGENT_AUTH_HEADER": "X-Key",
                         "PROCTOR_AGENT_AUTH_SCHEME": ""}) == ("X-Key", "t")
