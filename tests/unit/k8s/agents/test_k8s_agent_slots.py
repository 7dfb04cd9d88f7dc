"""An agent's task slots over its Evaluations (`agents.slots`), and an Evaluation's wait for
the objects of an earlier one of its name (`passes.predecessors_left`): pure."""

from __future__ import annotations

from proctor.core.model import Outcome, RunResult
from proctor.core.spec import AgentUnderTest, AgentUnderTestSpec
from proctor.k8s.agents import slots
from proctor.k8s.agents.slots import Holding
from proctor.k8s.evaluation.passes import predecessors_left
from proctor.k8s.features.store_backlog import Kept


def agent(name: str = "mixed", slots: int = 4) -> AgentUnderTest:
    return AgentUnderTest(name=name, namespace="team-a", spec=AgentUnderTestSpec(
        endpoint="http://agent.example:9009/", max_concurrent_tasks=slots))


def holding(agent_name: str | None, tasks: int) -> Holding:
    return Holding(("team-a", agent_name) if agent_name else None, tasks)


def test_an_evaluation_gets_the_slots_its_agents_other_evaluations_leave() -> None:
    mine = holding("mixed", 1)
    tracked = {"a": mine, "b": holding("mixed", 2), "c": holding("other", 3)}
    # its own 1 not counted
    assert slots.slots_left(tracked.values(), mine, agent(slots=4)) == 2
    assert slots.slots_left(tracked.values(), mine, None) is None
    assert slots.tasks_in_flight(tracked.values(), ("team-a", "mixed")) == 3
    assert slots.tasks_in_flight(tracked.values(), ("team-a", "gone")) == 0


def test_slots_given_back_wake_the_agents_other_evaluations_and_no_others() -> None:
    tracked = {"a": holding("mixed", 3), "b": holding("mixed", 1), "c": holding("other", 1)}
    assert slots.hold(tracked, "a", agent(), 1) == ["b"]
    assert tracked["a"] == Holding(("team-a", "mixed"), 1)
    assert slots.hold(tracked, "a", agent(), 2) == []  # it took more: none given back
    assert slots.hold(tracked, "a", None, 0) == ["b"]  # no agent now: all given back
    assert tracked["a"] == Holding(None, 0)


def test_objects_of_an_earlier_evaluation_of_the_name_are_waited_for() -> None:
    def job(uid: str | None) -> dict:
        refs = [{"uid": uid, "controller": True, "kind": "Evaluation"}] if uid else []
        return {"metadata": {"name": "ev-1", "ownerReferences": refs}}
    result = RunResult(item_id="i", instance_id="t", outcome=Outcome.RESOLVED)
    assert predecessors_left([job("now"), job(None)], [Kept("now", result, "r")], "now") == 0
    assert predecessors_left([job("old"), job("now")], [Kept("old", result, "r")], "now") == 2
