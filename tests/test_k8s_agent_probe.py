"""The operator's probe of an agent (`Controller.probe`), against real agents on loopback:
what an endpoint agent's card says, and what an agent that went away says."""

from __future__ import annotations

import asyncio

from kubernetes import client
from prometheus_client import CollectorRegistry

from proctor.agents.server import start_reference_agent
from proctor.core.spec import AgentUnderTest, AgentUnderTestSpec
from proctor.k8s.api import Kube
from proctor.k8s.conditions import AgentProbe, agent_ready
from proctor.k8s.controller import Controller
from proctor.k8s.exporter import Metrics
from proctor.k8s.reconcile import Settings


def controller(allow_local: bool) -> Controller:
    """A controller whose probes of endpoint agents call no Kubernetes API."""
    return Controller(Kube(client.ApiClient()), Metrics(CollectorRegistry()), Settings(),
                      {"agents": {}, "evaluations": {}}, runner_image=None,
                      allow_local=allow_local)


def endpoint_agent(url: str) -> AgentUnderTest:
    return AgentUnderTest(name="mixed", namespace="team-a",
                          spec=AgentUnderTestSpec(endpoint=url))


def test_an_agent_that_answers_is_ready_and_one_gone_is_unreachable() -> None:
    c = controller(allow_local=True)
    server = start_reference_agent("mixed")
    agent = endpoint_agent(server.url)
    try:
        answering = asyncio.run(c.probe(agent, None))
    finally:
        server.stop()
    assert answering.card is not None and answering.card["name"] == "proctor-mixed"
    assert agent_ready(agent, answering, allow_local=True)[:2] == (True, "CardFetched")
    gone = asyncio.run(c.probe(agent, None))
    ready, reason, message = agent_ready(agent, gone, allow_local=True)
    assert (ready, reason) == (False, "Unreachable") and server.url in message


def test_a_sidecar_or_a_refused_agent_is_not_fetched() -> None:
    sidecar = AgentUnderTest(name="s", spec=AgentUnderTestSpec(sidecar={"image": "agent:1"}))
    assert asyncio.run(controller(False).probe(sidecar, None)) == AgentProbe()
    local = endpoint_agent("http://127.0.0.1:9/")
    assert asyncio.run(controller(False).probe(local, None)) == AgentProbe()
    assert agent_ready(local, AgentProbe())[1] == "LocalEndpoint"
