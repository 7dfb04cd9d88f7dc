"""The operator's probe of an agent (`probes.probe`), against real agents on loopback:
what an endpoint agent's card says, and what an agent that went away says."""

from __future__ import annotations

import asyncio
import base64
import http.server
import json
import threading
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from proctor.agents.server import start_reference_agent
from proctor.core.spec import AgentAuth, AgentUnderTest, AgentUnderTestSpec, SecretKeyRef
from proctor.k8s.agents import probes
from proctor.k8s.agents.probes import (
    Agents,
    ProbedAgent,
    card_stale,
    is_due,
    needs_probe,
    probe,
)
from proctor.k8s.agents.status import AgentProbe, agent_ready
from proctor.k8s.machinery.api import Kube
from proctor.k8s.machinery.indexes import Indexes
from proctor.k8s.machinery.workqueue import WorkQueue

NO_API = Kube(client.ApiClient())  # an endpoint agent's probe calls no Kubernetes API


def endpoint_agent(url: str) -> AgentUnderTest:
    return AgentUnderTest(name="mixed", namespace="team-a",
                          spec=AgentUnderTestSpec(endpoint=url))


def test_an_agent_that_answers_is_ready_and_one_gone_is_unreachable() -> None:
    server = start_reference_agent("mixed")
    agent = endpoint_agent(server.url)
    try:
        answering = asyncio.run(probe(NO_API, agent, None, allow_local=True))
    finally:
        server.stop()
    assert answering.card is not None and answering.card["name"] == "proctor-mixed"
    assert agent_ready(agent, answering, allow_local=True)[:2] == (True, "CardFetched")
    gone = asyncio.run(probe(NO_API, agent, None, allow_local=True))
    ready, reason, message = agent_ready(agent, gone, allow_local=True)
    assert (ready, reason) == (False, "Unreachable") and server.url in message


def test_a_sidecar_or_a_refused_agent_is_not_fetched() -> None:
    sidecar = AgentUnderTest(name="s", spec=AgentUnderTestSpec(sidecar={"image": "agent:1"}))
    assert asyncio.run(probe(NO_API, sidecar, None, allow_local=False)) == AgentProbe()
    local = endpoint_agent("http://127.0.0.1:9/")
    assert asyncio.run(probe(NO_API, local, None, allow_local=False)) == AgentProbe()
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

    def do_PATCH(self) -> None:  # an AgentUnderTest's status: kept, and sent back
        data = self.rfile.read(int(self.headers["Content-Length"]))
        PATCHED.append((self.path.split("?")[0], json.loads(data)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: object) -> None:
        pass


PATCHED: list[tuple[str, dict]] = []


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
    with start_reference_agent("oracle", token=TOKEN) as server:
        agent = locked(server.url)
        fetched = asyncio.run(probe(kube, agent, None, allow_local=True))
        without = endpoint_agent(server.url)  # the same agent, no spec.auth: refused
        refused = asyncio.run(probe(kube, without, None, allow_local=True))
        no_key = locked(server.url, key="other")
        no_secret = locked(server.url, secret="gone")
        missing = [asyncio.run(probe(kube, a, None, allow_local=True))
                   for a in (no_key, no_secret)]
    assert agent_ready(agent, fetched, allow_local=True)[:2] == (True, "CardFetched")
    ready, reason, message = agent_ready(without, refused, allow_local=True)
    assert (ready, reason) == (False, "Unreachable") and "401" in message
    reasons = [agent_ready(no_key, p, allow_local=True) for p in missing]
    assert [r[:2] for r in reasons] == [(False, "AuthSecretUnreadable")] * 2
    assert "team-a/agent-token" in reasons[0][2] and "'other'" in reasons[0][2]
    assert "team-a/gone does not exist" in reasons[1][2]
    shown = repr([fetched, refused, *missing, *reasons])
    assert TOKEN not in shown


# --- what is known of each agent (`ProbedAgent`): when to probe again, a stale card -------

CARD = {"name": "proctor-mixed"}
AT = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_new_agent_or_a_new_spec_is_probed_at_once_its_own_status_write_is_not() -> None:
    known = ProbedAgent(generation=1, probed_at=0.0, probe=AgentProbe(card=CARD))
    assert needs_probe(None, 1)
    assert needs_probe(known, 2)
    assert not needs_probe(known, 1)


def test_a_ready_agent_is_probed_every_period_one_not_ready_at_each_resync() -> None:
    period = probes.AGENT_PROBE_SECONDS
    ready = ProbedAgent(generation=1, probed_at=100.0, probe=AgentProbe(card=CARD))
    assert not is_due(ready, 100.0 + period / 2)
    assert is_due(ready, 100.0 + period)
    for last in (None, AgentProbe(error="unreachable"),
                 AgentProbe(card=CARD, unavailable="no ready pod")):
        assert is_due(ProbedAgent(generation=1, probed_at=100.0, probe=last), 100.0)
    assert is_due(None, 0.0)


def test_the_card_is_stale_when_an_unanswered_attempt_ended_after_its_last_fetch() -> None:
    known = ProbedAgent(generation=1, probed_at=0.0, fetched_at=AT)
    assert card_stale(known, [AT + timedelta(seconds=1)])
    assert card_stale(known, [AT])
    assert not card_stale(known, [AT - timedelta(seconds=1), None])
    assert card_stale(None, [None])  # never fetched


def test_the_record_follows_the_last_probe(api_server) -> None:
    """`Agents.probe_agent` on a real agent: the card's answer and when, then its absence
    (the record keeps when the card last answered)."""
    kube = Kube(client.ApiClient(client.Configuration(host=api_server)))
    server = start_reference_agent("mixed")
    body = {"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
            "metadata": {"name": "mixed", "namespace": "team-a", "uid": "u1",
                         "generation": 1},
            "spec": {"endpoint": server.url}}
    PATCHED.clear()
    agents = Agents(kube, Indexes({"agents": {("team-a", "mixed"): [body]},
                                   "evaluations": {}}), lambda: (), WorkQueue(_no_pass),
                    allow_local=True)
    try:
        asyncio.run(agents.probe_agent("team-a", "mixed"))
    finally:
        server.stop()
    answered = agents.known[("team-a", "mixed")]
    assert answered.probe is not None and answered.probe.card is not None
    assert answered.card_at == answered.fetched_at is not None
    card_at = answered.card_at
    asyncio.run(agents.probe_agent("team-a", "mixed"))
    gone = agents.known[("team-a", "mixed")]
    assert gone.probe is not None and gone.probe.card is None and gone.probe.error
    assert gone.card_at == card_at and gone.fetched_at is not None
    assert gone.fetched_at >= card_at
    path = "/apis/proctor.dev/v1alpha1/namespaces/team-a/agentundertests/mixed/status"
    ready = [next(c for c in patch["status"]["conditions"] if c["type"] == "Ready")
             for _, patch in PATCHED]
    assert [p for p, _ in PATCHED] == [path, path]
    assert [(c["status"], c["reason"]) for c in ready] == [("True", "CardFetched"),
                                                            ("False", "Unreachable")]
    agents.forget("team-a", "mixed")
    assert agents.probe_of("team-a", "mixed") is None
    assert agents.needs_probe("team-a", "mixed", 1)


async def _no_pass(key: object) -> None:
    pass
