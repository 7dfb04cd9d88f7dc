"""What a run does on a folder that already holds results: the resume rules (pure).

* An item without a result runs.
* An item that ended in an infra or sandbox error runs again, testing the patch already
  obtained: the agent is not asked again. (Its patch must still be in the item's work
  folder; when it is gone, the error is kept and `--retry-errors` asks again.)
* With `--retry-errors`, an item that ended in an agent or timeout error runs again,
  and the agent is asked again.
* Every other result is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from proctor.core.model import ErrorKind, RunResult, WorkItem

RETESTED = (ErrorKind.INFRA, ErrorKind.SANDBOX)
"""Errors of the machinery, not the agent: its patch is tested again."""
ASKED_AGAIN = (ErrorKind.AGENT, ErrorKind.TIMEOUT)
"""Errors the agent's answer may have caused: run again only with --retry-errors."""


@dataclass(frozen=True)
class Todo:
    """An item to run, and what an earlier attempt left for it."""

    item: WorkItem
    kept_patch: str | None = None
    """The patch obtained before ("" for none), tested without asking the agent."""
    attempts: int = 1
    """The attempt this run makes (earlier attempts + 1)."""


@dataclass(frozen=True)
class ResumePlan:
    todo: list[Todo] = field(default_factory=list)
    kept: int = 0
    """Items whose result stands."""
    retested: int = 0
    """Infra and sandbox errors tested again with their patch."""
    asked_again: int = 0
    """Agent and timeout errors run again, the agent asked again (--retry-errors)."""
    patch_lost: int = 0
    """Infra and sandbox errors kept because their patch is no longer on disk."""
    errors_kept: int = 0
    """Agent and timeout errors kept (no --retry-errors): `--retry-errors` runs them."""


def resume_plan(items: Sequence[WorkItem], previous: Mapping[str, RunResult],
                kept_patch: Callable[[WorkItem, RunResult], str | None],
                retry_errors: bool = False) -> ResumePlan:
    """The items to run, given the results already on disk (by item id).

    `kept_patch(item, result)` is the patch an earlier attempt obtained ("" for none),
    or None when it is lost.
    """
    todo: list[Todo] = []
    kept = retested = asked = lost = errors = 0
    for item in items:
        before = previous.get(item.id)
        if before is None:
            todo.append(Todo(item))
            continue
        again = before.attempts + 1
        if before.error_kind in RETESTED:
            patch = kept_patch(item, before)
            if patch is not None:
                todo.append(Todo(item, patch, again))
                retested += 1
                continue
            if not retry_errors:
                lost += 1
                kept += 1
                continue
        if retry_errors and before.error_kind is not None:
            todo.append(Todo(item, None, again))
            asked += 1
            continue
        kept += 1
        errors += before.error_kind in ASKED_AGAIN
    return ResumePlan(todo, kept, retested, asked, lost, errors)


def resume_message(plan: ResumePlan, planned: int, asks_agent: bool = True) -> str | None:
    """The line a resumed run starts with; None on a fresh run."""
    if not (plan.kept or plan.retested or plan.asked_again):
        return None
    parts = [f"{plan.kept} of {planned} items already done"]
    if plan.retested:
        parts.append(f"{plan.retested} that ended in infra or sandbox errors run again with "
                     f"the patch already obtained (the agent is not asked again)")
    if plan.asked_again:
        parts.append(f"{plan.asked_again} that ended in errors run again"
                     + (", asking the agent again" if asks_agent else ""))
    if plan.patch_lost:
        parts.append(f"{plan.patch_lost} errors kept: their patch is gone from the work "
                     f"folder (--retry-errors asks the agent again)")
    new = len(plan.todo) - plan.retested - plan.asked_again
    parts.append(f"{new} new")
    if plan.errors_kept:
        parts.append(f"{plan.errors_kept} ended in agent or timeout errors and are kept: "
                     f"add --retry-errors to run them again"
                     + (", asking the agent again" if asks_agent else ""))
    return "Resuming: " + "; ".join(parts)
