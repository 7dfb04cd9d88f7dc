"""Kubernetes' workqueue on one asyncio loop: each key at most once in the queue, never
processed twice at once, and processed once more when added while it is processed.

client-go's shape (a queue, a dirty set, a processing set), with asyncio tasks as its
workers: so every change of an Evaluation's Jobs and pods, however many come at once,
makes one pass, and two passes of one Evaluation never overlap.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

log = logging.getLogger("proctor.workqueue")


K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self, process: Callable[[K], Awaitable[None]], workers: int = 4):
        self._process, self._workers = process, workers
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._tasks: list[asyncio.Task[None]] = []

    def add(self, key: K) -> None:
        """Process ``key`` soon (once, however often added before it is)."""
        if not self._tasks:  # started by the first add, on the loop (and context) it runs on
            self._tasks = [asyncio.get_running_loop().create_task(self._work())
                           for _ in range(self._workers)]
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.put_nowait(key)

    def add_after(self, key: K, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self.add, key)

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._dirty.discard(key)
            self._processing.add(key)
            try:
                await self._process(key)
            except Exception:  # the process logs its own failures; this keeps the worker
                log.exception("Processing %s failed", key)
            finally:
                self._processing.discard(key)
            if key in self._dirty:  # added while processed: once more
                self._queue.put_nowait(key)

    async def idle(self) -> None:
        """Wait until nothing is queued or processed (tests, shutdown)."""
        while self._dirty or self._processing:
            await asyncio.sleep(0.05)

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks = []
