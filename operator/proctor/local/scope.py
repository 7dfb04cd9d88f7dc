"""How one run of the embedded engine ends early: one cancellation scope on its event loop.

Ctrl-C, a full disk, the dead-agent rule (and anything else that ends the run) call
`RunScope.end(why)`: it sets the run's `stop` event and calls the sandboxes' `stop_all`
(which kill the test processes and containers of the threads at the edges), then cancels
the run's task, whose task group cancels every item; the run then raises `why`.

Blocking work runs in threads only at the edges (`at_edge`): a thread cannot be
cancelled, so a cancelled item waits for its thread, which `stop_all` ends within moments
(a test step's processes killed, its container removed); nothing a run started outlives it.

A second Ctrl-C while stopping quits at once (exit 130; finished items are already in
results.jsonl). One Ctrl-C delivered twice is not a second one: `timeout -s INT` sends
the signal to the process and then to its whole process group, so the process gets
two at once (`same_keypress`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

from proctor.core.exits import DiskFull, ExitCode, is_disk_full

T = TypeVar("T")

REPEAT_S = 0.5
"""SIGINTs this close together are one Ctrl-C delivered twice, not a second one."""


def same_keypress(first_at: float | None, now: float) -> bool:
    """Whether a SIGINT at `now` repeats the one handled at `first_at` (monotonic s)."""
    return first_at is not None and now - first_at < REPEAT_S


def stopping_line(why: BaseException, running: int) -> str | None:
    """What the run prints when it starts stopping; None when the reason says it later."""
    what = f"{running} item{'s' if running != 1 else ''} in flight"
    if isinstance(why, KeyboardInterrupt):
        return (f"proctor: interrupted: stopping {what} (test processes killed, agent "
                f"requests abandoned); Ctrl-C again quits at once")
    if isinstance(why, DiskFull) or is_disk_full(why):
        return f"proctor: the disk is full: stopping {what}"
    return None


class Stoppable(Protocol):
    def stop_all(self) -> None: ...


class RunScope:
    """The one scope a run's items are cancelled by; see the module's docstring."""

    def __init__(self, stop: threading.Event, sandboxes: Stoppable | None = None):
        self.stop, self.sandboxes = stop, sandboxes
        self.why: BaseException | None = None
        """What ended the run, once something has."""
        self.running = 0
        """Items in flight (holding a row)."""
        self._task: asyncio.Task[object] | None = None
        self._stopped: asyncio.Future[None] | None = None
        self._interrupted_at: float | None = None

    def end(self, why: BaseException) -> None:
        """End the run with `why` (the first reason wins): stop the edges, cancel the
        items."""
        if self.why is not None:
            return
        self.why = why
        line = stopping_line(why, self.running)
        if line:
            print(line, file=sys.stderr)
        self.halt()
        if self._task is not None:
            self._task.cancel()

    def halt(self) -> None:
        """Tell the threads at the edges to stop: the `stop` event, and `stop_all` (in a
        thread: Docker's takes a request per container)."""
        self.stop.set()
        if self._stopped is None and self.sandboxes is not None:
            self._stopped = asyncio.get_running_loop().run_in_executor(
                None, self.sandboxes.stop_all)

    async def stopped(self) -> None:
        """Wait for `stop_all` to finish, if it was called."""
        if self._stopped is not None:
            with contextlib.suppress(Exception):  # a daemon gone away: nothing left to kill
                await self._stopped

    async def at_edge(self, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` in a thread. Cancelled, it halts the run's edges and waits for the
        thread; what the thread finished anyway (before `stop` reached it) is kept: the
        item goes on and is recorded."""
        future = asyncio.get_running_loop().run_in_executor(None, fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            self.halt()
            try:
                value = await future
            except Exception:
                raise asyncio.CancelledError from None
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            return value

    @contextlib.contextmanager
    def owning(self, task: asyncio.Task[object]) -> Iterator[None]:
        """Cancel `task` when the run ends; and on the main thread, Ctrl-C ends it."""
        self._task = task
        loop = task.get_loop()
        if threading.current_thread() is not threading.main_thread():
            yield  # a server's worker thread: no signals reach it
            return
        previous = signal.getsignal(signal.SIGINT)
        loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            # The repeat of a Ctrl-C may come after a run that stopped at once.
            signal.signal(signal.SIGINT, previous if self._interrupted_at is None
                          else self._repeat_or(previous))

    def _repeat_or(self, previous: Any) -> Callable[[int, Any], None]:
        """A SIGINT handler that ignores the repeat of the run's Ctrl-C and is `previous`
        otherwise."""
        first = self._interrupted_at

        def handler(signum: int, frame: Any) -> None:
            if same_keypress(first, time.monotonic()) or previous == signal.SIG_IGN:
                return
            (previous if callable(previous) else signal.default_int_handler)(signum, frame)

        return handler

    def _on_sigint(self) -> None:
        now = time.monotonic()
        if self.why is None:
            self._interrupted_at = now
            self.end(KeyboardInterrupt())
            return
        if same_keypress(self._interrupted_at, now):
            return
        print("proctor: interrupted again: quitting now; finished items are kept",
              file=sys.stderr)
        os._exit(ExitCode.INTERRUPTED)
