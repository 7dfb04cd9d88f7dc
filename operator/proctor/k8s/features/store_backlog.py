"""Items kept in full while the object store was down, moved to it once it answers (pure).

An upload that failed keeps the item's whole result in its ConfigMap, labelled
LABEL_UPLOAD=failed (`store.result_configmap`): the backlog. Each pass the operator plans
which of them to move (`plan_moves`); the shell (`act.Pass.move_backlog`) uploads each
one's files, reads them back and checks them, creates its record ConfigMap (a name of its
own, RECORD_KIND), and only then deletes the full one. An operator that dies at any step
loses nothing: before the record exists the full ConfigMap is there (the upload is made
again, the same bytes to the same keys); after, the plan sees both and only deletes the
full one (`Moves.drop`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Set
from dataclasses import dataclass, field
from typing import NamedTuple

from proctor.core.model import RunResult
from proctor.k8s.children.store import read_record, upload_failed
from proctor.k8s.machinery.objects import ConfigMap

BATCH = 16
"""Items moved in one pass while the store answers: the pass waits for their uploads."""
RETRY_SECONDS = 60.0
"""After a move that failed, the store is tried again (one item) this much later: a store
that is down takes seconds per failed upload, which every pass would otherwise wait for."""


@dataclass
class Uploads:
    """How this process's uploads of one Evaluation's results went (StoreUnavailable)."""

    error: str | None = None
    """The last upload's failure; None once one succeeds."""
    tried: bool = False
    """Whether this process has tried an upload."""
    failed_at: float | None = None
    """Monotonic time of the last failed upload."""
    moved: set[str] = field(default_factory=set)
    """Full ConfigMaps moved to the store (their deletion may not have reached the index
    yet)."""

    def uploaded(self, error: str | None) -> None:
        """Note an upload's end: ``error`` why it failed, or None."""
        self.tried, self.error = True, error
        self.failed_at = time.monotonic() if error is not None else None


class Kept(NamedTuple):
    """What the operator's index keeps of one result ConfigMap (its logs stay on the
    server)."""

    owner: str | None
    """The owning Evaluation's uid."""
    result: RunResult
    name: str
    """The ConfigMap's name."""
    backlog: bool = False
    """Kept in full because its upload failed."""
    record: bool = False
    """A record: the item's files are in the store."""


def kept_of(configmap: ConfigMap, owner: str | None, result: RunResult) -> Kept:
    return Kept(owner, result, (configmap.get("metadata") or {}).get("name", ""),
                backlog=upload_failed(configmap), record=read_record(configmap) is not None)


@dataclass(frozen=True)
class Moves:
    """What one pass does about the backlog."""

    move: tuple[str, ...] = ()
    """Full ConfigMaps to move to the store (upload, check, record, delete)."""
    drop: tuple[str, ...] = ()
    """Full ConfigMaps whose item has its record already (an operator stopped between
    the two): only deleted."""


def backlog(kept: Iterable[Kept]) -> list[Kept]:
    """The results kept in full because their upload failed, by name."""
    return sorted((k for k in kept if k.backlog), key=lambda k: k.name)


def plan_moves(kept: Iterable[Kept], *, failed_at: float | None, now: float,
               moved: Set[str] = frozenset(), batch: int = BATCH,
               retry_seconds: float = RETRY_SECONDS) -> Moves:
    """Which full ConfigMaps to move this pass. ``failed_at``: when the last upload failed
    (None: the last one succeeded, or none was tried since the operator started). While
    the store answers, up to ``batch`` are moved; after a failure, one, every
    ``retry_seconds``, tries whether it answers again. ``moved``: names moved already,
    which the index may show a while yet."""
    kept = [k for k in kept if k.name not in moved]
    recorded = {k.result.item_id for k in kept if k.record}
    pending = backlog(kept)
    drop = tuple(k.name for k in pending if k.result.item_id in recorded)
    todo = [k.name for k in pending if k.result.item_id not in recorded]
    if failed_at is not None:
        todo = todo[:1] if now - failed_at >= retry_seconds else []
    return Moves(move=tuple(todo[:batch]), drop=drop)
