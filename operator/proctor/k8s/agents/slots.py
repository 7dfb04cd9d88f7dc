"""An agent's task slots (spec.maxConcurrentTasks), shared by every Evaluation that uses it
(pure: what each Evaluation holds is its `Holding`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from proctor.core.spec import AgentUnderTest

K = TypeVar("K")


@dataclass
class Holding:
    """The agent's task slots one Evaluation holds (`reconcile.Decision.agent_tasks`)."""

    agent: tuple[str, str] | None = None
    """The agent those slots are of (namespace, name); None: no agent."""
    tasks: int = 0
    """How many slots it holds."""


def tasks_in_flight(holdings: Iterable[Holding], agent: tuple[str, str]) -> int:
    """The agent's slots its Evaluations hold, over every Evaluation this operator runs."""
    return sum(h.tasks for h in holdings if h.agent == agent)


def slots_left(holdings: Iterable[Holding], mine: Holding, agent: AgentUnderTest | None
               ) -> int | None:
    """The agent's task slots that its other Evaluations leave free (None: no agent)."""
    if agent is None:
        return None
    others = sum(h.tasks for h in holdings
                 if h is not mine and h.agent == (agent.namespace, agent.name))
    return agent.spec.max_concurrent_tasks - others


def hold(holdings: Mapping[K, Holding], key: K, agent: AgentUnderTest | None, tasks: int
         ) -> list[K]:
    """Record in ``holdings[key]`` the agent's slots it holds now; the other Evaluations of
    the agent it held before, when it gave some back (they get a pass to take them)."""
    mine = holdings[key]
    before = mine.agent
    released = mine.tasks > tasks
    mine.tasks = tasks if agent is not None else 0
    mine.agent = (agent.namespace, agent.name) if agent is not None else None
    if not released or before is None:
        return []
    return [other_key for other_key, other in holdings.items()
            if other_key != key and other.agent == before]
