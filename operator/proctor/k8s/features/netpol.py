"""The network boundary of an Evaluation: one NetworkPolicy over its task pods (pure).

NetworkPolicies speak of pods and IP blocks, never of host names. So each peer a task pod
may reach is one the operator can name that way:

* DNS: the cluster's DNS pods (namespace kube-system, label k8s-app=kube-dns by default),
  UDP and TCP port 53;
* the agent: a service agent's pods (by their labels, on its port); an endpoint's IP
  address on its port, or, when its host is a name, the CIDRs its AgentUnderTest gives in
  spec.endpointCidrs; a sidecar is in the pod (loopback is never filtered);
* the package index the eval scripts `pip install` from: the CIDRs and ports of the
  operator's settings (the chart's networkPolicy.packageIndex), e.g. the index's CDN or a
  mirror's address;
* what a sidecar agent declares in spec.sidecar.egress (its LLM API, say): it shares the
  pod's network, so the pod's policy is its policy.

Nothing else, and no ingress at all. Without a network plugin that enforces
NetworkPolicy the object is inert: docs/kubernetes.md, "Network boundary".
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from proctor.core.labels import COMPONENT, LABEL_EVALUATION, MANAGED_BY
from proctor.core.spec import AgentUnderTest, Evaluation, check_cidr
from proctor.k8s.children.agent_manifests import pod_labels
from proctor.k8s.machinery.names import label_value, network_policy_name

DNS_PORT = 53
DEFAULT_DNS_NAMESPACE = "kube-system"
DEFAULT_DNS_LABELS = {"k8s-app": "kube-dns"}
"""The label kubeadm's and most distributions' CoreDNS pods carry."""
NAMESPACE_NAME = "kubernetes.io/metadata.name"
"""The label every namespace carries with its own name (set by the API server)."""


@dataclass(frozen=True)
class Boundary:
    """The operator's settings of the boundary (the chart's networkPolicy values)."""

    enabled: bool = False
    """Make a NetworkPolicy per Evaluation; off, the operator makes none."""
    package_index_cidrs: tuple[str, ...] = ()
    """Where the package index (or its mirror, its proxy) is, as CIDRs."""
    package_index_ports: tuple[int, ...] = (443,)
    """Its TCP ports."""
    dns_namespace: str = DEFAULT_DNS_NAMESPACE
    """The namespace of the cluster's DNS pods."""
    dns_labels: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_DNS_LABELS))
    """The labels of the cluster's DNS pods."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Boundary:
        """From PROCTOR_NETWORK_POLICY (1 or true: on), PROCTOR_PACKAGE_INDEX_CIDRS and
        PROCTOR_PACKAGE_INDEX_PORTS (comma-separated), PROCTOR_DNS_NAMESPACE and
        PROCTOR_DNS_LABELS (k=v,k=v); a bad one is a ValueError naming it."""
        enabled = environ.get("PROCTOR_NETWORK_POLICY", "").strip().lower() in ("1", "true")
        cidrs = _words(environ.get("PROCTOR_PACKAGE_INDEX_CIDRS", ""))
        for cidr in cidrs:
            try:
                check_cidr(cidr)  # the rule AgentUnderTests' CIDRs are held to
            except ValueError as exc:
                raise ValueError(f"PROCTOR_PACKAGE_INDEX_CIDRS has {cidr!r}, comma-separated "
                                 f"CIDRs expected: {exc}") from None
        ports = _words(environ.get("PROCTOR_PACKAGE_INDEX_PORTS", "")) or ["443"]
        if not all(p.isdigit() and 0 < int(p) < 65536 for p in ports):
            raise ValueError(f"PROCTOR_PACKAGE_INDEX_PORTS is {','.join(ports)!r}: give port "
                             f"numbers (1 to 65535), comma-separated")
        labels = {}
        for pair in _words(environ.get("PROCTOR_DNS_LABELS", "")):
            key, eq, value = pair.partition("=")
            if not (eq and key):
                raise ValueError(f"PROCTOR_DNS_LABELS has {pair!r}: give key=value pairs, "
                                 f"comma-separated")
            labels[key] = value
        return cls(enabled, tuple(cidrs), tuple(int(p) for p in ports),
                   environ.get("PROCTOR_DNS_NAMESPACE", "").strip() or DEFAULT_DNS_NAMESPACE,
                   labels or dict(DEFAULT_DNS_LABELS))


NO_BOUNDARY = Boundary()
"""The operator's setting when none is given: no NetworkPolicy."""


def _words(text: str) -> list[str]:
    return [w.strip() for w in text.split(",") if w.strip()]


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def _ip_block(cidr: str) -> dict[str, Any]:
    return {"ipBlock": {"cidr": cidr}}


def task_pod_labels(evaluation: Evaluation) -> dict[str, str]:
    """The labels every task pod of the Evaluation carries (`manifests.item_labels`)."""
    return {MANAGED_BY: "proctor", LABEL_EVALUATION: label_value(evaluation.name),
            COMPONENT: "work-item"}


def dns_rule(boundary: Boundary) -> dict[str, Any]:
    """The cluster's DNS pods, UDP and TCP 53."""
    return {"to": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME: boundary.dns_namespace}},
                    "podSelector": {"matchLabels": dict(boundary.dns_labels)}}],
            "ports": [{"protocol": "UDP", "port": DNS_PORT},
                      {"protocol": "TCP", "port": DNS_PORT}]}


def agent_rules(agent: AgentUnderTest | None) -> list[dict[str, Any]]:
    """What the task pods may reach of the agent and for it (none: no agent is asked)."""
    if agent is None:
        return []
    spec = agent.spec
    if spec.sidecar is not None:
        # The sidecar answers on loopback; its own needs are the pod's.
        return [{"to": [_ip_block(c) for c in spec.sidecar.egress]}] if spec.sidecar.egress \
            else []
    if spec.service is not None:
        return [{"to": [{"podSelector": {"matchLabels": pod_labels(agent)}}],
                 "ports": _tcp(spec.service.port)}]
    url = urlsplit(spec.endpoint or "")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        address = ipaddress.ip_address(url.hostname or "")
        cidrs: tuple[str, ...] = (f"{address}/{address.max_prefixlen}",)
    except ValueError:
        cidrs = spec.endpoint_cidrs
    if not cidrs:
        # A host name: a NetworkPolicy cannot name it, and refusing it would refuse every
        # agent behind a Service name by default. Its port is allowed to any address; the
        # AgentUnderTest's endpointCidrs narrow that to its addresses.
        return [{"ports": _tcp(port)}]
    return [{"to": [_ip_block(c) for c in cidrs], "ports": _tcp(port)}]


def package_index_rule(boundary: Boundary) -> list[dict[str, Any]]:
    """The package index's CIDRs on its ports (none given: no rule)."""
    if not boundary.package_index_cidrs:
        return []
    return [{"to": [_ip_block(c) for c in boundary.package_index_cidrs],
             "ports": _tcp(*boundary.package_index_ports)}]


def network_policy(evaluation: Evaluation, agent: AgentUnderTest | None,
                   boundary: Boundary) -> dict[str, Any]:
    """The Evaluation's NetworkPolicy: its task pods take no ingress, and reach DNS, the
    agent, the package index and the sidecar's declared needs only. (The owner reference
    is the caller's.)"""
    egress = [dns_rule(boundary), *agent_rules(agent), *package_index_rule(boundary)]
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": network_policy_name(evaluation.name),
                     "namespace": evaluation.namespace,
                     "labels": {MANAGED_BY: "proctor", LABEL_EVALUATION:
                                label_value(evaluation.name), COMPONENT: "network-policy"}},
        "spec": {"podSelector": {"matchLabels": task_pod_labels(evaluation)},
                 # Ingress with no rules: no peer may open a connection to a task pod.
                 # (An empty `ingress: []` is dropped when stored, so a server-side apply
                 # of it would count as a change every time.)
                 "policyTypes": ["Ingress", "Egress"],
                 "egress": egress},
    }


def policy_while_open(evaluation: Evaluation, agent: AgentUnderTest | None,
                      boundary: Boundary, finished: bool) -> dict[str, Any] | None:
    """The Evaluation's NetworkPolicy when the boundary is on and items may still start;
    None otherwise (a finished Evaluation starts nothing more)."""
    if not boundary.enabled or finished:
        return None
    return network_policy(evaluation, agent, boundary)
