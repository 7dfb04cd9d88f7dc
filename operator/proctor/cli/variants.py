"""`proctor variants generate` and `show`: prompt variants, stored ahead of runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from proctor.cli.options import load_evaluation
from proctor.core import exits
from proctor.core.exits import ExitCode


def add_parser(sub: argparse._SubParsersAction) -> None:
    var = sub.add_parser("variants", help="prompt variants (llm or template), stored ahead "
                                          "of runs")
    var_sub = var.add_subparsers(dest="variants_command", required=True)
    _add_generate(var_sub)
    _add_show(var_sub)


def _add_generate(var_sub: argparse._SubParsersAction) -> None:
    gen = var_sub.add_parser("generate", help="write each task's variants by the "
                                              "Evaluation's strategy (llm: ask its model), "
                                              "and store them (stored ones are reused)")
    gen.add_argument("-f", "--file", action="append", required=True)
    gen.add_argument("--output", required=True, help="the variants file (JSON lines) to add "
                                                     "to; name it as promptSensitivity."
                                                     "variantsFile")
    gen.add_argument("--retry-failed", action="store_true",
                     help="ask again for tasks whose generation failed before")
    gen.add_argument("--print-records", action="store_true",
                     help="also print every task's record as one JSON line on stdout")
    gen.set_defaults(func=cmd_variants_generate)


def _add_show(var_sub: argparse._SubParsersAction) -> None:
    show = var_sub.add_parser("show", help="each variant beside the original, protected "
                                           "spans marked, with the checks' results")
    show.add_argument("store", help="a variants file")
    show.add_argument("--instance", help="only this task")
    show.set_defaults(func=cmd_variants_show)


def cmd_variants_generate(args: argparse.Namespace) -> int:
    from proctor.prepare import check_runnable, load_selection, stored_variants
    from proctor.variants import store

    evaluation, _ = load_evaluation(args.file, agent_needed=False)  # prompts only
    check_runnable(evaluation, on_cluster=False)  # e.g. more template variants than exist
    selection = load_selection(evaluation)

    def progress(done: int, total: int, instance_id: str, what: str) -> None:
        print(f"{done}/{total} {instance_id}: {what}", file=sys.stderr, flush=True)

    records = stored_variants(evaluation, selection, store_path=Path(args.output),
                              retry_failed=args.retry_failed, progress=progress)
    failed = [r for r in records.values() if r["status"] != "ok"]
    if args.print_records:  # a cluster's variants Job: the operator reads them from its log
        print(store.records_line(records), flush=True)
    print(f"{len(records) - len(failed)} of {len(records)} tasks have variants in "
          f"{args.output}" + (f"; {len(failed)} failed (see `proctor variants show "
                              f"{args.output}`; --retry-failed tries them again)"
                              if failed else ""))
    return ExitCode.ITEM_ERRORS if failed else ExitCode.OK


def cmd_variants_show(args: argparse.Namespace) -> int:
    from proctor.variants import store
    from proctor.variants.show import render_store

    if not Path(args.store).exists():
        raise exits.BadInput(f"{args.store}: no such variants file")
    try:
        records = store.load(Path(args.store))
    except store.StoreError as exc:
        raise exits.BadInput(str(exc)) from exc
    text = render_store(records, args.instance)
    if not text:
        raise exits.BadInput(f"{args.store} holds no variants of {args.instance}")
    print(text)
    return 0
