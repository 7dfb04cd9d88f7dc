"""Re-grade the swebench 2.0 legacy logs with swebench 5.0.2 and compare verdicts.

Usage:
    python tests/support/tools/analyze_legacy_logs.py DATA_DIR [--out PATH]

DATA_DIR is the swebench-verified data folder (SWE-bench_Verified_test.parquet,
logs_index.json, logs/<instance_id>/{test_output.txt,report.json}). The result is
written to tests/support/data/legacy_log_disagreements.json next to this tools folder,
unless --out is given ("-" prints it).

For every legacy run the whole test_output.txt (it has no Start/End Test Output
markers) is parsed with PARSER_REGISTRY[row["log_parser"]] and graded with
get_eval_tests_report / get_resolution_status against the v5 row's FAIL_TO_PASS /
PASS_TO_PASS, with eval_type=EvalType(row["eval_type"]) (pass_and_fail for every
Verified row). That grading agrees with every recorded verdict.

The data README's figures (143 of 177 verdicts, 22,236 test results) are what the
same grading gives under EvalType.FAIL_ONLY, which is also what
get_eval_tests_report silently does when handed the row's eval_type as the plain
string "pass_and_fail" (it compares against the enum). The flips that grading
produces are classified under "readme_figures".
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
from swebench.harness.constants import (
    FAIL_TO_PASS,
    PASS_TO_PASS,
    EvalType,
    ResolvedStatus,
    TestStatus,
)
from swebench.harness.grading import (
    _resolve_case,
    get_eval_tests_report,
    get_resolution_status,
)
from swebench.harness.log_parsers import PARSER_REGISTRY

KINDS = (FAIL_TO_PASS, PASS_TO_PASS)
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "data" / "legacy_log_disagreements.json"

# Why a run that correct grading calls unresolved becomes resolved under FAIL_ONLY.
FLIP_CAUSES = {
    "no_tests_parsed": (
        "The patch broke import or collection (SyntaxError, ImportError, pytest "
        "INTERNALERROR), so no test ran and the parse is empty; fail-only grading counts "
        "every absent test as passed."
    ),
    "error_status_not_failed": (
        "The failing tests are reported as ERROR (Django '... ERROR', pytest setup or "
        "collection errors, sympy ' E'), and fail-only grading treats only FAILED as a "
        "failure."
    ),
    "verdict_after_interleaved_output": (
        "The test's own output split Django's 'name ... verdict' line, so its ERROR/FAIL "
        "verdict sits on a later line the parser does not attribute (it recovers only "
        "'ok'), the test is absent from the parse, and fail-only grading counts it passed."
    ),
    "truncated_id_exact_lookup": (
        "The expected id is truncated mid-parameter; pass-and-fail grading resolves it by "
        "prefix to a FAILED test (_resolve_case), but fail-only grading looks it up exactly, "
        "finds nothing and counts it passed."
    ),
    "skipped_status_not_failed": (
        "The test is reported SKIPPED, which pass-and-fail grading counts as a failure for "
        "FAIL_TO_PASS but fail-only grading counts as passed."
    ),
}


def load_rows(data_dir: Path) -> dict[str, dict]:
    table = pq.read_table(data_dir / "SWE-bench_Verified_test.parquet")
    return {row["instance_id"]: row for row in table.to_pylist()}


def gold_from_row(row: dict) -> dict[str, list[str]]:
    return {kind: json.loads(row[kind]) for kind in KINDS}


def gold_from_report(tests_status: dict) -> dict[str, list[str]]:
    return {kind: tests_status[kind]["success"] + tests_status[kind]["failure"] for kind in KINDS}


def grade(status_map: dict, gold: dict, eval_type: EvalType) -> tuple[bool, dict]:
    report = get_eval_tests_report(status_map, gold, eval_type=eval_type)
    return get_resolution_status(report) == ResolvedStatus.FULL.value, report


def count_test_agreement(report: dict, tests_status: dict) -> tuple[int, int]:
    agree = total = 0
    for kind in KINDS:
        for outcome in ("success", "failure"):
            for test in report[kind][outcome]:
                total += 1
                agree += test in tests_status[kind][outcome]
    return agree, total


def per_test_differences(report: dict, tests_status: dict) -> list[str]:
    out = []
    for kind in KINDS:
        for outcome in ("success", "failure"):
            for test in report[kind][outcome]:
                if test not in tests_status[kind][outcome]:
                    out.append(f"{kind} {outcome} (legacy report differs): {test}")
    return out


def failing_test_reason(test: str, status_map: dict, log_parser: str) -> str:
    key = _resolve_case(test, status_map)
    if key is None:
        if log_parser == "parse_log_django":
            return "verdict_after_interleaved_output"
        return "test_absent_from_parse"
    if key != test:
        return "truncated_id_exact_lookup"
    status = status_map[key]
    if status == TestStatus.ERROR.value:
        return "error_status_not_failed"
    if status == TestStatus.SKIPPED.value:
        return "skipped_status_not_failed"
    return f"status_{status.lower()}"


def flip_cause(status_map: dict, report: dict, log_parser: str) -> str:
    """Classify a run resolved under FAIL_ONLY but not under PASS_AND_FAIL."""
    if not status_map:
        return "no_tests_parsed"
    reasons = {
        failing_test_reason(test, status_map, log_parser)
        for kind in KINDS
        for test in report[kind]["failure"]
    }
    if len(reasons) != 1:
        raise SystemExit(f"mixed flip reasons {sorted(reasons)}; extend FLIP_CAUSES")
    return reasons.pop()


def command_slice(log: str, eval_script: str) -> str | None:
    """The part of a marker-less log from the test command's xtrace line to the reset."""
    lines = eval_script.split("\n")
    command = lines[lines.index(": '>>>>> Start Test Output'") + 1]
    # bash -x prints leading VAR=value assignments on their own '+' lines
    command = re.sub(r"^(\w+=('[^']*'|\S+) )+", "", command)
    start = log.find("+ " + command)
    if start < 0:
        return None
    end = log.find("\n+ git checkout", start)
    return log[start : end if end >= 0 else None]


def analyze(data_dir: Path) -> dict:
    rows = load_rows(data_dir)
    index = json.loads((data_dir / "logs_index.json").read_text())
    agree = tests_agree = tests_total = 0
    disagreements: dict[str, str] = {}
    per_test: dict[str, list[str]] = {}
    fo_agree = fo_tests_agree = fo_tests_total = fo_old_agree = fo_old_total = 0
    flips: dict[str, str] = {}
    slice_mismatch: list[str] = []
    for entry in index:
        iid = entry["instance_id"]
        row = rows[iid]
        folder = data_dir / "logs" / iid
        log = (folder / "test_output.txt").read_text()
        legacy = json.loads((folder / "report.json").read_text())[iid]
        tests_status = legacy["tests_status"]
        parser = PARSER_REGISTRY[row["log_parser"]]
        status_map = parser(log, None)
        gold = gold_from_row(row)

        resolved, report = grade(status_map, gold, EvalType(row["eval_type"]))
        a, t = count_test_agreement(report, tests_status)
        tests_agree += a
        tests_total += t
        if a != t:
            per_test[iid] = per_test_differences(report, tests_status)
        if resolved == legacy["resolved"]:
            agree += 1
        else:
            disagreements[iid] = "unclassified"

        fo_resolved, fo_report = grade(status_map, gold, EvalType.FAIL_ONLY)
        a, t = count_test_agreement(fo_report, tests_status)
        fo_tests_agree += a
        fo_tests_total += t
        _, fo_old = grade(status_map, gold_from_report(tests_status), EvalType.FAIL_ONLY)
        a, t = count_test_agreement(fo_old, tests_status)
        fo_old_agree += a
        fo_old_total += t
        if fo_resolved == legacy["resolved"]:
            fo_agree += 1
        else:
            flips[iid] = flip_cause(status_map, report, row["log_parser"])

        sliced = command_slice(log, row["eval_script"])
        if sliced is None or parser(sliced, None) != status_map:
            slice_mismatch.append(iid)

    used = Counter(flips.values())
    return {
        "agree": agree,
        "total": len(index),
        "causes": {},
        "disagreements": disagreements,
        "grading": (
            "whole test_output.txt parsed with PARSER_REGISTRY[row['log_parser']], graded "
            "with get_eval_tests_report(eval_type=EvalType(row['eval_type'])) and "
            "get_resolution_status against the v5 row's FAIL_TO_PASS/PASS_TO_PASS"
        ),
        "tests_agree": tests_agree,
        "tests_total": tests_total,
        "test_disagreements": per_test,
        "whole_log_vs_test_command_parse_differs": slice_mismatch,
        "readme_figures": {
            "grading": (
                "same, but EvalType.FAIL_ONLY (also what get_eval_tests_report does when "
                "given the row's eval_type as the plain string 'pass_and_fail')"
            ),
            "agree": fo_agree,
            "total": len(index),
            "tests_agree": fo_tests_agree,
            "tests_total": fo_tests_total,
            "tests_total_against_legacy_report_lists": fo_old_total,
            "tests_agree_against_legacy_report_lists": fo_old_agree,
            "causes": {cause: FLIP_CAUSES[cause] for cause in FLIP_CAUSES if cause in used},
            "cause_counts": dict(sorted(used.items())),
            "disagreements": dict(sorted(flips.items())),
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data_dir", type=Path, help="swebench-verified data folder")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="output JSON path, '-' for stdout")
    args = ap.parse_args(argv)
    result = analyze(args.data_dir)
    text = json.dumps(result, indent=2, sort_keys=False) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    summary = result["readme_figures"]
    print(
        f"agree {result['agree']}/{result['total']}, tests {result['tests_agree']}/"
        f"{result['tests_total']}; FAIL_ONLY: {summary['agree']}/{summary['total']}, "
        f"{summary['cause_counts']}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
