"""An Evaluation's NetworkPolicy (pure builder), field by field: which pods it governs, no
ingress, and egress to DNS, the agent, the package index and a sidecar's declared needs,
nothing else; the operator's settings of it; the specs' CIDR fields."""

from __future__ import annotations

import asyncio
import json
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from proctor.core.model import Instance
from proctor.core.spec import AgentUnderTest, AgentUnderTestSpec
from proctor.k8s.children.agent_manifests import deployment
from proctor.k8s.evaluation.act import Pass, Tracked
from proctor.k8s.evaluation.metrics import Metrics
from proctor.k8s.evaluation.reconcile import Decision
from proctor.k8s.features import netpol
from proctor.k8s.features.netpol import Boundary, policy_while_open
from support.api_servers import StandInApi, answer, read_json
from support.job_manifests import evaluation, item_of, job_for, validate

INDEX = Boundary(enabled=True, package_index_cidrs=("151.101.0.0/16", "2a04:4e42::/32"),
                 package_index_ports=(443,))
DNS = {"to": [{"namespaceSelector": {"matchLabels": {
    "kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
PYPI = {"to": [{"ipBlock": {"cidr": "151.101.0.0/16"}}, {"ipBlock": {"cidr": "2a04:4e42::/32"}}],
        "ports": [{"protocol": "TCP", "port": 443}]}


def agent(**spec: Any) -> AgentUnderTest:
    return AgentUnderTest(name="agent", namespace="evals",
                          spec=AgentUnderTestSpec.model_validate(spec))


def policy(aut: AgentUnderTest | None, boundary: Boundary = INDEX) -> dict[str, Any]:
    return netpol.network_policy(evaluation("demo"), aut, boundary)


def test_the_policy_governs_the_evaluations_task_pods_and_takes_no_ingress(task) -> None:
    obj = policy(agent(endpoint="http://10.0.0.5:9009/"))
    validate(obj)
    assert obj["metadata"]["name"] == "proctor-demo"
    assert obj["metadata"]["namespace"] == "evals"
    assert obj["spec"]["policyTypes"] == ["Ingress", "Egress"]
    # Ingress is a policy type with no rule: no peer may open a connection to a task pod.
    assert "Ingress" in obj["spec"]["policyTypes"] and not obj["spec"].get("ingress")
    selector = obj["spec"]["podSelector"]["matchLabels"]
    _, job = job_for(evaluation("demo"), agent(endpoint="http://10.0.0.5:9009/"), task)
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()  # it selects the Job's pods...
    _, other = job_for(evaluation("other"), agent(endpoint="http://10.0.0.5:9009/"), task)
    assert not selector.items() <= other["spec"]["template"]["metadata"]["labels"].items()
    # ...and not a service agent's pods, which carry no Evaluation's label
    aut = agent(service={"image": "agent:1"})
    assert not selector.items() <= deployment(aut)["spec"]["template"]["metadata"][
        "labels"].items()


def test_an_endpoint_at_an_ip_is_reached_on_its_port_and_nothing_else() -> None:
    obj = policy(agent(endpoint="http://10.0.0.5:9009/"))
    assert obj["spec"]["egress"] == [
        DNS, {"to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}],
              "ports": [{"protocol": "TCP", "port": 9009}]}, PYPI]
    v6 = policy(agent(endpoint="https://[2001:db8::7]/a2a"))
    assert v6["spec"]["egress"][1] == {"to": [{"ipBlock": {"cidr": "2001:db8::7/128"}}],
                                       "ports": [{"protocol": "TCP", "port": 443}]}


def test_an_endpoint_named_by_host_is_reached_at_the_cidrs_its_agent_gives() -> None:
    aut = agent(endpoint="http://agent.example/", endpointCidrs=["192.0.2.0/28"])
    assert policy(aut)["spec"]["egress"][1] == {
        "to": [{"ipBlock": {"cidr": "192.0.2.0/28"}}], "ports": [{"protocol": "TCP", "port": 80}]}
    # Without them, a name cannot be matched: its port is open to any address, no other.
    assert policy(agent(endpoint="http://agent.example:9009/"))["spec"]["egress"][1] == {
        "ports": [{"protocol": "TCP", "port": 9009}]}


def test_a_service_agent_is_reached_at_its_pods_on_its_port() -> None:
    aut = agent(service={"image": "agent:1", "port": 8080})
    rule = policy(aut)["spec"]["egress"][1]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8080}]
    (peer,) = rule["to"]
    assert list(peer) == ["podSelector"]  # the policy's own namespace, the agent's
    assert peer["podSelector"]["matchLabels"] == deployment(aut)["spec"]["template"][
        "metadata"]["labels"]


def test_a_sidecar_reaches_what_it_declares_on_any_port() -> None:
    aut = agent(sidecar={"image": "agent:1", "egress": ["203.0.113.0/24", "2001:db8::/48"]})
    assert policy(aut)["spec"]["egress"] == [
        DNS, {"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}},
                     {"ipBlock": {"cidr": "2001:db8::/48"}}]}, PYPI]
    # It declares nothing: DNS and the index only (it answers on loopback, never filtered).
    assert policy(agent(sidecar={"image": "agent:1"}))["spec"]["egress"] == [DNS, PYPI]


def test_without_an_agent_or_an_index_only_dns_is_left() -> None:
    obj = policy(None, Boundary(enabled=True))
    validate(obj)
    assert obj["spec"]["egress"] == [DNS]


def test_the_operator_reads_its_settings_from_its_environment() -> None:
    assert Boundary.from_env({}) == Boundary()
    assert not Boundary.from_env({}).enabled
    read = Boundary.from_env({
        "PROCTOR_NETWORK_POLICY": "true", "PROCTOR_PACKAGE_INDEX_CIDRS": " 10.1.0.0/16, ::1/128",
        "PROCTOR_PACKAGE_INDEX_PORTS": "443,3141", "PROCTOR_DNS_NAMESPACE": "dns",
        "PROCTOR_DNS_LABELS": "app=dns,tier=core"})
    assert read == Boundary(True, ("10.1.0.0/16", "::1/128"), (443, 3141), "dns",
                            {"app": "dns", "tier": "core"})
    assert netpol.dns_rule(read)["to"] == [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "dns"}},
        "podSelector": {"matchLabels": {"app": "dns", "tier": "core"}}}]


@pytest.mark.parametrize(("environ", "named"), [
    ({"PROCTOR_PACKAGE_INDEX_CIDRS": "pypi"}, "PROCTOR_PACKAGE_INDEX_CIDRS has 'pypi'"),
    ({"PROCTOR_PACKAGE_INDEX_CIDRS": "10.0.0.1/8"}, "PROCTOR_PACKAGE_INDEX_CIDRS has"),
    ({"PROCTOR_PACKAGE_INDEX_CIDRS": "10.0.0.1"}, "no prefix length"),
    ({"PROCTOR_PACKAGE_INDEX_PORTS": "https"}, "PROCTOR_PACKAGE_INDEX_PORTS is 'https'"),
    ({"PROCTOR_PACKAGE_INDEX_PORTS": "0"}, "PROCTOR_PACKAGE_INDEX_PORTS is '0'"),
    ({"PROCTOR_DNS_LABELS": "kube-dns"}, "PROCTOR_DNS_LABELS has 'kube-dns'"),
])
def test_a_bad_setting_is_one_line_naming_it(environ: dict[str, str], named: str) -> None:
    with pytest.raises(ValueError, match=named) as caught:
        Boundary.from_env(environ)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("spec", [
    {"endpoint": "http://a/", "endpointCidrs": ["a.example"]},
    {"endpoint": "http://a/", "endpointCidrs": ["10.0.0.1/8"]},  # host bits set
    {"sidecar": {"image": "a:1", "egress": ["10.0.0.1"]}},  # a prefix is needed
])
def test_a_spec_cidr_that_is_not_one_is_refused(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="is not a CIDR"):
        agent(**spec)


# --- The shell: the policy is applied before the Jobs it governs ---------------------------


class ApiServer(StandInApi):
    """The API server: it records each write and answers with its body, or refuses the
    NetworkPolicy's apply (403) when told to."""

    def __init__(self, refuse_policy: bool = False) -> None:
        self.writes: list[tuple[str, str, dict[str, Any]]] = []
        self.refuse_policy = refuse_policy
        super().__init__(("POST", "PATCH"))

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        body = read_json(request)
        self.writes.append((request.command, request.path, body))
        refused = self.refuse_policy and "networkpolicies" in request.path
        answer(request, 403 if refused else 200 if request.command == "PATCH" else 201,
               json.dumps({"kind": "Status", "code": 403, "message": "forbidden"}
                          if refused else body).encode())


def a_pass(server: ApiServer, instance: Instance, tracked: Tracked) -> Pass:
    ev = evaluation("demo")
    aut = agent(endpoint="http://10.0.0.5:9009/")
    body = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
            "metadata": {"name": "demo", "namespace": "evals", "uid": "uid-1"}}
    return Pass(server.kube(), Metrics(CollectorRegistry()), None, body, tracked, ev, aut,
                {instance.instance_id: instance}, policy=policy(aut))


def test_the_policy_is_applied_owned_before_the_first_job_and_once(task) -> None:
    tracked = Tracked("uid-1", "demo")
    with ApiServer() as server:
        p = a_pass(server, task, tracked)
        assert asyncio.run(p.act(Decision(start=[item_of(task)]))) == []
        first = list(server.writes)
        other = item_of(task, repeat=1)
        assert asyncio.run(a_pass(server, task, tracked).act(Decision(start=[other]))) == []
    (method, path, applied), *rest = first
    assert method == "PATCH"
    assert path.startswith("/apis/networking.k8s.io/v1/namespaces/evals/networkpolicies/"
                           "proctor-demo?") and "fieldManager=proctor" in path
    assert applied["spec"] == policy(agent(endpoint="http://10.0.0.5:9009/"))["spec"]
    (owner,) = applied["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Evaluation", "demo", "uid-1")
    assert [w[1].split("/")[-1] for w in rest] == ["configmaps", "jobs"]
    # The next pass, the policy unchanged, applies nothing again: one more Job only.
    assert [w[1].split("/")[-1] for w in server.writes[len(first):]] == ["jobs"]


def test_a_policy_refused_starts_no_job(task) -> None:
    with ApiServer(refuse_policy=True) as server:
        failed = asyncio.run(a_pass(server, task, Tracked("uid-1", "demo")).act(
            Decision(start=[item_of(task)])))
    assert len(failed) == 1 and "403" in str(failed[0])
    assert [w[1].split("?")[0].split("/")[-1] for w in server.writes] == ["proctor-demo"]


def test_a_policy_is_made_only_while_items_may_start() -> None:
    named = agent(endpoint="http://agent.example:9009/")
    # Off, or once the Evaluation is finished, there is no policy to make.
    assert policy_while_open(evaluation("demo"), named, Boundary(), finished=False) is None
    assert policy_while_open(evaluation("demo"), named, INDEX, finished=True) is None
    made = policy_while_open(evaluation("demo"), agent(endpoint="http://10.0.0.5:9/"), INDEX,
                             finished=False)
    assert made == policy(agent(endpoint="http://10.0.0.5:9/"))
