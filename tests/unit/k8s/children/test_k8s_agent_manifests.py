"""A service agent's Deployment and Service (pure builders), and what the operator reads
back: the Deployment's availability and the agent card (fetched from a real agent)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from proctor.a2a.client import AgentProblem, fetch_card
from proctor.agents.server import start_reference_agent
from proctor.core.spec import AgentUnderTest, AgentUnderTestSpec, Evaluation, EvaluationSpec
from proctor.k8s.children import agent_manifests as am
from proctor.k8s.children import manifests
from support.job_manifests import validate

UID = "0b6c1f2e-8c1d-4c3e-9a51-1f2d3c4b5a69"


def agent(name: str = "mixed", **service: Any) -> AgentUnderTest:
    return AgentUnderTest(name=name, namespace="team-a", spec=AgentUnderTestSpec(
        service={"image": "registry.example/agent:1", **service}))


def test_a_service_agent_is_a_deployment_and_a_service_it_owns() -> None:
    deployment, service = am.desired(agent(), UID)
    validate(deployment, service)
    for obj in (deployment, service):
        (owner,) = obj["metadata"]["ownerReferences"]
        assert owner == {"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
                         "name": "mixed", "uid": UID, "controller": True}
        assert obj["metadata"]["namespace"] == "team-a"
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "proctor"
    assert deployment["metadata"]["name"] == service["metadata"]["name"] == "agent-mixed"
    pod = deployment["spec"]["template"]
    # The Service and the Deployment select the agent's pods, and only them.
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"] \
        == pod["metadata"]["labels"]
    assert "app.kubernetes.io/managed-by" not in pod["metadata"]["labels"]  # not a task's pod
    assert service["spec"]["ports"][0]["targetPort"] == 9009
    assert deployment["spec"]["replicas"] == 1


def test_tasks_reach_the_agent_through_its_service() -> None:
    aut = agent(port=8080)
    assert am.service_url(aut) == "http://agent-mixed.team-a.svc:8080/"
    evaluation = Evaluation(name="ev", namespace="team-a", spec=EvaluationSpec(
        agent_ref={"name": "mixed"}, dataset={"name": "proctor-demo"}))
    command = manifests.solve_command(evaluation, aut)
    assert command[command.index("--endpoint") + 1] == "http://agent-mixed.team-a.svc:8080/"


def test_the_agent_starts_as_agentbeats_starts_it() -> None:
    (container,) = am.deployment(agent(port=8080, args=["--model", "m"]))["spec"]["template"][
        "spec"]["containers"]
    assert "command" not in container  # the image's own entrypoint
    assert container["args"] == ["--host", "0.0.0.0", "--port", "8080", "--card-url",
                                 "http://agent-mixed.team-a.svc:8080/", "--model", "m"]
    assert container["readinessProbe"]["tcpSocket"]["port"] == 8080
    (replaced,) = am.deployment(agent(command=["proctor", "agent", "serve"]))["spec"][
        "template"]["spec"]["containers"]
    assert replaced["command"] == ["proctor", "agent", "serve"]
    assert replaced["args"][:2] == ["--host", "0.0.0.0"]


def test_the_agent_pod_is_restricted_and_has_no_api_token() -> None:
    spec = am.deployment(agent())["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    context = container["securityContext"]
    assert context["runAsNonRoot"] is True and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False


def test_secret_environment_is_a_reference_never_a_value() -> None:
    aut = agent(env=[{"name": "MODEL", "value": "m"},
                     {"name": "OPENAI_API_KEY", "valueFrom": {
                         "secretKeyRef": {"name": "llm", "key": "openai"}}}])
    (container,) = am.deployment(aut)["spec"]["template"]["spec"]["containers"]
    assert container["env"] == [
        {"name": "MODEL", "value": "m"},
        {"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {"name": "llm",
                                                                  "key": "openai"}}}]


@pytest.mark.parametrize("name", ["7-eleven", "a" * 200, "my.agent.v2"])
def test_any_agent_name_makes_a_valid_service_name(name: str) -> None:
    service_name = am.service_name(agent(name))
    assert len(service_name) <= 63
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", service_name)  # DNS-1035
    assert am.service_name(agent(name + "x")) != service_name


def test_an_endpoint_agent_runs_nothing() -> None:
    assert am.desired(AgentUnderTest(name="a", spec=AgentUnderTestSpec(
        endpoint="http://agent.example:9009/"))) == []


def test_without_a_uid_nothing_owns_them() -> None:
    """`proctor render` shows them before the agent exists (its uid unknown)."""
    assert all("ownerReferences" not in o["metadata"] for o in am.desired(agent()))


def test_the_deployment_is_available_once_a_pod_is() -> None:
    deployment = am.deployment(agent())
    assert am.unavailable(deployment) == \
        "Deployment agent-mixed has no available pod: no pod of it is ready yet"
    deployment["status"] = {"replicas": 1, "conditions": [
        {"type": "Available", "status": "False",
         "message": "Deployment does not have minimum availability."}]}
    assert "does not have minimum availability" in (am.unavailable(deployment) or "")
    deployment["status"]["availableReplicas"] = 1
    assert am.unavailable(deployment) is None


def test_the_status_shows_the_card_of_a_real_agent() -> None:
    server = start_reference_agent("mixed")
    try:
        card = asyncio.run(fetch_card(server.url, 5.0))
    finally:
        server.stop()
    shown = am.card_status(card)
    assert shown["name"] == "proctor-mixed" and shown["version"]
    assert shown["skills"] == [{"id": "swe-bench", "name": "Solve a SWE-bench task"}]
    with pytest.raises(AgentProblem, match="unreachable"):  # gone: the agent is not ready
        asyncio.run(fetch_card(server.url, 2.0))


def test_a_sidecar_agents_card_is_waited_for_in_the_pod_before_the_task_is_sent() -> None:
    """Its startupProbe sees the port open; the solve step then fetches the card, retrying
    until the same startup deadline, and only then sends the task."""
    aut = AgentUnderTest(name="editor", namespace="team-a", spec=AgentUnderTestSpec(
        sidecar={"image": "registry.example/editor:1", "port": 9010}))
    evaluation = Evaluation(name="ev", namespace="team-a", spec=EvaluationSpec(
        agent_ref={"name": "editor"}, dataset={"name": "proctor-demo"}))
    command = manifests.solve_command(evaluation, aut)
    assert command[command.index("--endpoint") + 1] == "http://127.0.0.1:9010/"
    assert command[command.index("--card-wait") + 1] == str(manifests.AGENT_STARTUP_SECONDS)
    assert "--card-wait" not in manifests.solve_command(evaluation, agent())
