"""The grade step: a work folder's files -> a RunResult.

Parsing and per-test grading are swebench 5's own (`get_logs_eval`, the parser the
row names, `get_eval_tests_report`), so Proctor grades a log exactly as the
official harness does: the test section between the Start/End markers, the
recorded test exit code cross-checked against the parsed statuses, a skipped F2P
test counted as failed, truncated parametrized ids matched by prefix. The
outcome then comes from `proctor.core.grading.decide_outcome`.

A log without markers is `error` (sandbox): the eval script never reached its
tests. `legacy_log=True` instead parses the whole log, to re-grade runs made
before the markers existed (swebench 2.x logs).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from proctor import __version__
from proctor.core.grading import decide_outcome
from proctor.core.integrity import GUARD_MARK, START_MARK, Threat
from proctor.core.model import (
    ErrorKind,
    Instance,
    Outcome,
    PassFail,
    PatchInfo,
    RunResult,
    Tampering,
    Timings,
)
from proctor.runner.solve import read_solve, solve_confidence, solve_error, solve_usage
from proctor.runner.workdir import WorkDir, write_result

NO_PATCH = "no patch"
NOT_APPLIED = "none"
UNRECORDED = "unrecorded (log from another harness)"


@dataclass
class LogGrade:
    """What the log says: per-test results, or why it cannot be graded."""

    f2p: PassFail = field(default_factory=PassFail)
    p2p: PassFail = field(default_factory=PassFail)
    exit_code: int | None = None
    error: str | None = None
    forged: bool = False
    """The log cannot be what the test runner wrote (an early exit, a forged log)."""


# The last line each test runner prints when it ran to its end. A test command that
# exited 0 without it stopped early (os._exit in a hook) or printed a log of its own.
_RUNNER_END = {
    "parse_log_django": re.compile(r"^Ran \d+ tests? in [\d.]+s", re.M),
    "parse_log_sympy": re.compile(r"tests finished: ", re.M),
}
_PYTEST_END = re.compile(r"^=+ .*\b(?:passed|failed|errors?|skipped|xfailed|xpassed|"
                         r"deselected|no tests ran)\b.* in [\d.]+ ?s(?:econds)?\b.*=+\s*$",
                         re.M)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _test_section(content: str) -> str:
    from proctor.core.integrity import START_MARK

    start = content.find(START_MARK)
    return content[start:] if start >= 0 else content


def missing_summary(log_parser: str, section: str) -> str | None:
    """Why a test section whose command exited 0 cannot be the runner's own log."""
    pattern = _RUNNER_END.get(log_parser, _PYTEST_END)
    if pattern.search(_ANSI.sub("", section)):
        return None
    return ("the test command exited 0 but its log lacks the test runner's closing "
            "summary: an early exit or a log written by the patch")


def grade_log(instance: Instance, log_path: str, legacy_log: bool = False) -> LogGrade:
    """Grade one test log against the task's F2P and P2P lists, the swebench 5 way."""
    from swebench.harness.constants import EvalType
    from swebench.harness.grading import get_eval_tests_report, get_logs_eval, parse_test_exit_code
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.harness.utils import make_test_spec

    if instance.log_parser not in PARSER_REGISTRY:
        return LogGrade(error=f"swebench has no log parser named {instance.log_parser!r}")
    spec = make_test_spec(instance.swebench_row())
    if spec.log_parser in STATUS_GATED_PARSERS:
        spec = dataclasses.replace(spec, log_parser=_status_lines_only(spec.log_parser))
    with open(log_path, errors="replace") as fh:
        content = fh.read()
    if legacy_log:
        status_map = PARSER_REGISTRY[spec.log_parser](content, spec)
    else:
        status_map, found = get_logs_eval(spec, log_path)
        if not found:
            return LogGrade(exit_code=parse_test_exit_code(content), error=_why_unusable(content))
    exit_code = parse_test_exit_code(content)
    if not legacy_log and exit_code == 0:
        missing = missing_summary(instance.log_parser, _test_section(content))
        if missing:
            return LogGrade(exit_code=exit_code, error=missing, forged=True)
    gold = {"FAIL_TO_PASS": instance.FAIL_TO_PASS, "PASS_TO_PASS": instance.PASS_TO_PASS}
    report = get_eval_tests_report(status_map, gold, eval_type=EvalType(instance.eval_type))
    return LogGrade(f2p=PassFail(**report["FAIL_TO_PASS"]),
                    p2p=PassFail(**report["PASS_TO_PASS"]),
                    exit_code=exit_code)


# swebench parsers that look at a line only when it starts with a test status
# (PASSED, FAILED, ...). Handing them just those lines yields the same map, found by
# one regex scan in C instead of a Python loop over every line: a 20 MB pytest log
# grades in a fraction of the time. tests/unit/runner/test_grade_speedup.py checks equality.
STATUS_GATED_PARSERS = ("parse_log_pytest", "parse_log_pytest_options")


def _status_lines_only(name: str) -> str:
    """Register (once) and name a wrapper of `name` that sees only status lines."""
    from swebench.harness.constants import TestStatus
    from swebench.harness.log_parsers import PARSER_REGISTRY

    key = f"{name}+status-lines"
    if key not in PARSER_REGISTRY:
        parser = PARSER_REGISTRY[name]
        statuses = "|".join(re.escape(s.value) for s in TestStatus)
        status_line = re.compile(rf"^(?:{statuses}).*$", re.M)

        def prefiltered(log: str, spec: object) -> dict[str, str]:
            found: dict[str, str] = parser("\n".join(status_line.findall(log)), spec)
            return found  # swebench: untyped

        PARSER_REGISTRY[key] = prefiltered
    return key


def eval_seconds(work: WorkDir) -> float | None:
    """The eval script's own run time, as run.sh clocked it (bash 5's EPOCHREALTIME)."""
    clock = (work.read("eval_clock") or "").split()
    try:
        return float(clock[1]) - float(clock[0]) if len(clock) == 2 else None
    except ValueError:
        return None


def _why_unusable(content: str) -> str:
    """Name the reason swebench's get_logs_eval gave up on a log."""
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT

    if START_TEST_OUTPUT not in content or END_TEST_OUTPUT not in content:
        return "the test log has no Start/End Test Output markers (grade old logs with " \
               "--legacy-log)"
    return "the test log shows no test results, or contradicts the test command's exit code"


def _patch_info(work: WorkDir) -> PatchInfo:
    from swebench.harness.constants import APPLY_PATCH_FAIL

    from proctor.core.patches import check_patch

    refused = work.read("patch_refused")
    text = work.read("patch.diff")
    method = (work.read("apply_method") or "").strip()
    log = work.read("test_output.txt")
    if not method and log is not None:
        # A log from another harness (e.g. an old swebench run): it logged failures itself.
        method = NOT_APPLIED if APPLY_PATCH_FAIL in log else UNRECORDED
    if refused is not None:
        return PatchInfo(present=True, refused=refused.strip())
    if not text or not text.strip():
        return PatchInfo()
    check = check_patch(text)
    applied = method not in ("", NOT_APPLIED, NO_PATCH)
    return PatchInfo(present=True, sha256=check.sha256, size_bytes=check.size_bytes,
                     applied=applied, apply_method=method if applied else None)


@dataclass(frozen=True)
class ItemClock:
    """When an item started and what its earlier steps took, for its result's timings
    (the engine measures them; a Job's steps run in separate containers and leave them
    unset)."""

    started_at: str
    start: float
    """time.perf_counter() when the item started."""
    solve_seconds: float | None = None
    test_seconds: float | None = None


def grade_step(work: WorkDir, clock: ItemClock | None = None, legacy_log: bool = False,
               **fields: object) -> RunResult:
    """The grade step, the one the engine calls and `proctor runner grade` runs in a Job:
    grade the work folder (`grade_work_dir`) and keep the result in it (`write_result`)."""
    graded_at = time.perf_counter()
    result = grade_work_dir(work, legacy_log, **fields)
    if clock is not None:
        done = time.perf_counter()
        result.timings = Timings(solve_seconds=clock.solve_seconds,
                                 test_seconds=clock.test_seconds,
                                 eval_seconds=result.timings.eval_seconds,
                                 grade_seconds=done - graded_at,
                                 total_seconds=done - clock.start, started_at=clock.started_at,
                                 finished_at=datetime.now(UTC).isoformat(timespec="milliseconds"))
    write_result(work, result)
    return result


def grade_work_dir(work: WorkDir, legacy_log: bool = False, **fields: object) -> RunResult:
    """The RunResult of a work folder whose test step has run (or been skipped)."""
    instance, item = work.instance(), work.item()
    base = dict(item_id=item.id, instance_id=instance.instance_id, variant_id=item.variant_id,
                repeat=item.repeat, repo=instance.repo, runner_version=__version__, **fields)
    patch = _patch_info(work)
    base["patch"] = patch
    tampering, set_aside = _tampering(work, instance)
    base.update(tampered=bool(tampering), tampering=tampering, set_aside=set_aside)
    base.setdefault("timings", Timings(eval_seconds=eval_seconds(work)))

    def error(kind: ErrorKind, message: str) -> RunResult:
        return RunResult(outcome=Outcome.ERROR, error_kind=kind, error_message=message, **base)

    solve = read_solve(work)
    base["usage"] = solve_usage(solve)
    base["confidence"] = solve_confidence(solve)
    agent_error = solve_error(solve)
    if agent_error:
        base["agent_unanswered"] = bool(solve and solve.get("transport_failure"))
        return error(ErrorKind.AGENT, agent_error)
    infra_error = work.read("infra_error")
    if infra_error:
        return error(ErrorKind.INFRA, infra_error.strip())
    sandbox_error = work.read("sandbox_error")
    if sandbox_error:
        return error(ErrorKind.SANDBOX, sandbox_error.strip())
    if patch.refused:
        return RunResult(outcome=Outcome.NO_OP, error_message=f"patch refused: {patch.refused}",
                         **base)
    if patch.present and not patch.applied:
        if work.read("apply_method") is None:
            return error(ErrorKind.SANDBOX, "the test step did not record an apply attempt")
        if (tampering or set_aside) and not (work.read("apply.diff") or "").strip():
            what = ("changed the test machinery" if tampering else
                    "was a new test file (set aside)")
            return RunResult(outcome=Outcome.NO_OP, error_message="nothing left to apply: "
                             f"every part of the patch {what}", **base)
        return RunResult(outcome=Outcome.NO_OP, error_message="patch did not apply", **base)
    if work.read("timed_out") is not None:
        return error(ErrorKind.TIMEOUT, f"the eval script ran past its limit of "
                                        f"{(work.read('time_limit') or '?').strip()} s")
    if not (work / "test_output.txt").exists():
        if not patch.present:  # no patch and no test run: nothing to grade
            return RunResult(outcome=Outcome.NO_OP, error_message=_no_patch_why(solve), **base)
        return error(ErrorKind.SANDBOX, "the test step left no test log")
    graded = grade_log(instance, str(work / "test_output.txt"), legacy_log)
    if graded.forged:
        base["tampering"] = [*tampering, Tampering(path="test_output.txt", kind=Threat.LOG.value,
                                                   reason=graded.error or "")]
        base["tampered"] = True
    if graded.error:
        return error(ErrorKind.SANDBOX, graded.error)
    outcome = decide_outcome(patch.applied, len(graded.f2p.success), graded.f2p.total,
                             len(graded.p2p.success), graded.p2p.total)
    return RunResult(outcome=outcome, tests_ran=True, test_exit_code=graded.exit_code,
                     FAIL_TO_PASS=graded.f2p, PASS_TO_PASS=graded.p2p,
                     error_message=None if patch.present else _no_patch_why(solve), **base)


def _tampering(work: WorkDir, instance: Instance) -> tuple[list[Tampering], list[str]]:
    """What the patch did to the test machinery: the parts screening dropped (decided
    again here from the agent's patch, by the same pure policy) and what the eval
    script's guard undid after the build step (its lines in the test log); and the new
    test files of its own that were set aside."""
    from proctor.runner.workdir import screen

    text = work.read("patch.diff") or ""
    screened = screen(instance, text) if text.strip() else None
    findings = screened.findings if screened else ()
    found = [Tampering(path=f.path, kind=f.kind.value, reason=f.reason)
             for f in findings if f.tampering]
    set_aside = [f.path for f in findings if not f.tampering]
    log = work.read("test_output.txt") or ""
    for line in log[:log.find(START_MARK)].splitlines() if START_MARK in log else ():
        if line.startswith(GUARD_MARK):
            kind, _, path = line[len(GUARD_MARK):].partition(" ")
            found.append(Tampering(path=path, kind=Threat.BUILD.value,
                                   reason=f"changed by the eval script's build step ({kind})"))
    return found, set_aside


def _no_patch_why(solve: dict[str, Any] | None) -> str:
    """`no patch`, with the agent's own words when it ended without one."""
    if solve and solve.get("state") not in (None, "completed"):
        return f"no patch: the agent ended {solve['state']}" + \
            (f" ({solve['error']})" if solve.get("error") else "")
    return "no patch"


TERMINATION_MESSAGE_LIMIT = 4096  # bytes Kubernetes keeps of a container's message


def compact_result(result: RunResult) -> dict[str, object]:
    """The result in at most 4 KiB, for a pod's termination message."""
    compact: dict[str, object] = {
        "v": result.schema_version, "item": result.item_id, "outcome": result.outcome.value,
        "error_kind": result.error_kind.value if result.error_kind else None,
        "message": (result.error_message or "")[:300],
        "applied": result.patch.apply_method, "patch_sha256": result.patch.sha256,
        "f2p": [len(result.FAIL_TO_PASS.success), result.FAIL_TO_PASS.total],
        "p2p": [len(result.PASS_TO_PASS.success), result.PASS_TO_PASS.total],
        "tests_ran": result.tests_ran, "exit_code": result.test_exit_code,
        "tampered": sorted({t.kind for t in result.tampering}),
        "unanswered": result.agent_unanswered,
        "timings": {k: round(v, 3) for k, v in result.timings.model_dump().items()
                    if isinstance(v, float)},
    }
    while len(json.dumps(compact).encode()) > TERMINATION_MESSAGE_LIMIT and compact["message"]:
        compact["message"] = str(compact["message"])[: len(str(compact["message"])) // 2]
    return compact
