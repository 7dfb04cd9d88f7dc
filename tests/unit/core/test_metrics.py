"""Aggregation: the denominators pinned in the architecture note."""

from __future__ import annotations

import json

import pytest

from proctor.core.metrics import aggregate, eval_result
from proctor.core.model import (
    ErrorKind,
    EvalResult,
    Instance,
    Outcome,
    PassFail,
    RunResult,
    Usage,
)
from proctor.core.report import render
from support.paths import SHARED_DATA, shared


def result(iid: str, outcome: Outcome, *, repeat: int = 0, variant: str = "original",
           f2p=(1, 1), p2p=(2, 2), ran: bool = True, repo: str = "o/a", **kw) -> RunResult:
    def split(passed_total, prefix):
        passed, total = passed_total
        return PassFail(success=[f"{prefix}{i}" for i in range(passed)],
                        failure=[f"{prefix}x{i}" for i in range(total - passed)])
    return RunResult(item_id=f"{iid}{variant}{repeat}".ljust(32, "0"), instance_id=iid,
                     variant_id=variant, repeat=repeat, repo=repo, outcome=outcome,
                     tests_ran=ran, FAIL_TO_PASS=split(f2p, "f") if ran else PassFail(),
                     PASS_TO_PASS=split(p2p, "p") if ran else PassFail(), **kw)


def instance(iid: str, n_f2p: int = 1, n_p2p: int = 2) -> Instance:
    return Instance(instance_id=iid, repo="o/a", base_commit="a" * 40, problem_statement="",
                    FAIL_TO_PASS=[f"f{i}" for i in range(n_f2p)],
                    PASS_TO_PASS=[f"p{i}" for i in range(n_p2p)], image="i",
                    eval_script="true", log_parser="parse_log_pytest")


def test_every_task_counts_in_every_denominator_errors_included():
    figures = eval_result([
        result("a", Outcome.RESOLVED),
        result("b", Outcome.NO_OP, ran=False),
        result("c", Outcome.ERROR, ran=False, error_kind=ErrorKind.AGENT),
        result("d", Outcome.REGRESSION, f2p=(0, 1), p2p=(1, 2)),
    ])
    assert figures.total_instances == 4
    assert (figures.resolved_pct, figures.no_op_pct, figures.error_pct,
            figures.regression_pct) == (0.25, 0.25, 0.25, 0.25)
    # test rates only over items whose tests ran: a and d
    assert figures.fail_to_pass_passed_pct == pytest.approx(1 / 2)
    assert figures.pass_to_pass_passed_pct == pytest.approx(3 / 4)


def test_repeats_are_averaged_per_task():
    figures = eval_result([
        result("a", Outcome.RESOLVED, repeat=0), result("a", Outcome.NO_OP, repeat=1,
                                                        f2p=(0, 1)),
        result("b", Outcome.RESOLVED),
    ])
    assert figures.total_instances == 2
    assert figures.resolved_pct == pytest.approx(0.75)
    assert figures.no_op_pct == pytest.approx(0.25)


def test_variants_do_not_enter_the_headline():
    summary = aggregate([result("a", Outcome.RESOLVED),
                         result("a", Outcome.ERROR, variant="llm-1", ran=False)],
                        {"a": instance("a")})
    assert summary.results.resolved_pct == 1.0 and summary.results.error_pct == 0.0
    assert summary.items == 2 and summary.error_kinds == {}


def test_tests_left_out_are_counted():
    summary = aggregate([result("a", Outcome.RESOLVED),
                         result("b", Outcome.NO_OP, ran=False)],
                        {"a": instance("a"), "b": instance("b", 3, 5)})
    assert summary.tests_left_out == {"FAIL_TO_PASS": 3, "PASS_TO_PASS": 5}


def test_per_repository_figures_and_usage():
    summary = aggregate([
        result("a", Outcome.RESOLVED, repo="o/x", usage=Usage(total_tokens=10, cost_usd=0.5)),
        result("b", Outcome.NO_OP, repo="o/y", usage=Usage(total_tokens=5)),
    ], {})
    assert set(summary.per_repo) == {"o/x", "o/y"}
    assert summary.per_repo["o/x"].resolved_pct == 1.0
    assert summary.usage.total_tokens == 15 and summary.usage.cost_usd == 0.5


def test_nothing_to_aggregate_gives_zeros_not_a_crash():
    summary = aggregate([], {})
    assert summary.results.total_instances == 0 and summary.results.resolved_pct == 0.0
    assert "0 of 0" in render(summary, [])


def test_eval_result_field_names_are_agentbeats():
    for path in shared(SHARED_DATA / "agentbeats" / "results").glob("*.json"):
        for real in json.loads(path.read_text())["results"]:
            real.pop("green_agent_model")
            assert set(real) == set(EvalResult.model_fields), path.name
            EvalResult.model_validate(real)


def test_report_shows_percent():
    summary = aggregate([result("a", Outcome.RESOLVED), result("b", Outcome.NO_OP)], {})
    text = render(summary, [])
    assert "| 50.0% |" in text and "0.5" not in text.split("## Items")[0]
