"""Status conditions and the status of Evaluations and agents, rebuilt on each pass (pure).

Conditions follow the Kubernetes API conventions: ``type``, ``status`` (True, False,
Unknown), ``reason`` (one CamelCase word), ``message``, ``lastTransitionTime`` (changed
only when the status flips) and ``observedGeneration``. The one thing read back from
the old status is a condition's lastTransitionTime; everything else comes from what is
observed (Jobs, persisted results).

The condition types Proctor writes on an Evaluation:

* ``Ready``: the spec is valid and its agent, dataset and images can be used
  (False with reason InvalidSpec, AgentNotFound, ...);
* ``Running``: items are in flight (reason Suspended while ``spec.suspend`` holds);
* ``Succeeded``: every planned item has a result;
* ``Degraded``: something needs a person (pods refused, images that cannot be pulled).

The status's top-level ``reason`` (`status_reason`) is the one word ``kubectl get`` shows.

The Evaluation's status (`reconcile.build_status`, from the pieces here) holds counts and
the headline table only, never per-item details, so that it stays a few KiB at any size
(an object must stay far under etcd's 1.5 MiB limit; 2,000 items of details would not).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic.alias_generators import to_camel

from proctor.core.metrics import eval_result
from proctor.core.model import ORIGINAL_VARIANT, RunResult
from proctor.core.spec import AgentUnderTest
from proctor.k8s.manifests import agent_endpoint

MESSAGE_MAX = 32768
"""metav1.Condition's limit on a message."""
_REASON = re.compile(r"^[A-Z][A-Za-z0-9]*$")


def find_condition(conditions: Sequence[Mapping[str, Any]], type_: str
                   ) -> Mapping[str, Any] | None:
    """The condition of ``type_``, if present."""
    return next((c for c in conditions if c.get("type") == type_), None)


def set_condition(conditions: Sequence[Mapping[str, Any]], type_: str, status: bool,
                  reason: str, message: str = "", *, now: str,
                  observed_generation: int | None = None) -> list[dict[str, Any]]:
    """``conditions`` with ``type_`` set; a new list, the input left as it was.

    lastTransitionTime becomes ``now`` only when the status changes (or the condition is
    new); a changed reason or message alone keeps it, as the API conventions ask.
    """
    if not _REASON.match(reason):
        raise ValueError(f"condition reason {reason!r} must be one CamelCase word")
    word = "True" if status else "False"
    old = find_condition(conditions, type_)
    changed = old is None or old.get("status") != word
    new: dict[str, Any] = {
        "type": type_, "status": word, "reason": reason, "message": message[:MESSAGE_MAX],
        "lastTransitionTime": now if changed or old is None else old.get("lastTransitionTime", now),
    }
    if observed_generation is not None:
        new["observedGeneration"] = observed_generation
    out = [new if c.get("type") == type_ else dict(c) for c in conditions]
    return out if old is not None else [*out, new]


# --- Evaluation status ----------------------------------------------------------------------


@dataclass(frozen=True)
class ItemCounts:
    """Work items by where they stand, as observed on this pass."""

    total: int
    """Items planned."""
    waiting: int = 0
    """Not started: no Job yet (maxConcurrentRows, suspend)."""
    queued: int = 0
    """A Job exists, suspended: it waits for Kueue to admit it (again, when preempted)."""
    pending: int = 0
    """A Job exists (admitted, where Kueue queues it), no step has started."""
    running: int = 0
    """A step is running."""
    done: int = 0
    """A result is kept (any outcome, errors included)."""
    retries: int = 0
    """Attempts made again after an infrastructure failure, over all items."""


def results_table(results: Sequence[RunResult]) -> dict[str, Any]:
    """The headline figures (original-prompt items; fractions 0-1) under camelCase names."""
    original = [r for r in results if r.variant_id == ORIGINAL_VARIANT]
    figures = eval_result(original).model_dump()
    return {to_camel(name): value for name, value in figures.items()}


def status_reason(conditions: Sequence[Mapping[str, Any]]) -> str:
    """One word for ``kubectl get``: why the Evaluation cannot go on (Ready=False's reason:
    InvalidSpec, AgentNotFound, LocalEndpoint, ...) or what a person should look at
    (Degraded's), else Suspended, else where it stands (AllItemsDone, ItemsInFlight,
    ItemsQueued, Idle)."""
    def reason(type_: str, status: str) -> str | None:
        found = find_condition(conditions, type_)
        return found.get("reason") if found and found.get("status") == status else None
    running = (find_condition(conditions, "Running") or {}).get("reason")
    return (reason("Ready", "False") or reason("Degraded", "True")
            or ("Suspended" if running == "Suspended" else None)
            or reason("Succeeded", "True") or running or "Unknown")


# --- AgentUnderTest status ------------------------------------------------------------------


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
