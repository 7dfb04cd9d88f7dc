"""Re-grading 177 real swebench 2.x logs (no output markers) with `--legacy-log`.

Expected figures come from tests/support/data/legacy_log_disagreements.json, which
tests/support/tools/analyze_legacy_logs.py recomputes from the data folder.
"""

from __future__ import annotations

import json

import pytest
from swebench.harness.constants import EvalType
from swebench.harness.grading import get_eval_tests_report, get_resolution_status
from swebench.harness.log_parsers import PARSER_REGISTRY

from proctor.core.model import ErrorKind, Instance, Outcome
from proctor.runner.grade import grade_work_dir
from support.legacy_logs import DATA, DISAGREEMENTS, log_ids, old_run_as_work_dir, verified

EXPECTED = json.loads(DISAGREEMENTS.read_text())


def swebench_whole_log(instance: Instance, log: str, eval_type: EvalType) -> dict:
    """What swebench 5's own functions say about the whole log."""
    status = PARSER_REGISTRY[instance.log_parser](log, None)
    gold = {"FAIL_TO_PASS": instance.FAIL_TO_PASS, "PASS_TO_PASS": instance.PASS_TO_PASS}
    return get_eval_tests_report(status, gold, eval_type=eval_type)


@pytest.fixture(scope="module")
def regraded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("legacy")
    return {iid: old_run_as_work_dir(tmp, iid) for iid in log_ids()}


def recorded_verdict(instance_id: str) -> bool:
    report = json.loads((DATA / "logs" / instance_id / "report.json").read_text())
    return report[instance_id]["resolved"]


def test_there_are_177_logs():
    assert len(log_ids()) == EXPECTED["total"] == 177


def test_legacy_grade_agrees_with_swebench5_parsers_on_all_logs(regraded):
    agree_with_recorded = []
    for iid, work in regraded.items():
        result = grade_work_dir(work, legacy_log=True)
        report = swebench_whole_log(verified()[iid], work.read("test_output.txt"),
                                    EvalType.PASS_AND_FAIL)
        assert result.FAIL_TO_PASS.model_dump() == report["FAIL_TO_PASS"], iid
        assert result.PASS_TO_PASS.model_dump() == report["PASS_TO_PASS"], iid
        assert (result.outcome == Outcome.RESOLVED) == (get_resolution_status(report)
                                                        == "RESOLVED_FULL"), iid
        if (result.outcome == Outcome.RESOLVED) == recorded_verdict(iid):
            agree_with_recorded.append(iid)
    assert len(agree_with_recorded) == EXPECTED["agree"]
    disagree = set(regraded) - set(agree_with_recorded)
    assert disagree == set(EXPECTED["disagreements"])


def test_the_143_figure_comes_from_fail_only_grading():
    """The data README's 143/177 is what grading as `fail_only` gives (the row's
    eval_type passed to swebench as a string instead of EvalType); each of the 34
    flips is listed by cause."""
    readme = EXPECTED["readme_figures"]
    flipped = set()
    for iid in log_ids():
        log = (DATA / "logs" / iid / "test_output.txt").read_text(errors="replace")
        report = swebench_whole_log(verified()[iid], log, EvalType.FAIL_ONLY)
        if (get_resolution_status(report) == "RESOLVED_FULL") != recorded_verdict(iid):
            flipped.add(iid)
    assert len(log_ids()) - len(flipped) == readme["agree"] == 143
    assert flipped == set(readme["disagreements"])
    assert set(readme["disagreements"].values()) <= set(readme["causes"])


def test_without_legacy_log_every_old_log_is_error_sandbox(regraded):
    for iid, work in regraded.items():
        result = grade_work_dir(work, legacy_log=False)
        assert (result.outcome, result.error_kind) == (Outcome.ERROR, ErrorKind.SANDBOX), iid
        assert "markers" in result.error_message
