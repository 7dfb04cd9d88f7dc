"""What a service-mode AgentUnderTest runs as, and what the operator reads back (pure).

A service agent is one Deployment (one replica) and one Service in front of it, both owned
by the AgentUnderTest (deleting it deletes them) and both named ``agent-<its name>``. Its
container starts as the Agentbeats platform starts agents: ``--host 0.0.0.0 --port <port>
--card-url <the Service's URL>``, then spec.service.args, after spec.service.command (the
image's own entrypoint when unset). Tasks reach it through the Service's DNS name.

The pod meets Pod Security's `restricted` profile, as the sidecar agent does
(`security.PROFILES["agent"]`: non-root, writable root filesystem, nothing added), and
gets no service account token: the agent has no business with the Kubernetes API.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from a2a.types import AgentCard

from proctor.core.labels import COMPONENT, LABEL_AGENT, MANAGED_BY
from proctor.core.spec import API_VERSION, AgentContainer, AgentUnderTest, EnvVar
from proctor.k8s.children.security import container_security_context, pod_security_context
from proctor.k8s.machinery.names import agent_service_name, label_value

CARD_PATH = "/.well-known/agent-card.json"
"""Where an A2A agent serves its card (a2a-sdk's default)."""
SKILLS_SHOWN = 32
"""Most skills of a card copied into the status (an agent may list hundreds)."""


def service_name(agent: AgentUnderTest) -> str:
    """The Deployment's and the Service's name (`names.agent_service_name`)."""
    return agent_service_name(agent.name)


def service_url(agent: AgentUnderTest) -> str:
    """The URL tasks are sent to: the Service's name in the cluster's DNS."""
    assert agent.spec.service is not None
    return (f"http://{service_name(agent)}.{agent.namespace}.svc:"
            f"{agent.spec.service.port}/")


def pod_labels(agent: AgentUnderTest) -> dict[str, str]:
    """The pods' labels: the Service and the Deployment select them by these. No
    managed-by label: the operator watches its own pods (the work items') by it."""
    return {COMPONENT: "agent", LABEL_AGENT: label_value(agent.name)}


def _metadata(agent: AgentUnderTest, uid: str | None) -> dict[str, Any]:
    """Name, labels and, given the AgentUnderTest's uid, the owner reference that lets the
    garbage collector delete the object with its agent (no blockOwnerDeletion: that would
    need the right to update the agent's finalizers)."""
    meta: dict[str, Any] = {"name": service_name(agent), "namespace": agent.namespace,
                            "labels": {MANAGED_BY: "proctor", **pod_labels(agent)}}
    if uid:
        meta["ownerReferences"] = [{"apiVersion": API_VERSION, "kind": agent.KIND,
                                    "name": agent.name, "uid": uid, "controller": True}]
    return meta


def env_var(var: EnvVar) -> dict[str, Any]:
    """A variable's value, or the Secret key it is read from (the value never passes
    through the operator)."""
    if var.value_from is None:
        return {"name": var.name, "value": var.value}
    ref = var.value_from.secret_key_ref
    return {"name": var.name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}


def agent_args(container: AgentContainer, card_url: str) -> list[str]:
    """The arguments Agentbeats starts an agent with, then the spec's own."""
    return ["--host", "0.0.0.0", "--port", str(container.port), "--card-url", card_url,
            *container.args]


def _container(agent: AgentUnderTest) -> dict[str, Any]:
    service = agent.spec.service
    assert service is not None
    container: dict[str, Any] = {"name": "agent", "image": service.image,
                                 "imagePullPolicy": "IfNotPresent"}
    if service.command:
        container["command"] = list(service.command)
    container |= {
        "args": agent_args(service, service_url(agent)),
        "ports": [{"name": "a2a", "containerPort": service.port, "protocol": "TCP"}],
        # Ready once it listens: the Service sends tasks to ready pods only. The operator
        # fetches the card itself for the agent's Ready condition.
        "readinessProbe": {"tcpSocket": {"port": service.port}, "periodSeconds": 2},
        "resources": copy.deepcopy(service.resources or {}),
        "securityContext": container_security_context("agent"),
    }
    if service.env:
        container["env"] = [env_var(var) for var in service.env]
    return container


def deployment(agent: AgentUnderTest, uid: str | None = None) -> dict[str, Any]:
    """The agent's Deployment: one replica of its container."""
    labels = pod_labels(agent)
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _metadata(agent, uid),
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "automountServiceAccountToken": False,
                     "enableServiceLinks": False,
                     "securityContext": pod_security_context(),
                     "containers": [_container(agent)]}}},
    }


def service(agent: AgentUnderTest, uid: str | None = None) -> dict[str, Any]:
    """The Service tasks reach the agent through."""
    spec = agent.spec.service
    assert spec is not None
    return {"apiVersion": "v1", "kind": "Service", "metadata": _metadata(agent, uid),
            "spec": {"selector": pod_labels(agent),
                     "ports": [{"name": "a2a", "port": spec.port, "targetPort": spec.port,
                                "protocol": "TCP"}]}}


def desired(agent: AgentUnderTest, uid: str | None = None) -> list[dict[str, Any]]:
    """What the agent runs as: its Deployment and Service (nothing unless in service
    mode)."""
    return [deployment(agent, uid), service(agent, uid)] if agent.spec.service else []


# --- What is read back ----------------------------------------------------------------------


def unavailable(deployment_obj: Mapping[str, Any]) -> str | None:
    """Why the Deployment, as the API server last answered, serves no ready pod; None when
    it does. Its Available condition's message says why (a pod not ready, an image not
    pulled shows there as "does not have minimum availability")."""
    status = deployment_obj.get("status") or {}
    if (status.get("availableReplicas") or 0) > 0:
        return None
    available: Mapping[str, Any] = next((c for c in status.get("conditions") or []
                                         if c.get("type") == "Available"), {})
    name = (deployment_obj.get("metadata") or {}).get("name", "?")
    why = available.get("message") or "no pod of it is ready yet"
    return f"Deployment {name} has no available pod: {why}"


def card_status(card: AgentCard) -> dict[str, Any]:
    """What the status shows of a fetched agent card: name, version and skills (ids and
    names, at most SKILLS_SHOWN of them)."""
    skills = [{"id": skill.id, "name": skill.name} for skill in card.skills[:SKILLS_SHOWN]]
    return {"name": card.name, "version": card.version, "skills": skills}


def agent_endpoint(agent: AgentUnderTest) -> str:
    """The URL the solve step sends the task to: the endpoint, the service agent's Service,
    or the sidecar's loopback port."""
    spec = agent.spec
    if spec.sidecar:
        return f"http://127.0.0.1:{spec.sidecar.port}/"
    return service_url(agent) if spec.service else spec.endpoint or ""
