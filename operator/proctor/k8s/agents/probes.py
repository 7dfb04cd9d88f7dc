"""Agents under test: their Deployment and Service, their card, their status.

On a new spec, and then every AGENT_PROBE_SECONDS (each resync while not ready), a service
agent's Deployment and Service are applied (server-side apply: `agent_manifests`, owned
by the AgentUnderTest) and the agent's card is fetched; its status shows the card and Ready
(`agent_ready`). A readiness change gives the namespace's Evaluations a pass.

What this process knows of each agent is one `ProbedAgent`; the rules on it (is a probe
due, is the card stale) are pure functions; `Agents` is the shell that probes and writes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from proctor.a2a.client import AgentProblem, fetch_card
from proctor.core.spec import AgentUnderTest
from proctor.formats.manifest import ManifestError
from proctor.k8s.agents import slots
from proctor.k8s.agents.slots import Holding
from proctor.k8s.agents.status import AgentProbe, agent_ready, agent_refusal, agent_status
from proctor.k8s.children import agent_manifests
from proctor.k8s.machinery.api import Kube, SecretUnreadable, describe
from proctor.k8s.machinery.conditions import now_text
from proctor.k8s.machinery.indexes import Indexes, Key
from proctor.k8s.machinery.workqueue import WorkQueue

log = logging.getLogger("proctor.controller")
AGENT_PROBE_SECONDS = 30.0  # a ready agent's card is fetched again this often (others: each
# resync), so that an agent that went away stops getting new tasks
CARD_TIMEOUT_SECONDS = 5.0  # an agent whose card takes longer is not ready


@dataclass
class ProbedAgent:
    """What this process knows of one AgentUnderTest from probing it."""

    generation: Any
    """The generation of its spec last probed (another one is probed at once)."""
    probed_at: float
    """When that probe began (time.monotonic): the next is due AGENT_PROBE_SECONDS later."""
    probe: AgentProbe | None = None
    """What the last probe found; None while the first is under way."""
    fetched_at: datetime | None = None
    """When its card was last fetched, answered or not (wall clock, compared with pods'
    times)."""
    card_at: datetime | None = None
    """When its card last answered: an attempt the agent never answered is asked again
    only once its card has answered since."""


def is_ready(probe: AgentProbe | None) -> bool:
    return probe is not None and probe.card is not None and probe.unavailable is None


def needs_probe(known: ProbedAgent | None, generation: Any) -> bool:
    """Whether this generation of the agent was not probed yet (a new agent, a changed
    spec); its other events (its own status writes) need no card fetched."""
    return known is None or known.generation != generation


def is_due(known: ProbedAgent | None, now: float) -> bool:
    """Whether a periodic probe is due at ``now`` (time.monotonic): never probed, not
    ready, or ready and probed AGENT_PROBE_SECONDS ago."""
    return (known is None or not is_ready(known.probe)
            or now - known.probed_at >= AGENT_PROBE_SECONDS)


def card_stale(known: ProbedAgent | None, ends: list[datetime | None]) -> bool:
    """Whether an attempt the agent never answered (ended at ``ends``) ended after its card
    was last fetched: fetch it now, rather than at the next periodic probe."""
    fetched = known.fetched_at if known is not None else None
    return fetched is None or any(end is not None and end >= fetched for end in ends)


async def auth_header(kube: Kube, agent: AgentUnderTest) -> tuple[str, str] | None:
    """The header the solve step sends (spec.auth), for the card fetch: the token read
    from its Secret at each probe (a rotated token is used at the next), kept nowhere."""
    auth = agent.spec.auth
    if auth is None:
        return None
    token = await asyncio.to_thread(kube.secret_value, agent.namespace,
                                    auth.secret_ref.name, auth.secret_ref.key)
    return auth.header_for(token)


async def probe(kube: Kube, agent: AgentUnderTest, uid: str | None, *, allow_local: bool,
                first: bool = False) -> AgentProbe:
    """What the agent's card and (service agents) Deployment say now."""
    if agent.spec.sidecar or agent_refusal(agent, allow_local):
        return AgentProbe()  # nothing to fetch: it runs per task, or it is refused
    if agent.spec.service:
        try:
            applied = [await asyncio.to_thread(kube.apply, obj)
                       for obj in agent_manifests.desired(agent, uid)]
        except Exception as exc:  # refused (RBAC, a quota): the condition says so
            log.error("Applying the Deployment of AgentUnderTest %s/%s failed: %s",
                      agent.namespace, agent.name, describe(exc))
            return AgentProbe(unavailable=f"its Deployment and Service could not be "
                                          f"applied: {describe(exc)}")
        if first:
            log.info("Applied Deployment and Service %s/%s agent=%s", agent.namespace,
                     applied[0]["metadata"]["name"], agent.name)
        unavailable = agent_manifests.unavailable(applied[0])
        if unavailable is not None:  # the Service has no pod to send the fetch to
            return AgentProbe(unavailable=unavailable)
    endpoint, header = agent_manifests.agent_endpoint(agent), None
    if agent.spec.auth is not None:
        try:
            header = await auth_header(kube, agent)
        except Exception as exc:  # missing, refused (RBAC): the condition says so
            why = str(exc) if isinstance(exc, SecretUnreadable) else describe(exc)
            return AgentProbe(auth=f"its token (spec.auth) could not be read: {why}")
    try:
        card = await fetch_card(endpoint, CARD_TIMEOUT_SECONDS, auth_header=header)
    except AgentProblem as exc:
        return AgentProbe(error=str(exc))
    return AgentProbe(card=agent_manifests.card_status(card))


class Agents:
    """The agents' probes and status writes (the shell): one `ProbedAgent` per agent."""

    def __init__(self, kube: Kube, indexes: Indexes, holdings: Callable[[], Iterable[Holding]],
                 queue: WorkQueue[Key], allow_local: bool):
        # holdings: the slots each Evaluation holds now (the Evaluations' controller keeps them)
        self.kube, self.indexes, self.holdings = kube, indexes, holdings
        self.queue, self.allow_local = queue, allow_local
        self.known: dict[Key, ProbedAgent] = {}  # by (namespace, AgentUnderTest name)

    def probe_of(self, namespace: str, name: str) -> AgentProbe | None:
        known = self.known.get((namespace, name))
        return known.probe if known is not None else None

    def needs_probe(self, namespace: str, name: str, generation: Any) -> bool:
        return needs_probe(self.known.get((namespace, name)), generation)

    def card_at(self, agent: AgentUnderTest) -> datetime | None:
        """When the agent's card last answered (`reconcile.decide`'s ``card_at``)."""
        if agent.spec.sidecar:  # its card is checked in each pod, before its task
            return datetime.now(UTC)
        known = self.known.get((agent.namespace, agent.name))
        return known.card_at if known is not None else None

    def card_stale(self, agent: AgentUnderTest, ends: list[datetime | None]) -> bool:
        return card_stale(self.known.get((agent.namespace, agent.name)), ends)

    def waiting(self, agent: AgentUnderTest | None) -> tuple[str, str] | None:
        """Why no item may start for want of its agent (the reason and message of the
        Evaluation's Ready=False), or None: no agent asked, or it is ready."""
        if agent is None:
            return None
        ready, why, message = agent_ready(
            agent, self.probe_of(agent.namespace, agent.name), self.allow_local)
        return None if ready else ("AgentNotReady", f"AgentUnderTest {agent.name} is not "
                                   f"ready ({why}: {message}); no item starts until it is")

    async def probe_forever(self, every_s: float) -> None:
        """Probe the agents not ready each ``every_s`` (the resync) and the others every
        AGENT_PROBE_SECONDS, all at once (each card fetch waits CARD_TIMEOUT_SECONDS at
        most), apart from the resync of Evaluations, which a slow card would delay."""
        while True:
            await asyncio.sleep(every_s)
            await self.probe_due()

    async def probe_due(self) -> None:
        now = time.monotonic()
        due = [self.probe_agent(*key) for key in self.indexes.keys("agents")
               if is_due(self.known.get(key), now)]
        for failure in await asyncio.gather(*due, return_exceptions=True):
            if isinstance(failure, BaseException):
                log.error("Probing an agent failed: %s", describe(failure))

    def forget(self, namespace: str, name: str) -> None:
        """The agent is gone: its probe too (a new one of the same name starts afresh)."""
        self.known.pop((namespace, name), None)

    async def probe_agent(self, namespace: str, name: str) -> None:
        """Apply a service agent's Deployment and Service, fetch the agent's card, and write
        its status; when its readiness changes, its namespace's Evaluations get a pass."""
        key = (namespace, name)
        body = self.indexes.one("agents", key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return self.forget(namespace, name)
        try:
            agent = self.indexes.parse(body, AgentUnderTest)
        except ManifestError:  # the API server checks the same schema: only a CRD changed
            return log.exception("AgentUnderTest %s/%s is invalid", namespace, name)
        generation = body["metadata"].get("generation")
        known = self.known.get(key)
        first = needs_probe(known, generation)
        was = agent_ready(agent, known.probe if known else None, self.allow_local)
        if known is None:
            known = self.known[key] = ProbedAgent(generation, time.monotonic())
        else:
            known.generation, known.probed_at = generation, time.monotonic()
        fetched_at = datetime.now(UTC)
        known.probe = await probe(self.kube, agent, body["metadata"].get("uid"),
                                  allow_local=self.allow_local, first=first)
        known.fetched_at = fetched_at
        if known.probe.card is not None:
            known.card_at = fetched_at
        now = agent_ready(agent, known.probe, self.allow_local)
        if now[:2] != was[:2]:
            log.info("AgentUnderTest %s/%s ready=%s reason=%s", namespace, name, *now[:2])
            for other in self.indexes.keys("evaluations"):
                if other[0] == namespace:
                    self.queue.add(other)
        await self.write_status(namespace, name)

    async def write_status(self, namespace: str, name: str) -> None:
        """An AgentUnderTest's status: mode, endpoint, Ready, and its tasks in flight over
        every Evaluation this operator runs."""
        body = self.indexes.one("agents", (namespace, name))
        if body is None:
            return
        generation, seen = body["metadata"].get("generation"), body.get("status") or {}
        try:
            agent = self.indexes.parse(body, AgentUnderTest)
        except ManifestError:  # the API server checks the same schema: only a CRD changed
            return log.exception("AgentUnderTest %s/%s is invalid", namespace, name)
        status = agent_status(
            agent, seen.get("conditions") or [], now=now_text(),
            generation=generation, allow_local=self.allow_local,
            tasks_in_flight=slots.tasks_in_flight(self.holdings(), (namespace, name)),
            probe=self.probe_of(namespace, name))
        if not all(seen.get(k) == v for k, v in status.items()):
            await asyncio.to_thread(self.kube.patch_status, "agentundertests", namespace, name,
                                    status)
