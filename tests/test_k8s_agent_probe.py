"""The operator's probe of an agent (`Controller.probe`), against real agents on loopback:
what an endpoint agent's card says, and what an agent that went away says."""

from __future__ import annotations

import asyncio
import base64
import http.server
import json
import threading

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from proctor.agents.server import start_reference_agent
from proctor.core.spec import AgentAuth, AgentUnderTest, AgentUnderTestSpec, SecretKeyRef
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


# --- an agent that wants a token (spec.auth): the card fetch sends it, read from its Secret --

TOKEN = "probe-Secret-value-8c2d"


class _Secrets(http.server.BaseHTTPRequestHandler):
    """The API server's one read the probe makes, GET .../secrets/<name>, from a loopback
    server: the Secret `agent-token` in team-a, with the key `token`."""

    def do_GET(self) -> None:
        found = self.path.split("?")[0] == "/api/v1/namespaces/team-a/secrets/agent-token"
        body = {"kind": "Secret", "apiVersion": "v1",
                "metadata": {"name": "agent-token", "namespace": "team-a"},
                "data": {"token": base64.b64encode(f"{TOKEN}\n".encode()).decode()}} \
            if found else {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": "NotFound", "code": 404, "message": "not found"}
        data = json.dumps(body).encode()
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture(scope="module")
def api_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Secrets)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def locked(url: str, secret: str = "agent-token", key: str = "token") -> AgentUnderTest:
    return AgentUnderTest(name="locked", namespace="team-a", spec=AgentUnderTestSpec(
        endpoint=url, auth=AgentAuth(secret_ref=SecretKeyRef(name=secret, key=key))))


def test_the_card_fetch_sends_the_token_from_the_agents_secret(api_server) -> None:
    kube = Kube(client.ApiClient(client.Configuration(host=api_server)))
    c = Controller(kube, Metrics(CollectorRegistry()), Settings(),
                   {"agents": {}, "evaluations": {}}, runner_image=None, allow_local=True)
    with start_reference_agent("oracle", token=TOKEN) as server:
        agent = locked(server.url)
        fetched = asyncio.run(c.probe(agent, None))
        without = endpoint_agent(server.url)  # the same agent, no spec.auth: refused
        refused = asyncio.run(c.probe(without, None))
        no_key = locked(server.url, key="other")
        no_secret = locked(server.url, secret="gone")
        missing = [asyncio.run(c.probe(a, None)) for a in (no_key, no_secret)]
    assert agent_ready(agent, fetched, allow_local=True)[:2] == (True, "CardFetched")
    ready, reason, message = agent_ready(without, refused, allow_local=True)
    assert (ready, reason) == (False, "Unreachable") and "401" in message
    reasons = [agent_ready(no_key, p, allow_local=True) for p in missing]
    assert [r[:2] for r in reasons] == [(False, "AuthSecretUnreadable")] * 2
    assert "team-a/agent-token" in reasons[0][2] and "'other'" in reasons[0][2]
    assert "team-a/gone does not exist" in reasons[1][2]
    shown = repr([fetched, refused, *missing, *reasons])
    assert TOKEN not in shown
