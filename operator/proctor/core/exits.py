"""What a `proctor` command's exit status means: one mapping for every command.

    0    completed, every item graded
    1    completed, some items ended in error (the count is printed)
    2    bad input: a manifest, dataset, predictions file or results folder that cannot
         be used (the message names the problem)
    3    not run, or stopped: the agent cannot be reached, or stopped answering mid-run
         (finished items kept), the results folder is in use by another run, the disk
         is full
    4    stopped by a budget (Evaluation or AgentUnderTest spec.budget): no new task was
         sent past its cap; finished items are kept, summary.json names the cap
    130  interrupted (Ctrl-C): finished items are kept, run again to resume
    141  the reader of the output went away (`| head`): it stops quietly, as on SIGPIPE
"""

from __future__ import annotations

import errno
from collections.abc import Iterable
from enum import IntEnum

from proctor.core.model import Summary


class ExitCode(IntEnum):
    OK = 0
    ITEM_ERRORS = 1
    BAD_INPUT = 2
    NOT_RUN = 3
    BUDGET_SPENT = 4
    INTERRUPTED = 130
    BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell shows for a process the signal ended


class NotRun(Exception):
    """The run could not start, or had to stop, for a reason outside its input
    (exit 3); the message says why and what to do."""


class BudgetSpent(Exception):
    """A total cap of the agent's budget was reached: the run stopped sending tasks (exit
    4); what finished is kept."""


class Interrupted(Exception):
    """Work stopped because the run is stopping (Ctrl-C, a full disk): nothing of it is
    kept, and the item runs again on resume."""


class DiskFull(NotRun):
    """The disk filled up: the run stopped as if interrupted, nothing of it was stored
    as a result."""


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno == errno.ENOSPC


class UsageError(Exception):
    """A mistake in how the command was called."""


class BadInput(ValueError):
    """Input a command cannot use (exit 2): a manifest, dataset, predictions file, results
    folder, ... Each module's own error derives from it, so this mapping needs none of
    them; the message names the problem."""


def for_exception(exc: BaseException) -> ExitCode | None:
    """The exit status for an exception a command let through; None for a bug."""
    if isinstance(exc, KeyboardInterrupt):
        return ExitCode.INTERRUPTED
    if isinstance(exc, BudgetSpent):
        return ExitCode.BUDGET_SPENT
    if isinstance(exc, NotRun) or is_disk_full(exc):
        return ExitCode.NOT_RUN
    if isinstance(exc, (BadInput, UsageError)) or is_bad_path(exc):
        return ExitCode.BAD_INPUT
    return None


# What the system says of a path a person gave (a file missing, a folder in a file's
# place, a read-only mount): the path, not the program, is wrong.
_PATH_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError,
                FileExistsError)
_PATH_ERRNOS = frozenset({errno.EROFS, errno.ENAMETOOLONG, errno.ELOOP})


def is_bad_path(exc: BaseException) -> bool:
    return isinstance(exc, _PATH_ERRORS) or (isinstance(exc, OSError)
                                             and exc.errno in _PATH_ERRNOS)


def for_summaries(summaries: Iterable[Summary]) -> ExitCode:
    """0 when every item of every summary was graded, 1 when some ended in error."""
    return ExitCode.ITEM_ERRORS if any(error_items(s) for s in summaries) else ExitCode.OK


def error_items(summary: Summary) -> int:
    return sum(summary.error_kinds.values())


def message_for(exc: BaseException) -> str:
    """The one line a person reads for an exception `for_exception` knows."""
    if is_disk_full(exc):
        filename = getattr(exc, "filename", None)
        where = f" ({filename})" if filename else ""
        return (f"the disk is full{where}: finished items are kept; free some space and "
                f"run again to resume")
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)
