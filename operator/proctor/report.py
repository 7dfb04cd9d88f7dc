"""report.md: the figures for people (percentages), from summary and results (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from proctor.model import EvalResult, RunResult, Summary

# The leaderboard's columns, in the Agentbeats scenario's order.
COLUMNS: list[tuple[str, str]] = [
    ("resolved_pct", "Resolved"),
    ("breaking_resolved_pct", "Breaking Resolved"),
    ("partially_resolved_pct", "Partially Resolved"),
    ("work_in_progress_pct", "Work in Progress"),
    ("regression_pct", "Regression"),
    ("no_op_pct", "No-Op"),
    ("error_pct", "Error"),
    ("fail_to_pass_passed_pct", "Fail-to-Pass Passed"),
    ("pass_to_pass_passed_pct", "Pass-to-Pass Passed"),
]


def percent(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def figures_row(label: str, result: EvalResult) -> str:
    cells = [label, str(result.total_instances)]
    cells += [percent(getattr(result, key)) for key, _ in COLUMNS]
    return "| " + " | ".join(cells) + " |"


def figures_table(rows: Sequence[tuple[str, EvalResult]], first: str = "Scope") -> list[str]:
    head = [first, "Total Instances", *(title for _, title in COLUMNS)]
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *(figures_row(label, result) for label, result in rows)]


def leaderboard(summaries: Mapping[str, Summary]) -> list[str]:
    """One row per agent, best first: the figures, then median latency and tokens."""
    ranked = sorted(summaries.items(), key=lambda kv: (-kv[1].results.resolved_pct, kv[0]))
    table = figures_table([(name, s.results) for name, s in ranked], "Agent")
    table[0] += " Median latency | Tokens |"
    table[1] += "---|---|"
    for i, (_, s) in enumerate(ranked, start=2):
        median = s.latency_seconds.get("median")
        tokens = s.usage.total_tokens
        table[i] += (f" {median:.1f} s |" if median is not None else " – |") + \
            (f" {tokens} |" if tokens is not None else " – |")
    return table


def _test_cell(passed: int, total: int, ran: bool) -> str:
    return f"{passed}/{total}" if ran else "–"


def items_table(results: Sequence[RunResult]) -> list[str]:
    lines = ["| Instance | Variant | Repeat | Outcome | F2P | P2P | Applied with | Note |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(results, key=lambda r: (r.instance_id, r.variant_id, r.repeat)):
        note = (f"{r.error_kind.value}: " if r.error_kind else "") + (r.error_message or "")
        lines.append(
            f"| {r.instance_id} | {r.variant_id} | {r.repeat} | {r.outcome.value} | "
            f"{_test_cell(len(r.FAIL_TO_PASS.success), r.FAIL_TO_PASS.total, r.tests_ran)} | "
            f"{_test_cell(len(r.PASS_TO_PASS.success), r.PASS_TO_PASS.total, r.tests_ran)} | "
            f"{r.patch.apply_method or '–'} | {note.replace('|', '/')[:120]} |")
    return lines


def render(summary: Summary, results: Sequence[RunResult]) -> str:
    """The whole report.md."""
    title = summary.evaluation or "evaluation"
    lines = [f"# {title}: {summary.agent}", "",
             f"{summary.items} of {summary.items_planned} work items done.", "",
             *figures_table([("All", summary.results)]), ""]
    if summary.per_repo:
        lines += ["## By repository", "",
                  *figures_table(list(summary.per_repo.items()), "Repository"), ""]
    left = summary.tests_left_out
    if any(left.values()):
        lines += [f"Tests of items whose tests did not run, left out of the test rates: "
                  f"{left.get('FAIL_TO_PASS', 0)} fail-to-pass, "
                  f"{left.get('PASS_TO_PASS', 0)} pass-to-pass.", ""]
    if summary.error_kinds:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(summary.error_kinds.items()))
        lines += [f"Errors by kind: {kinds}.", ""]
    lines += ["## Items", "", *items_table(results), ""]
    return "\n".join(lines)
