"""report.md: the figures for people (percentages), from summary and results (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from proctor.core import provenance
from proctor.core.model import EvalResult, RunResult, Summary

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


# The terminal's columns: the headline ones under short titles, so that a leaderboard
# fits TERMINAL_WIDTH; report.md keeps every column.
TERMINAL_COLUMNS: list[tuple[str, str]] = [
    ("resolved_pct", "Resolved"), ("partially_resolved_pct", "Partial"),
    ("regression_pct", "Regress"), ("no_op_pct", "No-Op"), ("error_pct", "Error"),
    ("fail_to_pass_passed_pct", "F2P"), ("pass_to_pass_passed_pct", "P2P"),
]
TERMINAL_WIDTH = 100


def aligned(head: Sequence[str], rows: Sequence[Sequence[str]],
            width: int = TERMINAL_WIDTH) -> list[str]:
    """A plain table, columns right-aligned but the first, cut to `width` characters."""
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    # The first column (a name) gives way when the table is too wide.
    rest = sum(w + 2 for w in widths[1:])
    widths[0] = max(8, min(widths[0], width - rest))
    lines = []
    for row in [head, *rows]:
        first = row[0] if len(row[0]) <= widths[0] else row[0][:widths[0] - 1] + "…"
        rest_cells = (c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))
        cells = [first.ljust(widths[0]), *rest_cells]
        lines.append("  ".join(cells).rstrip())
    return lines


def terminal_table(rows: Sequence[tuple[str, EvalResult]], first: str = "Agent",
                   extra: Sequence[tuple[str, Sequence[str]]] = ()) -> list[str]:
    """The figures for a terminal: `extra` adds (title, one cell per row) columns."""
    head = [first, "Tasks", *(title for _, title in TERMINAL_COLUMNS), *(t for t, _ in extra)]
    body = [[label, str(result.total_instances),
             *(percent(getattr(result, key)) for key, _ in TERMINAL_COLUMNS),
             *(cells[i] for _, cells in extra)]
            for i, (label, result) in enumerate(rows)]
    return aligned(head, body)


def seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f} s"


def dollars(value: float | None) -> str:
    return "–" if value is None else f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def count(value: int | None) -> str:
    return "–" if value is None else f"{value:,}"


def leaderboard(summaries: Mapping[str, Summary]) -> list[str]:
    """One row per agent, best first: the figures, then median latency, tokens and cost."""
    ranked = sorted(summaries.items(), key=lambda kv: (-kv[1].results.resolved_pct, kv[0]))
    latency = [seconds(s.latency_seconds.get("median")) for _, s in ranked]
    tokens = [count(s.usage.total_tokens) for _, s in ranked]
    cost = [dollars(s.usage.cost_usd) for _, s in ranked]
    return terminal_table([(name, s.results) for name, s in ranked], "Agent",
                          [("Latency", latency), ("Tokens", tokens), ("Cost", cost)])


def cost_and_time(summary: Summary) -> list[str]:
    """report.md's lines on what the run cost and how long it took."""
    u, agent = summary.usage, summary.agent_latency_seconds
    reported = (f"reported by the agent for {summary.usage_reported} of {summary.items} items"
                if summary.usage_reported else "the agent reported no usage")
    rows = [("Tokens (input / output / total)",
             f"{count(u.input_tokens)} / {count(u.output_tokens)} / {count(u.total_tokens)}"),
            ("Cost", dollars(u.cost_usd)), ("Model calls (steps)", count(u.steps)),
            ("Agent latency (median / p90)",
             f"{seconds(agent.get('median'))} / {seconds(agent.get('p90'))}"),
            ("Item wall time (median / p90)",
             f"{seconds(summary.latency_seconds.get('median'))} / "
             f"{seconds(summary.latency_seconds.get('p90'))}"),
            ("Run wall time", seconds(summary.wall_seconds))]
    return ["## Cost and time", "", f"Usage {reported}.", "", "| | |", "|---|---|",
            *(f"| {name} | {value} |" for name, value in rows), ""]


def _test_cell(passed: int, total: int, ran: bool) -> str:
    return f"{passed}/{total}" if ran else "–"


def items_table(results: Sequence[RunResult]) -> list[str]:
    lines = ["| Instance | Variant | Repeat | Outcome | F2P | P2P | Applied with | Note |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(results, key=lambda r: (r.instance_id, r.variant_id, r.repeat)):
        note = (f"{r.error_kind.value}: " if r.error_kind else "") + (r.error_message or "")
        if r.tampered:
            undone = ", ".join(f"{t.kind} {t.path}" for t in r.tampering)
            note = f"tampered ({undone}) " + note
        if r.set_aside:
            note = f"set aside: {len(r.set_aside)} new test file(s) " + note
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
             f"{summary.items} of {summary.items_planned} work items done."
             + (" Partial: the figures cover only the items done." if summary.partial else "")
             + (f" Stopped by the {summary.stopped_by}." if summary.stopped_by else ""),
             "",
             *figures_table([("All", summary.results)]), "",
             f"Tampered: {percent(summary.tampered_pct)} of tasks ({summary.tampered_items} "
             f"work items): their patch tried to change the machinery that runs or reports "
             f"the tests; that part was undone and the rest graded.", ""]
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
    lines += cost_and_time(summary)
    lines += ["## Items", "", *items_table(results), ""]
    if summary.provenance:
        lines += provenance.footer(summary.provenance)
    return "\n".join(lines)
