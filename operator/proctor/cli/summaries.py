"""What the commands that run items print at the end: the table of results, a partial
run, the items that ended in error, where the results are."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from proctor.core import exits
from proctor.core.model import Summary
from proctor.core.report import terminal_table


def print_summary(summary: Summary, output_dir: Path) -> None:
    print("\n".join(terminal_table([(summary.agent, summary.results)], "Agent")))
    if summary.partial:
        print(f"\nPartial: {summary.items} of {summary.items_planned} items done")
    print_errors([summary])
    print(f"\nResults in {output_dir}/ (summary.json, report.md with every column, "
          f"results.jsonl)")


def print_errors(summaries: Sequence[Summary]) -> None:
    for s in summaries:
        count = exits.error_items(s)
        if count:
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(s.error_kinds.items()))
            print(f"{s.agent}: {count} items ended in error ({kinds}); see report.md")
