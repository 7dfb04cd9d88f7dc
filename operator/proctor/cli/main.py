"""The `proctor` command: run evaluations, validate datasets, run a work item's steps."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from proctor import __version__
from proctor.cli import (
    analyze,
    compare,
    crds,
    export,
    green,
    images,
    operator,
    render,
    results,
    run,
    runner,
    validate,
    variants,
)
from proctor.cli import eval as eval_command  # `eval` alone would hide the builtin
from proctor.cli.options import (
    add_sandbox_options,
    sandbox_options,
)
from proctor.cli.summaries import print_errors
from proctor.core import exits
from proctor.core.exits import ExitCode

EXIT_EPILOG = "exit status:\n" + (exits.__doc__ or "").split("\n\n", 1)[1].rstrip()


def _reliability_demo(args: argparse.Namespace) -> int:
    from proctor.analysis.markdown import summary_table
    from proctor.cli.demo import run_reliability_demo

    out = Path(args.output_dir or "proctor-results/demo-reliability")
    found = run_reliability_demo(out, max_concurrent_rows=args.max_concurrent_rows,
                                 progress=not args.quiet, sandbox=sandbox_options(args))
    print("\n".join(summary_table(found.figures)))
    print(f"\nResults in {out}/<agent>/; analysis in {out}/analysis/ (sensitivity_report.md)")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from proctor.cli.demo import run_demo
    from proctor.core.report import leaderboard

    if args.reliability:
        return _reliability_demo(args)
    out = Path(args.output_dir or "proctor-results/demo")
    summaries = run_demo(out, max_concurrent_rows=args.max_concurrent_rows,
                         progress=not args.quiet, sandbox=sandbox_options(args))
    print("\n".join(leaderboard(summaries)))
    print_errors(list(summaries.values()))
    print(f"\nResults in {out}/<agent>/ (summary.json, report.md with every column, "
          f"results.jsonl)")
    return exits.for_summaries(summaries.values())


def cmd_scenario_import(args: argparse.Namespace) -> int:
    from proctor.cli.scenario import import_scenario, pairs, write

    imported = import_scenario(Path(args.scenario), pairs(args.endpoint, "--endpoint"),
                               pairs(args.image, "--image"))
    lines = write(imported, Path(args.output_dir) if args.output_dir else None)
    if lines:
        print("\n".join(lines), file=sys.stdout if args.output_dir else sys.stderr)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from proctor.cli.show import show

    print(show(Path(args.results), args.item))
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, but a mistake in the flags is one line (with where to read more), as
    every other bad input is, not the usage text followed by the error."""

    def error(self, message: str) -> NoReturn:
        self.exit(ExitCode.BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} "
                                      f"--help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="proctor", description=__doc__, epilog=EXIT_EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"proctor {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    from proctor.agents.cli import add_agent_parser

    add_agent_parser(sub)

    run.add_parser(sub)
    eval_command.add_parser(sub)

    dem = sub.add_parser("demo", help="serve the reference agents on loopback and evaluate "
                                      "each over A2A on the demo dataset")
    dem.add_argument("--output-dir", default=None,
                     help="results folder, one subfolder per agent (resumed if present); "
                          "default proctor-results/demo (or demo-reliability)")
    dem.add_argument("--reliability", action="store_true",
                     help="oracle and sensitive with 3 template variants, 3 repeats and a "
                          "fixed seed, then `proctor analyze` of both")
    dem.add_argument("--max-concurrent-rows", type=int, default=2,
                     help="items run at a time (default 2); with --reliability, the oracle's "
                          "only: the seeded sensitive agent runs one at a time")
    dem.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    add_sandbox_options(dem, default="process")
    dem.set_defaults(func=cmd_demo)

    analyze.add_parser(sub)
    compare.add_parser(sub)
    variants.add_parser(sub)
    validate.add_parser(sub)

    scen = sub.add_parser("scenario", help="Agentbeats scenarios")
    scen_sub = scen.add_subparsers(dest="scenario_command", required=True)
    imp = scen_sub.add_parser("import", help="turn an Agentbeats scenario.toml into "
                                             "Proctor's manifests (checked against the CRDs)")
    imp.add_argument("scenario", help="a scenario.toml")
    imp.add_argument("--output-dir", help="write one YAML file per manifest here (default: "
                                          "a YAML stream on stdout)")
    imp.add_argument("--endpoint", action="append", metavar="NAME=URL",
                     help="where participant NAME already runs; repeatable")
    imp.add_argument("--image", action="append", metavar="NAME=IMAGE",
                     help="run participant NAME from this image, as a sidecar of each task's "
                          "pod (cluster); repeatable")
    imp.set_defaults(func=cmd_scenario_import)

    green.add_parser(sub)
    export.add_parser(sub)
    images.add_parser(sub)
    operator.add_parser(sub)
    render.add_parser(sub)
    crds.add_parser(sub)

    sho = sub.add_parser("show", help="one item for a person to read: its task, what the "
                                      "agent sent back, the patch, the test log, the verdict")
    sho.add_argument("results", help="a results folder (proctor run's or eval's --output-dir)")
    sho.add_argument("item", help="instance/variant/repeat, an instance id (its original "
                                  "prompt's first repeat), or the start of an item id")
    sho.set_defaults(func=cmd_show)

    results.add_parser(sub)
    runner.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status follows `proctor.core.exits` (docs/commands.md lists it)."""
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # a reader gone (`| head`) shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        return _reader_gone()
    except BaseException as exc:
        code = exits.for_exception(exc)
        if code is None:
            raise
        if code == ExitCode.INTERRUPTED:
            print("proctor: interrupted; finished items are kept, run again to resume",
                  file=sys.stderr)
        elif code == ExitCode.BUDGET_SPENT:
            print(f"proctor: {exc}", file=sys.stderr)
        else:
            print(f"proctor: error: {exits.message_for(exc)}", file=sys.stderr)
        return code


def _reader_gone() -> int:
    """The reader of stdout left (`proctor variants show ... | head`): stop quietly, as a
    program killed by SIGPIPE does. stdout goes to devnull so that the interpreter's own
    flush at exit does not fail again (Python's docs, "Note on SIGPIPE")."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: no fileno (captured)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return ExitCode.BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
