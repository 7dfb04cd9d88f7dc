"""swebench's per-instance report.json, from a Proctor result.

swebench's harness writes one report.json per instance (`get_eval_report`); Proctor
writes the same file beside each item's own result, so swebench's tools read it.
"""

from __future__ import annotations

from typing import Any

from proctor.core.model import ErrorKind, RunResult


def report_json(result: RunResult, test_log: str | None = None) -> dict[str, Any]:
    """The per-instance report.json, as swebench 5's `get_eval_report` writes it.

    `test_log` is the item's test_output.txt: when it holds no gradable tests, its
    text decides `infra_failure` (swebench's own signatures). A patch counts as
    None only when the agent gave no answer; an empty patch exists, as in swebench.
    """
    no_patch = result.error_kind == ErrorKind.AGENT
    report: dict[str, Any] = {
        "patch_is_None": no_patch,
        "patch_exists": not no_patch,
        "patch_successfully_applied": result.tests_ran,
        "resolved": False,
        "infra_failure": False,
    }
    if no_patch:
        return {result.instance_id: report}
    if not result.tests_ran:
        report.update(_infra_failure(test_log))
    else:
        # swebench's verdict from the tests alone: an unchanged task whose tests
        # pass is resolved there (Proctor's outcome says no_op).
        report["resolved"] = not result.FAIL_TO_PASS.failure and not result.PASS_TO_PASS.failure
        report["tests_status"] = {
            "FAIL_TO_PASS": result.FAIL_TO_PASS.model_dump(),
            "PASS_TO_PASS": result.PASS_TO_PASS.model_dump(),
            "FAIL_TO_FAIL": {"success": [], "failure": []},
            "PASS_TO_FAIL": {"success": [], "failure": []},
        }
    return {result.instance_id: report}


def _infra_failure(test_log: str | None) -> dict[str, Any]:
    """swebench's advisory classification of a log with no gradable tests."""
    from swebench.harness.infra_failure import TIER_ENVIRONMENT, classify_text

    found = classify_text(test_log or "")
    if not found:
        return {}
    reason, tier = found
    return {"infra_failure": tier == TIER_ENVIRONMENT, "infra_failure_reason": reason}
