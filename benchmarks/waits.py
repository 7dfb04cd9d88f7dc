"""Waiting for a condition in a benchmark: poll it, and end the benchmark with one line
naming what never came."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(check: Callable[[], object], what: str, timeout: float = 120.0,
          every: float = 0.02) -> None:
    """Return once ``check()`` is true; after ``timeout`` seconds, exit naming ``what``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"waited {timeout:g} s for {what}")
        time.sleep(every)
