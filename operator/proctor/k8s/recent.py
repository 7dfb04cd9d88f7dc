"""What the operator wrote that its watches may not show yet (read-your-writes).

A watch delivers a write some milliseconds, under load seconds, after it is made. Until
then a pass must still see the Jobs this process created (or it would start their items
again and overshoot maxConcurrentRows), the results it kept (or it would read their logs
again), and must not repeat work that is under way or done: deleting a Job, creating a
task ConfigMap. One `Recent` per Evaluation; nothing here talks to the API.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proctor.k8s.podstatus import job_finished
from proctor.model import RunResult

Obj = dict[str, Any]
FORGET_AFTER_S = 120.0
"""A write older than this is surely in the watch's cache (or the watch is broken and the
timer's passes must not be misled by stale memories either)."""


@dataclass
class Recent:
    clock: Callable[[], float] = time.monotonic
    jobs: dict[str, tuple[float, Obj]] = field(default_factory=dict)
    """Created Jobs by name."""
    results: dict[str, tuple[float, RunResult]] = field(default_factory=dict)
    """Kept results by item id."""
    deleted: dict[str, float] = field(default_factory=dict)
    """Deleted Jobs by name (each attempt of an item has a name of its own)."""
    tasks: set[str] = field(default_factory=set)
    """Instances whose task ConfigMap is known to exist (its content comes from the
    Evaluation's immutable spec, so one per instance for the Evaluation's life)."""
    preparing: set[str] = field(default_factory=set)
    """Instances whose task ConfigMap is being made ahead of their Jobs."""
    busy: set[str] = field(default_factory=set)
    """Items whose harvest, retry or clean-up is under way."""
    freeing: set[str] = field(default_factory=set)
    """Jobs being deleted once their results were kept: each hands its slot on as soon as
    it is gone (its deletion answered, or its watch showing it deleted, whichever first)."""

    def created(self, job: Obj) -> None:
        self.jobs[job["metadata"]["name"]] = (self.clock(), job)

    def uncreated(self, job: Obj) -> None:
        """Its creation failed."""
        self.jobs.pop(job["metadata"]["name"], None)

    def kept(self, result: RunResult) -> None:
        self.results[result.item_id] = (self.clock(), result)

    def was_deleted(self, job: Obj) -> bool:
        return job["metadata"]["name"] in self.deleted

    def delete(self, job: Obj) -> None:
        self.deleted[job["metadata"]["name"]] = self.clock()
        self.jobs.pop(job["metadata"]["name"], None)

    def with_jobs(self, observed: Sequence[Obj]) -> list[Obj]:
        """The observed Jobs and those created since that the watch has not shown yet (a
        Job created and deleted before the watch showed it is gone from both). A finished
        Job this process deleted is left out at once: it holds no slot and needs nothing
        more, and under load its deletion takes seconds to show. One that had not finished
        stays until the watch shows it gone: its pod may still be running."""
        seen = {j["metadata"]["name"] for j in observed}
        self._forget(self.jobs, seen)
        shown = [j for j in observed
                 if j["metadata"]["name"] not in self.deleted or not job_finished(j)]
        return [*shown, *(job for name, (_, job) in self.jobs.items()
                          if name not in self.deleted)]

    def with_results(self, observed: Iterable[RunResult]) -> list[RunResult]:
        """The same for kept results."""
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
