"""Progress of a run on stderr: tqdm's bar on a terminal, plain lines now and then elsewhere.

Where stderr is a file or a pipe (CI logs, `kubectl logs`), a redrawn bar is no bar: every
redraw (tqdm redraws on each finished item) lands in the log. There a line is written only
when a tenth more of the items are done or 30 s have passed since the last, and at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol, TextIO

from tqdm import tqdm

EVERY_FRACTION = 0.1
EVERY_SECONDS = 30.0


class Progress(Protocol):
    def update(self, n: int = 1) -> Any: ...
    def set_postfix_str(self, s: str = "", refresh: bool = True) -> Any: ...
    def __enter__(self) -> Any: ...
    def __exit__(self, *exc: object) -> Any: ...


def line_due(done: int, total: int, last_done: int, elapsed_s: float, *,
             every_fraction: float = EVERY_FRACTION,
             every_seconds: float = EVERY_SECONDS) -> bool:
    """Whether a plain progress line is due: the last item, another `every_fraction` of
    the items since the last line, or `every_seconds` since it (with something new)."""
    if done >= total:
        return True
    step = max(1, int(total * every_fraction))
    return done - last_done >= step or (done > last_done and elapsed_s >= every_seconds)


def progress_line(desc: str | None, done: int, total: int, elapsed_s: float,
                  postfix: str = "") -> str:
    """`desc: 12/40 items (30%), 95 s; last: <postfix>`."""
    percent = 100 * done // total if total else 100
    head = f"{desc}: " if desc else ""
    tail = f"; last: {postfix}" if postfix else ""
    return f"{head}{done}/{total} items ({percent}%), {elapsed_s:.0f} s{tail}"


class LineProgress:
    """tqdm's interface as the engine uses it, writing a plain line only when due."""

    def __init__(self, total: int, desc: str | None, file: TextIO,
                 clock: Callable[[], float] = time.monotonic):
        self.total, self.desc, self.file, self.clock = total, desc, file, clock
        self.done = self.last_done = 0
        self.postfix = ""
        self.started = self.last_time = clock()

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = s

    def update(self, n: int = 1) -> None:
        self.done += n
        now = self.clock()
        if line_due(self.done, self.total, self.last_done, now - self.last_time):
            print(progress_line(self.desc, self.done, self.total, now - self.started,
                                self.postfix), file=self.file, flush=True)
            self.last_done, self.last_time = self.done, now

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _Silent:
    def update(self, n: int = 1) -> None:
        return None

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        return None

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def progress_for(total: int, enabled: bool, desc: str | None, file: TextIO) -> Progress:
    """A bar on a terminal, plain lines now and then on anything else, nothing when
    disabled or when there is nothing to do."""
    if not enabled or not total:
        return _Silent()
    if _is_terminal(file):
        bar: Progress = tqdm(total=total, unit="item", desc=desc, file=file, mininterval=0.5,
                             dynamic_ncols=True)  # tqdm ships no types
        return bar
    return LineProgress(total, desc, file)


def _is_terminal(file: TextIO) -> bool:
    try:
        return file.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False
