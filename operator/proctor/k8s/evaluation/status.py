"""The status of an Evaluation, rebuilt on each pass (pure): its item counts, headline table
and the one word ``kubectl get`` shows. Its conditions follow the Kubernetes API conventions
(`proctor.k8s.machinery.conditions`).

The condition types Proctor writes on an Evaluation:

* ``Ready``: the spec is valid and its agent, dataset and images can be used
  (False with reason InvalidSpec, AgentNotFound, ...);
* ``Running``: items are in flight (reason Suspended while ``spec.suspend`` holds);
* ``Succeeded``: every planned item has a result;
* ``Degraded``: something needs a person (pods refused, images that cannot be pulled).

The Evaluation's status (`reconcile.build_status`, from the pieces here) holds counts and
the headline table only, never per-item details, so that it stays a few KiB at any size
(an object must stay far under etcd's 1.5 MiB limit; 2,000 items of details would not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic.alias_generators import to_camel

from proctor.core.metrics import eval_result
from proctor.core.model import ORIGINAL_VARIANT, RunResult
from proctor.k8s.machinery.conditions import find_condition


@dataclass(frozen=True)
class ItemCounts:
    """Work items by where they stand, as observed on this pass."""

    total: int
    """Items planned."""
    waiting: int = 0
    """Not started: no Job yet (maxConcurrentRows, suspend)."""
    queued: int = 0
    """A Job exists, suspended: it waits for Kueue to admit it (again, when preempted)."""
    pending: int = 0
    """A Job exists (admitted, where Kueue queues it), no step has started."""
    running: int = 0
    """A step is running."""
    done: int = 0
    """A result is kept (any outcome, errors included)."""
    retries: int = 0
    """Attempts made again after an infrastructure failure, over all items."""


def results_table(results: Sequence[RunResult]) -> dict[str, Any]:
    """The headline figures (original-prompt items; fractions 0-1) under camelCase names."""
    original = [r for r in results if r.variant_id == ORIGINAL_VARIANT]
    figures = eval_result(original).model_dump()
    return {to_camel(name): value for name, value in figures.items()}


def status_reason(conditions: Sequence[Mapping[str, Any]]) -> str:
    """One word for ``kubectl get``: why the Evaluation cannot go on (Ready=False's reason:
    InvalidSpec, AgentNotFound, LocalEndpoint, ...) or what a person should look at
    (Degraded's), else Suspended, else where it stands (AllItemsDone, ItemsInFlight,
    ItemsQueued, Idle)."""
    def reason(type_: str, status: str) -> str | None:
        found = find_condition(conditions, type_)
        return found.get("reason") if found and found.get("status") == status else None
    running = (find_condition(conditions, "Running") or {}).get("reason")
    return (reason("Ready", "False") or reason("Degraded", "True")
            or ("Suspended" if running == "Suspended" else None)
            or reason("Succeeded", "True") or running or "Unknown")
