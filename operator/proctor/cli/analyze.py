"""`proctor analyze`: prompt sensitivity and reliability figures of results folders."""

from __future__ import annotations

import argparse
from pathlib import Path

from proctor.core.exits import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    ana = sub.add_parser("analyze", help="prompt sensitivity and reliability figures of one "
                                         "or more results folders (one per agent)")
    ana.add_argument("results", nargs="+", help="results folders (proctor run, demo, "
                                                "results pull)")
    ana.add_argument("--output-dir", required=True, help="where the CSVs, PNGs and "
                                                         "sensitivity_report.md go")
    ana.add_argument("--score", choices=("resolved", "f2p"), default="resolved",
                     help="an item's score: 1 if resolved else 0, or the share of its "
                          "FAIL_TO_PASS tests that pass")
    ana.add_argument("--seed", type=int, help="the bootstrap's seed (default: a fixed one)")
    ana.add_argument("--resamples", type=int, help="bootstrap resamples (default 2000)")
    ana.set_defaults(func=cmd_analyze)


def cmd_analyze(args: argparse.Namespace) -> int:
    from proctor.analysis.markdown import summary_table
    from proctor.analysis.run import AnalysisError, analyze

    out = Path(args.output_dir)
    chosen = {k: v for k, v in (("seed", args.seed), ("resamples", args.resamples)) if v}
    try:
        found = analyze([Path(f) for f in args.results], out, score=args.score, **chosen)
    except AnalysisError as exc:
        raise UsageError(str(exc)) from exc
    print("\n".join(summary_table(found.figures)))
    print(f"\nAnalysis in {out}/ (sensitivity_report.md, CSVs, PNGs)")
    return 0
