"""`Kube`, the operator's API shell, against the real Kubernetes of scripts/cluster.sh."""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from proctor.core.labels import LABEL_ITEM
from proctor.k8s.machinery.api import Kube, NameTaken
from support.real_cluster_fixtures import wait_for

pytest_plugins = ["support.real_cluster_fixtures"]
pytestmark = pytest.mark.cluster


@pytest.fixture
def kube(cluster_api_client: Any) -> Kube:
    return Kube(cluster_api_client)


def job(namespace: str, name: str, item: str, suspend: bool = True) -> dict[str, Any]:
    # Suspended: the Job controller makes no pod for it. Unsuspended, its one pod names an
    # image the node lacks and may not pull (pullPolicy Never): it stays Pending, and
    # needs no image.
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_ITEM: item}},
            "spec": {"suspend": suspend, "backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "proctor-test.local/absent:1",
                                "imagePullPolicy": "Never"}]}}}}


def configmap(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace}, "data": {"a": "1"}}


def test_create_answers_whether_it_made_the_object(kube: Kube, cluster_namespace: str,
                                                   cluster_api_client: Any) -> None:
    ns = cluster_namespace
    assert kube.create(configmap(ns, "task")) is True
    assert kube.create(configmap(ns, "task")) is False  # 409: already there
    assert kube.create(job(ns, "ev-1", "item-a")) is True
    assert kube.create(job(ns, "ev-1", "item-a")) is False
    stored = kubernetes.client.BatchV1Api(cluster_api_client).read_namespaced_job("ev-1", ns)
    assert stored.metadata.labels == {LABEL_ITEM: "item-a"}
    assert stored.spec.template.spec.containers[0].image == "proctor-test.local/absent:1"
    assert kubernetes.client.CoreV1Api(cluster_api_client).read_namespaced_config_map(
        "task", ns).data == {"a": "1"}


def test_a_job_of_another_item_under_the_name_is_never_taken_as_ours(
        kube: Kube, cluster_namespace: str) -> None:
    kube.create(job(cluster_namespace, "ev-1", "item-a"))
    with pytest.raises(NameTaken, match="item-a, not item-b"):
        kube.create(job(cluster_namespace, "ev-1", "item-b"))


def test_refusals_other_than_409_are_raised(kube: Kube, cluster_namespace: str) -> None:
    invalid = job(cluster_namespace, "ev-1", "item-a")
    invalid["spec"]["template"]["spec"]["containers"] = [{"image": "busybox"}]  # no name
    with pytest.raises(ApiException) as refused:
        kube.create(invalid)
    assert refused.value.status == 422 and "containers" in refused.value.body
    invalid["spec"]["template"]["spec"]["containers"] = "not a list"
    with pytest.raises(ApiException) as undecodable:
        kube.create(invalid)
    assert undecodable.value.status == 400
    with pytest.raises(ApiException) as missing:
        kube.create(configmap("pt-no-such-namespace", "task"))
    assert missing.value.status == 404
    with pytest.raises(ValueError, match="cannot create a Secret"):
        kube.create({"kind": "Secret", "metadata": {"namespace": cluster_namespace}})


def test_delete_job_lets_its_pods_go_in_the_background(kube: Kube, cluster_namespace: str,
                                                       cluster_api_client: Any) -> None:
    ns = cluster_namespace
    batch = kubernetes.client.BatchV1Api(cluster_api_client)
    core = kubernetes.client.CoreV1Api(cluster_api_client)

    def pods() -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod(
            ns, label_selector="batch.kubernetes.io/job-name=ev-1").items]
    kube.create(job(ns, "ev-1", "item-a", suspend=False))
    wait_for(pods, 60, message="the Job controller made no pod")
    kube.delete_job(ns, "ev-1")
    # Background: the Job is gone when the call returns (Foreground would keep it until
    # its pods are gone), and the garbage collector then removes its pod (batch/v1's
    # default, Orphan, would leave the pod behind).
    with pytest.raises(ApiException) as gone:
        batch.read_namespaced_job("ev-1", ns)
    assert gone.value.status == 404
    wait_for(lambda: not pods(), 60, message=lambda: f"the Job's pods stayed: {pods()}")
    kube.delete_job(ns, "ev-1")  # already gone: harmless


def test_apply_creates_a_service_agent_then_changes_only_what_differs(
        kube: Kube, cluster_namespace: str) -> None:
    from proctor.core.spec import AgentUnderTest, AgentUnderTestSpec
    from proctor.k8s.children import agent_manifests

    def agent(port: int) -> AgentUnderTest:
        return AgentUnderTest(name="mixed", namespace=cluster_namespace, spec=(
            AgentUnderTestSpec(service={"image": "proctor-test.local/absent:1", "port": port})))
    deployment, service = (kube.apply(o) for o in agent_manifests.desired(agent(9009)))
    assert (deployment["kind"], service["kind"]) == ("Deployment", "Service")
    assert agent_manifests.unavailable(deployment) is not None  # its image is absent
    again = kube.apply(agent_manifests.deployment(agent(9009)))
    # The same spec again changes nothing the generation counts (the Deployment
    # controller's status writes change the resourceVersion meanwhile).
    assert again["metadata"]["generation"] == deployment["metadata"]["generation"] == 1
    moved = kube.apply(agent_manifests.service(agent(8080)))
    assert [p["port"] for p in moved["spec"]["ports"]] == [8080]
    with pytest.raises(ValueError, match="cannot apply a Secret"):
        kube.apply({"kind": "Secret", "metadata": {"namespace": cluster_namespace,
                                                   "name": "s"}})


def test_the_api_server_takes_every_shape_of_network_policy(
        kube: Kube, cluster_namespace: str) -> None:
    """Each agent's policy, as the API server validates it (IPv4 and IPv6 blocks, a pod
    selector, rules with and without ports); applied again unchanged, it stays as it was."""
    from proctor.core.spec import AgentUnderTest, AgentUnderTestSpec, Evaluation, EvaluationSpec
    from proctor.k8s.features.netpol import Boundary, network_policy

    boundary = Boundary(True, ("151.101.0.0/16", "2a04:4e42::/32"), (443, 3141))
    shapes = {"endpoint": {"endpoint": "http://[2001:db8::7]:9009/"},
              "named": {"endpoint": "https://agent.example/", "endpointCidrs": ["192.0.2.0/28"]},
              "service": {"service": {"image": "agent:1"}},
              "sidecar": {"sidecar": {"image": "agent:1", "egress": ["203.0.113.0/24"]}}}
    for name, spec in shapes.items():
        agent = AgentUnderTest(name="a", namespace=cluster_namespace,
                               spec=AgentUnderTestSpec.model_validate(spec))
        evaluation = Evaluation(name=name, namespace=cluster_namespace,
                                spec=EvaluationSpec(agent_ref={"name": "a"}))
        policy = network_policy(evaluation, agent, boundary)
        taken = kube.apply(policy)
        assert taken["metadata"]["name"] == f"proctor-{name}"
        assert taken["spec"]["egress"] == policy["spec"]["egress"]
        again = kube.apply(policy)
        assert again["metadata"]["generation"] == taken["metadata"]["generation"] == 1
