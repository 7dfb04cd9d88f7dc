"""`proctor validate`: gold and empty predictions, to find broken and flaky tasks."""

from __future__ import annotations

import argparse
from pathlib import Path

from proctor.cli.options import add_sandbox_options, load_evaluation, sandbox_options
from proctor.cli.summaries import print_errors
from proctor.core import exits
from proctor.core.exits import ExitCode
from proctor.core.report import terminal_table


def add_parser(sub: argparse._SubParsersAction) -> None:
    val = sub.add_parser("validate", help="run gold and empty predictions to find broken "
                                          "and flaky tasks of the Evaluation's dataset")
    val.add_argument("-f", "--file", action="append", required=True)
    val.add_argument("--output-dir", required=True)
    val.add_argument("--runs", type=int, default=1, help="runs of each (2+ finds flaky tasks)")
    val.add_argument("--strict", action="store_true", help="exit 1 if any task is broken/flaky")
    val.add_argument("-q", "--quiet", action="store_true")
    add_sandbox_options(val, default="auto")
    val.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    from proctor.local.validate import validate

    evaluation, _ = load_evaluation(args.file)
    out = Path(args.output_dir)
    found = validate(evaluation, out, runs=args.runs, progress=not args.quiet,
                     sandbox=sandbox_options(args))
    rows = [(label, s.results) for label, s in found.summaries.items()]
    print("\n".join(terminal_table(rows, "Predictions")))
    for title, tasks in (("Broken tasks", found.broken), ("Flaky tasks", found.flaky)):
        print(f"\n{title}: {len(tasks) or 'none'}")
        for task, problems in sorted(tasks.items()):
            print(f"  {task}: {'; '.join(problems)}")
    print_errors(list(found.summaries.values()))
    print(f"\nDetails in {out}/validation.json")
    if args.strict and (found.broken or found.flaky):
        return ExitCode.ITEM_ERRORS
    return exits.for_summaries(found.summaries.values())
