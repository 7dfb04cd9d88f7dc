"""Conditions and the Evaluation's status: rebuilt each pass, valid per the CRD, and small."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proctor.core.model import ErrorKind, Outcome, PassFail, RunResult, WorkItem
from proctor.core.spec import AgentUnderTest, AgentUnderTestSpec
from proctor.formats.manifest import ManifestError, openapi_schema, parse_resource
from proctor.k8s.agents.status import (
    AgentProbe,
    agent_ready,
    agent_refusal,
    agent_status,
    is_local_endpoint,
)
from proctor.k8s.evaluation.reconcile import ItemView, build_status
from proctor.k8s.evaluation.status import results_table
from proctor.k8s.machinery.conditions import find_condition, set_condition

T0, T1, T2 = "2026-05-01T10:00:00Z", "2026-05-01T11:00:00Z", "2026-05-01T12:00:00Z"


# --- set_condition --------------------------------------------------------------------------


def test_a_new_condition_starts_now() -> None:
    (ready,) = set_condition([], "Ready", True, "SpecValid", "ok", now=T0, observed_generation=3)
    assert ready == {"type": "Ready", "status": "True", "reason": "SpecValid", "message": "ok",
                     "lastTransitionTime": T0, "observedGeneration": 3}


def test_transition_time_moves_only_when_the_status_flips() -> None:
    first = set_condition([], "Running", True, "ItemsInFlight", "3 running", now=T0)
    same = set_condition(first, "Running", True, "ItemsInFlight", "5 running", now=T1)
    assert same[0]["lastTransitionTime"] == T0 and same[0]["message"] == "5 running"
    reworded = set_condition(same, "Running", True, "Retrying", now=T1)
    assert reworded[0]["lastTransitionTime"] == T0
    flipped = set_condition(reworded, "Running", False, "Suspended", now=T2)
    assert flipped[0]["lastTransitionTime"] == T2 and flipped[0]["status"] == "False"


def test_other_conditions_keep_their_place_and_the_input_is_untouched() -> None:
    conditions = set_condition([], "Ready", True, "SpecValid", now=T0)
    conditions = set_condition(conditions, "Running", True, "ItemsInFlight", now=T0)
    conditions = set_condition(conditions, "Succeeded", False, "ItemsLeft", now=T0)
    before = json.dumps(conditions)
    updated = set_condition(conditions, "Running", False, "AllDone", now=T1)
    assert json.dumps(conditions) == before
    assert [c["type"] for c in updated] == ["Ready", "Running", "Succeeded"]
    assert find_condition(updated, "Running") == updated[1]
    assert find_condition(updated, "Degraded") is None


@pytest.mark.parametrize("reason", ["", "spec valid", "specValid!", "1Reason"])
def test_reasons_are_one_camel_case_word(reason: str) -> None:
    with pytest.raises(ValueError, match="CamelCase"):
        set_condition([], "Ready", True, reason, now=T0)


def test_long_messages_are_cut_to_the_api_limit() -> None:
    (condition,) = set_condition([], "Degraded", True, "PodsForbidden", "x" * 40_000, now=T0)
    assert len(condition["message"]) == 32768


# --- The Evaluation's status ----------------------------------------------------------------

OUTCOMES = list(Outcome)


def results(n_tasks: int, variants: int = 4, repeats: int = 1) -> list[RunResult]:
    """Results of ``n_tasks`` tasks x variants x repeats, outcomes spread over all kinds."""
    found = []
    for task in range(n_tasks):
        for variant in range(variants):
            for repeat in range(repeats):
                outcome = OUTCOMES[(task + variant + repeat) % len(OUTCOMES)]
                found.append(RunResult(
                    item_id=f"{task:08x}{variant:08x}{repeat:016x}",
                    instance_id=f"org__repo-{task}", repo="org/repo",
                    variant_id="original" if variant == 0 else f"v{variant}", repeat=repeat,
                    outcome=outcome,
                    error_kind=ErrorKind.INFRA if outcome == Outcome.ERROR else None,
                    tests_ran=outcome != Outcome.ERROR,
                    FAIL_TO_PASS=PassFail(success=["a"], failure=["b"]) if outcome !=
                    Outcome.ERROR else PassFail()))
    return found


def conditions() -> list[dict[str, Any]]:
    found = set_condition([], "Ready", True, "SpecValid", now=T0, observed_generation=1)
    found = set_condition(found, "Running", False, "AllDone", now=T1, observed_generation=1)
    return set_condition(found, "Succeeded", True, "Completed", "2000 of 2000", now=T1,
                         observed_generation=1)


def evaluation_with(status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
            "metadata": {"name": "demo"}, "spec": {"agentRef": {"name": "my-agent"}},
            **({"status": status} if status is not None else {})}


def status_for(found: list[RunResult], waiting: int = 0, generation: int | None = 1,
               found_conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """`build_status` of an Evaluation whose items have ``found`` and ``waiting`` more."""
    views = [ItemView(WorkItem(id=r.item_id, instance_id=r.instance_id), result=r)
             for r in found]
    views += [ItemView(WorkItem(id=f"{n:032x}", instance_id="org__repo-0"))
              for n in range(waiting)]
    return build_status(parse_resource(evaluation_with()), "my-agent", views, found,
                        conditions() if found_conditions is None else found_conditions,
                        generation=generation, fingerprint="0123456789abcdef")


def test_the_status_of_2000_items_is_small_and_valid() -> None:
    found = results(500)
    status = status_for(found)
    size = len(json.dumps(status).encode())
    assert size < 4096, size  # far under 256 KiB: no per-item details
    assert size - len(json.dumps(status_for(results(5))).encode()) < 64
    parse_resource(evaluation_with(status))  # the CRD's status schema accepts it
    assert status["progress"] == "2000/2000"
    assert status["items"] == {"total": 2000, "waiting": 0, "queued": 0, "pending": 0,
                               "running": 0, "done": 2000, "retries": 0}
    assert sum(status["outcomes"].values()) == 2000
    assert status["errorKinds"] == {"infra": status["outcomes"]["error"]}
    assert status["results"]["totalInstances"] == 500
    assert status["resolvedPercent"] == f"{status['results']['resolvedPct'] * 100:.1f}%"
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Running", "Succeeded"]


def test_a_status_before_any_result() -> None:
    status = status_for([], waiting=3, generation=None, found_conditions=[])
    assert status["resolvedPercent"] == "-" and status["progress"] == "0/3"
    assert status["items"]["waiting"] == 3 and "proctor.dev/evaluation=demo" in status[
        "resultsRef"]["labelSelector"]
    assert "observedGeneration" not in status and "startTime" not in status
    parse_resource(evaluation_with(status))


def test_the_crd_refuses_a_malformed_status() -> None:
    status = status_for(results(2))
    status["conditions"][0]["status"] = "Yes"
    status["conditions"].append(dict(status["conditions"][1]))
    with pytest.raises(ManifestError) as caught:
        parse_resource(evaluation_with(status))
    problems = "\n".join(caught.value.problems)
    assert "status.conditions[0].status" in problems and "Duplicate value" in problems


def test_the_results_table_has_the_crd_fields_and_the_headline_denominators() -> None:
    table = results_table(results(10, repeats=2))
    status_schema = openapi_schema("Evaluation")["properties"]["status"]["properties"]
    assert set(table) == set(status_schema["results"]["properties"])
    assert table["totalInstances"] == 10  # tasks, not items: variants and repeats excluded


CARD = {"name": "mixed", "version": "1.2", "skills": [{"id": "fix", "name": "Fix bugs"}]}


def test_the_agent_status_is_valid() -> None:
    aut = AgentUnderTest(name="a", namespace="ns", spec=AgentUnderTestSpec(
        service={"image": "agent:1", "port": 8080}))
    status = agent_status(aut, [], now=T0, generation=2, tasks_in_flight=3,
                          probe=AgentProbe(card=CARD))
    assert (status["mode"], status["endpoint"], status["tasksInFlight"]) == (
        "service", "http://agent-a.ns.svc:8080/", 3)
    assert status["card"] == CARD
    parse_resource({"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
                    "metadata": {"name": "a"}, "spec": {"service": {"image": "agent:1"}},
                    "status": status})


def test_an_agent_is_ready_once_its_card_is_fetched() -> None:
    endpoint = AgentUnderTest(name="a", namespace="ns", spec=AgentUnderTestSpec(
        endpoint="http://agent:9999/"))
    (probing,) = agent_status(endpoint, [], now=T0, generation=1,
                              tasks_in_flight=0)["conditions"]
    assert (probing["type"], probing["status"], probing["reason"]) == ("Ready", "False",
                                                                       "Probing")
    status = agent_status(endpoint, [probing], now="2026-11-22T13:00:00Z", generation=1,
                          tasks_in_flight=0, probe=AgentProbe(card=CARD))
    (ready,) = status["conditions"]
    assert (ready["status"], ready["reason"]) == ("True", "CardFetched")
    assert "mixed 1.2" in ready["message"] and "http://agent:9999/" in ready["message"]
    assert ready["lastTransitionTime"] == "2026-11-22T13:00:00Z"
    assert ready["observedGeneration"] == 1 and status["card"] == CARD


def test_an_agent_whose_card_cannot_be_fetched_is_not_ready_and_shows_no_card() -> None:
    endpoint = AgentUnderTest(name="a", namespace="ns", spec=AgentUnderTestSpec(
        endpoint="http://agent:9999/"))
    status = agent_status(endpoint, [], now=T0, generation=1, tasks_in_flight=0,
                          probe=AgentProbe(error="agent unreachable at http://agent:9999/"))
    (down,) = status["conditions"]
    assert (down["status"], down["reason"]) == ("False", "Unreachable")
    assert "agent unreachable at http://agent:9999/" in down["message"]
    assert status["card"] is None  # a merge patch's null: a card fetched earlier goes


def test_a_service_agent_waits_for_its_deployment() -> None:
    service = AgentUnderTest(name="a", namespace="ns", spec=AgentUnderTestSpec(
        service={"image": "agent:1"}))
    why = "Deployment agent-a has no available pod: minimum availability"
    assert agent_ready(service, AgentProbe(unavailable=why)) == (
        False, "DeploymentUnavailable", why)
    assert agent_ready(service, AgentProbe(card=CARD))[:2] == (True, "CardFetched")


def test_a_sidecar_agent_is_ready_without_a_card() -> None:
    """It runs in each task's own pod: there is no agent to fetch a card from before."""
    sidecar = AgentUnderTest(name="a", namespace="ns", spec=AgentUnderTestSpec(
        sidecar={"image": "agent:1"}))
    assert agent_ready(sidecar, None)[:2] == (True, "Sidecar")


@pytest.mark.parametrize(("url", "local"), [
    ("http://127.0.0.1:9009/", True), ("http://127.3.4.5/", True), ("http://localhost:80", True),
    ("http://LOCALHOST./", True), ("http://agent.localhost/", True), ("http://[::1]:9/", True),
    ("http://169.254.169.254/", True), ("http://[fe80::1]/", True),
    ("http://10.0.0.7:9009/", False), ("http://agent.team-a.svc:9009/", False),
    ("https://agent.example.com/", False), ("http://192.168.1.2/", False)])
def test_loopback_and_link_local_endpoints_are_local(url: str, local: bool) -> None:
    assert is_local_endpoint(url) is local


def test_a_local_endpoint_is_refused_unless_allowed() -> None:
    aut = AgentUnderTest(name="a", namespace="ns", spec=AgentUnderTestSpec(
        endpoint="http://127.0.0.1:9009/"))
    (refused,) = agent_status(aut, [], now=T0, generation=1, tasks_in_flight=0)["conditions"]
    assert (refused["status"], refused["reason"]) == ("False", "LocalEndpoint")
    assert "127.0.0.1" in refused["message"] and "--allow-local-endpoints" in refused["message"]
    assert agent_refusal(aut, allow_local=True) is None
    (ready,) = agent_status(aut, [], now=T0, generation=1, tasks_in_flight=0,
                            allow_local=True, probe=AgentProbe(card=CARD))["conditions"]
    assert ready["status"] == "True"
