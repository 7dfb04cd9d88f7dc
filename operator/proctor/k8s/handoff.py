"""A slot handed from a Job that ended well to the next item, without waiting for a pass.

Passes decide which items start (`proctor.k8s.reconcile.decide`). Between two passes a
Job that ends frees its slot, and waiting for the next pass (at least `PASS_SECONDS`
apart, then the pass itself) leaves the slot empty for tens of milliseconds: with short
Jobs, percents of the cluster. So each pass leaves the items next in line
(`Decision.ahead`) here, and a Job that ends well gives its slot to the first of them at
once, at whichever of two moments comes first:

* the Jobs' watch shows it succeeded (`take`);
* the operator deleted it, its result kept (`free`): it read the result as soon as the
  pod ended, and deleted the Job with it, before the Job controller marked it Complete
  (which a real one does up to a second after the pod, as it batches pod updates).

Each slot is given out once. The slots are those the last pass counted (the Jobs it saw
running, `holding`), and those of the Jobs started since by the pass itself or by
hand-offs; a Job's slot is given by a hand-off only while it is in `holding`, and the next
pass counts afresh. Only a Job that ended well hands its slot on: a failed one may be
retried, and its retry takes the slot. Passes and hand-offs both run on the operator's
event loop, one at a time, so neither sees the other half done. Nothing here talks to the
API.
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
    """One Evaluation's items next in line, and the Jobs whose slots are to give."""

    version: tuple[str, Any] | None = None
    """The Evaluation's uid and spec generation the line was drawn up for."""
    line: deque[WorkItem] = field(default_factory=deque)
    holding: set[str] = field(default_factory=set)
    """Jobs (by name) whose slots a hand-off may give: those the last pass counted as
    running, and those started since."""
    start: Callable[[WorkItem], str] | None = None
    """Starts an item's Job and answers its name (set by the pass that drew up the line)."""

    def renew(self, version: tuple[str, Any], line: Sequence[WorkItem], jobs: Iterable[Obj],
              start: Callable[[WorkItem], str]) -> None:
        """A pass decided on ``jobs`` (every Job it counted): the slots of the finished ones
        are its to give, those of the others a hand-off's; ``line`` (what it would start
        next) is the new line."""
        self.version, self.line, self.start = version, deque(line), start
        self.holding = {job["metadata"]["name"] for job in jobs if not job_finished(job)}

    def started(self, name: str) -> None:
        """A Job started since the pass (by it, or in a slot handed on) holds a slot."""
        self.holding.add(name)

    def take(self, job: Obj, state: ItemState, version: tuple[str, Any], busy: Set[str]
             ) -> WorkItem | None:
        """The item that gets the slot of ``job`` (as the watch shows it now, with its
        `item_state`), or None: the Job has not succeeded, its slot is not a hand-off's to
        give (given already, or a pass's), the Evaluation changed since the line was drawn
        up (suspended, say), or the line is empty. ``busy``: items whose actions are under
        way (skipped)."""
        if (job["metadata"].get("deletionTimestamp") or not job_finished(job)
                or state.phase != Phase.SUCCEEDED):
            return None
        return self.free(job, version, busy)

    def free(self, job: Obj, version: tuple[str, Any], busy: Set[str]) -> WorkItem | None:
        """The item that gets the slot of ``job``, which holds it no more (it succeeded, or
        the operator deleted it once its result was kept), or None as for `take`."""
        name = job["metadata"]["name"]
        if version != self.version or name not in self.holding:
            return None
        self.holding.discard(name)
        while self.line:
            item = self.line.popleft()
            if item.id not in busy:
                return item
        return None

    def gone(self, job: Obj) -> None:
        """The Job is deleted: its slot, if it still held one, is the next pass's to count."""
        self.holding.discard(job["metadata"]["name"])
