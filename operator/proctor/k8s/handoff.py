"""A slot handed from a Job that ended well to the next item, without waiting for a pass.

Passes decide which items start (`proctor.k8s.reconcile.decide`). Between two passes a
Job that ends frees its slot, and waiting for the next pass (at least `PASS_SECONDS`
apart, then the pass itself) leaves the slot empty for tens of milliseconds: with short
Jobs, percents of the cluster. So each pass leaves the items next in line
(`Decision.ahead`) here, and when the Jobs' watch shows a Job that succeeded, its slot
goes to the first of them at once.

Each finished Job's slot is given out once: by the first pass that sees the Job finished
(it counts the Jobs that hold slots afresh) or by a hand-off, whichever comes first
(`accounted`). Only a Job that succeeded hands its slot on: a failed one may be retried,
and its retry takes the slot. Passes and hand-offs both run on the operator's event
loop, one at a time, so neither sees the other half done. Nothing here talks to the API.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from proctor.k8s.podstatus import ItemState, Phase, job_finished
from proctor.model import WorkItem

Obj = dict[str, Any]


@dataclass
class Handoff:
    """One Evaluation's items next in line, and the finished Jobs whose slots are given."""

    version: tuple[str, Any] | None = None
    """The Evaluation's uid and spec generation the line was drawn up for."""
    line: deque[WorkItem] = field(default_factory=deque)
    accounted: set[str] = field(default_factory=set)
    """Finished Jobs (by name) whose slots a pass or a hand-off has given out."""
    start: Callable[[WorkItem], None] | None = None
    """Starts an item's Job (set by the pass that drew up the line)."""

    def renew(self, version: tuple[str, Any], line: Sequence[WorkItem], jobs: Iterable[Obj],
              start: Callable[[WorkItem], None]) -> None:
        """A pass decided on ``jobs`` (every Job it counted): the slots of the finished ones
        are its to give, and ``line`` (what it would start next) is the new line."""
        self.version, self.line, self.start = version, deque(line), start
        self.accounted.update(job["metadata"]["name"] for job in jobs if job_finished(job))

    def take(self, job: Obj, state: ItemState, version: tuple[str, Any], busy: Set[str]
             ) -> WorkItem | None:
        """The item that gets the slot of ``job`` (as the watch shows it now, with its
        `item_state`), or None: the Job has not succeeded, its slot is given already, the
        Evaluation changed since the line was drawn up (suspended, say), or the line is
        empty. ``busy``: items whose actions are under way (skipped)."""
        meta = job["metadata"]
        if (version != self.version or meta["name"] in self.accounted
                or meta.get("deletionTimestamp") or not job_finished(job)
                or state.phase != Phase.SUCCEEDED):
            return None
        self.accounted.add(meta["name"])
        while self.line:
            item = self.line.popleft()
            if item.id not in busy:
                return item
        return None

    def gone(self, job: Obj) -> None:
        """The Job is deleted: its name is no longer needed (a new attempt has its own)."""
        self.accounted.discard(job["metadata"]["name"])
