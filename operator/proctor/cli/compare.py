"""`proctor compare`: a paired comparison of finished runs on the same tasks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from proctor.core.exits import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    cmp_ = sub.add_parser("compare", help="paired comparison of two or more finished runs on "
                                          "the same tasks: difference, interval, test, "
                                          "detectable effect, tasks needed")
    cmp_.add_argument("results", nargs="+", help="results folders, two or more (matched by "
                                                 "task, variant and repeat)")
    cmp_.add_argument("--output-dir", required=True, help="where compare_report.md, "
                                                          "comparison.csv and sample_size.csv go")
    cmp_.add_argument("--detect", type=float, action="append", metavar="POINTS",
                      help="a difference in percentage points to plan for (repeatable; "
                           "default 5 and 10)")
    cmp_.add_argument("--score", choices=("resolved", "f2p"), default="resolved")
    cmp_.add_argument("--seed", type=int, help="the bootstrap's and test's seed")
    cmp_.add_argument("--resamples", type=int, help="bootstrap resamples (default 2000)")
    cmp_.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    from proctor.analysis.compare import holm, table, warnings
    from proctor.analysis.run import AnalysisError, compare

    out = Path(args.output_dir)
    chosen = {k: v for k, v in (("seed", args.seed), ("resamples", args.resamples)) if v}
    try:
        found = compare([Path(f) for f in args.results], out, points=args.detect or (5.0, 10.0),
                        score=args.score, **chosen)
    except AnalysisError as exc:
        raise UsageError(str(exc)) from exc
    for line in warnings(found):  # said, not refused: the comparison may still be wanted
        print(line, file=sys.stderr)
    print("\n".join(table(found, holm([c.p_value for c in found]))))
    print(f"\nComparison in {out}/ (compare_report.md, comparison.csv, sample_size.csv)")
    return 0
