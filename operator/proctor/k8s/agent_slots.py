"""An agent's task slots (spec.maxConcurrentTasks), shared by every Evaluation that uses it
(pure: what each Evaluation holds is in its `Tracked`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from proctor.core.spec import AgentUnderTest
from proctor.k8s.act import Tracked

K = TypeVar("K")


def tasks_in_flight(tracked: Mapping[K, Tracked], agent: tuple[str, str]) -> int:
    """The agent's slots its Evaluations hold, over every Evaluation this operator runs."""
    return sum(t.agent_tasks for t in tracked.values() if t.slot_agent == agent)


def slots_left(tracked: Mapping[K, Tracked], mine: Tracked, agent: AgentUnderTest | None
               ) -> int | None:
    """The agent's task slots that its other Evaluations leave free (None: no agent)."""
    if agent is None:
        return None
    others = sum(t.agent_tasks for t in tracked.values()
                 if t is not mine and t.slot_agent == (agent.namespace, agent.name))
    return agent.spec.max_concurrent_tasks - others


def hold(tracked: Mapping[K, Tracked], key: K, agent: AgentUnderTest | None, tasks: int
         ) -> list[K]:
    """Record in ``tracked[key]`` the agent's slots it holds now; the other Evaluations of
    the agent it held before, when it gave some back (they get a pass to take them)."""
    mine = tracked[key]
    before = mine.slot_agent
    released = mine.agent_tasks > tasks
    mine.agent_tasks = tasks if agent is not None else 0
    mine.slot_agent = (agent.namespace, agent.name) if agent is not None else None
    if not released or before is None:
        return []
    return [other_key for other_key, other in tracked.items()
            if other_key != key and other.slot_agent == before]
