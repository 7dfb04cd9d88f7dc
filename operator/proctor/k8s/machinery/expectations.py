"""What the controller wrote that its indexes may not show yet (Kubernetes' "expectations").

A watch delivers a write some milliseconds, under load seconds, after it is made. Until
then a pass must still count the Jobs this process created (or it would start their items
again and overshoot maxConcurrentRows), see the results it kept (or it would read their
logs and ask for their retries again), and not delete a Job twice. One `Expectations`
per Evaluation, in its `Tracked` state; nothing here talks to the API.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from proctor.core.model import RunResult
from proctor.k8s.machinery.objects import Job, Obj

FORGET_AFTER_S = 120.0
"""A write older than this is surely in the index (or the watch is broken, and stale
memories must not mislead the resyncs either)."""


@dataclass
class Expectations:
    clock: Callable[[], float] = time.monotonic
    jobs: dict[str, tuple[float, Job]] = field(default_factory=dict)
    """Created Jobs by name, until the index shows them."""
    results: dict[str, tuple[float, RunResult]] = field(default_factory=dict)
    """Kept results by item id, until the index shows them."""
    deleted: dict[str, float] = field(default_factory=dict)
    """Deleted Jobs by name (each attempt of an item has a name of its own)."""

    def created(self, job: Obj) -> None:
        """A Job this process built and created: as the API will answer it, less what the
        server adds (no status: read as not started), hence the cast."""
        self.jobs[job["metadata"]["name"]] = (self.clock(), cast(Job, job))

    def kept(self, result: RunResult) -> None:
        self.results[result.item_id] = (self.clock(), result)

    def delete(self, job: Job) -> None:
        self.deleted[job["metadata"]["name"]] = self.clock()
        self.jobs.pop(job["metadata"]["name"], None)

    def was_deleted(self, job: Job) -> bool:
        return job["metadata"]["name"] in self.deleted

    def with_jobs(self, observed: Sequence[Job]) -> list[Job]:
        """The observed Jobs, less those deleted, and those created that the index does not
        show yet."""
        seen = {j["metadata"]["name"] for j in observed}
        self._forget(self.jobs, seen)
        return [*(j for j in observed if j["metadata"]["name"] not in self.deleted),
                *(job for name, (_, job) in self.jobs.items() if name not in self.deleted)]

    def with_results(self, observed: Iterable[RunResult]) -> list[RunResult]:
        """The observed results and those kept that the index does not show yet."""
        found = list(observed)
        self._forget(self.results, {r.item_id for r in found})
        return [*found, *(result for _, result in self.results.values())]

    def _forget(self, written: dict[str, tuple[float, Any]], seen: set[str]) -> None:
        now = self.clock()
        for key, (at, _) in list(written.items()):
            if key in seen or now - at > FORGET_AFTER_S:
                del written[key]
        for name, at in list(self.deleted.items()):
            if now - at > FORGET_AFTER_S:
                del self.deleted[name]
