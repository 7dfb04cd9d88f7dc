"""The `proctor` command: run evaluations, validate datasets, run a work item's steps."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from proctor import __version__
from proctor.cli import (
    analyze,
    compare,
    crds,
    demo,
    export,
    green,
    images,
    operator,
    render,
    results,
    run,
    runner,
    scenario,
    show,
    validate,
    variants,
)
from proctor.cli import eval as eval_command  # `eval` alone would hide the builtin
from proctor.core import exits
from proctor.core.exits import ExitCode

EXIT_EPILOG = "exit status:\n" + (exits.__doc__ or "").split("\n\n", 1)[1].rstrip()

# Each module declares its command's parser (`add_parser`), whose `func` runs it; in this
# order, after `agent`, `proctor --help` lists them. Each imports what its command needs
# when it runs, so that `proctor --help` and a Job's `proctor runner` start fast.
COMMANDS = (run, eval_command, demo, analyze, compare, variants, validate, scenario, green,
            export, images, operator, render, crds, show, results, runner)


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
    for command in COMMANDS:
        command.add_parser(sub)
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
