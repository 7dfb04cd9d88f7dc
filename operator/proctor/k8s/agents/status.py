"""An AgentUnderTest's status: how it is reached, its card, how busy it is, and whether
Evaluations may send it tasks (Ready), rebuilt on each probe (pure)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from proctor.core.spec import AgentUnderTest
from proctor.k8s.children.agent_manifests import agent_endpoint
from proctor.k8s.machinery.conditions import set_condition

LOCAL_ENDPOINT = ("the endpoint {url} is a loopback or link-local address: it would reach "
                  "each task's own pod, not the agent; give an address the pods can reach (or "
                  "start the operator with --allow-local-endpoints)")


def is_local_endpoint(url: str) -> bool:
    """Whether ``url``'s host is loopback or link-local (localhost, 127.0.0.0/8, ::1,
    169.254.0.0/16, fe80::/10). Names other than localhost are not resolved: what a name
    points to is the cluster's DNS's business, not the operator's."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_link_local


def agent_refusal(agent: AgentUnderTest, allow_local: bool = False) -> tuple[str, str] | None:
    """Why the operator cannot send the agent tasks (a reason and a message), or None."""
    url = agent.spec.endpoint
    if url and not allow_local and is_local_endpoint(url):
        return "LocalEndpoint", LOCAL_ENDPOINT.format(url=url)
    return None


@dataclass(frozen=True)
class AgentProbe:
    """What the operator last found out about an agent, by fetching its card (and, for a
    service agent, applying its Deployment)."""

    card: Mapping[str, Any] | None = None
    """The card's name, version and skills (`agent_manifests.card_status`); None: no card."""
    error: str = ""
    """Why the card could not be fetched (no secret in it: the endpoint and the error)."""
    unavailable: str | None = None
    """A service agent's Deployment: why it serves no ready pod; None: it does (or no
    Deployment)."""
    auth: str | None = None
    """Why the token of spec.auth could not be read (the Secret and key, never a value);
    None: it was, or none is needed."""


def agent_ready(agent: AgentUnderTest, probe: AgentProbe | None, allow_local: bool = False
                ) -> tuple[bool, str, str]:
    """The agent's Ready condition (status, reason, message): whether Evaluations may send
    it tasks now. A sidecar agent runs in each task's pod, so there is nothing to fetch
    before a task; every other agent is ready once its card was fetched."""
    endpoint = agent_endpoint(agent)
    refusal = agent_refusal(agent, allow_local)
    if refusal is not None:
        return False, *refusal
    if agent.spec.sidecar:
        return True, "Sidecar", f"tasks go to {endpoint}, in each task's own pod"
    if probe is None:
        return False, "Probing", f"the operator has not fetched the card at {endpoint} yet"
    if probe.unavailable is not None:
        return False, "DeploymentUnavailable", probe.unavailable
    if probe.auth is not None:
        return False, "AuthSecretUnreadable", probe.auth
    if probe.card is None:
        return False, "Unreachable", probe.error or f"no agent card at {endpoint}"
    named = " ".join(str(probe.card.get(k) or "") for k in ("name", "version")).strip()
    return True, "CardFetched", f"card {named or '(unnamed)'} fetched; tasks go to {endpoint}"


def agent_status(agent: AgentUnderTest, old: Sequence[Mapping[str, Any]], *, now: str,
                 generation: int | None, tasks_in_flight: int, allow_local: bool = False,
                 probe: AgentProbe | None = None) -> dict[str, Any]:
    """An AgentUnderTest's status: how it is reached, its card, how busy it is, and Ready
    (`agent_ready`). ``old`` are its conditions so far."""
    spec, endpoint = agent.spec, agent_endpoint(agent)
    mode = "sidecar" if spec.sidecar else "service" if spec.service else "endpoint"
    ready = agent_ready(agent, probe, allow_local)
    status: dict[str, Any] = {"mode": mode, "endpoint": endpoint, "tasksInFlight": tasks_in_flight,
                              "conditions": set_condition(old, "Ready", *ready, now=now,
                                                          observed_generation=generation)}
    # None removes a card fetched earlier (the status is a merge patch).
    status["card"] = dict(probe.card) if probe is not None and probe.card is not None else None
    if generation is not None:
        status["observedGeneration"] = generation
    return status
