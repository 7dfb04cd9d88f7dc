"""`Kube`, the operator's API shell, against the test cluster over HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from proctor.k8s.api import Kube, NameTaken
from proctor.k8s.manifests import LABEL_ITEM

pytest_plugins = ["cluster.fixtures"]


@pytest.fixture
def kube(kube_client: Any) -> Kube:
    return Kube(kube_client)


def job(namespace: str, name: str, item: str) -> dict[str, Any]:
    # Suspended: the test cluster's Job controller makes no pod for it.
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_ITEM: item}},
            "spec": {"suspend": True, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox"}]}}}}


def configmap(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace}, "data": {"a": "1"}}


def test_create_answers_whether_it_made_the_object(kube: Kube, k8s_namespace: str,
                                                   test_cluster: Any) -> None:
    assert kube.create(configmap(k8s_namespace, "task")) is True
    assert kube.create(configmap(k8s_namespace, "task")) is False  # 409: already there
    assert kube.create(job(k8s_namespace, "ev-1", "item-a")) is True
    assert kube.create(job(k8s_namespace, "ev-1", "item-a")) is False
    stored = test_cluster.store.find(test_cluster.store.resource("batch", "v1", "jobs"),
                                     k8s_namespace, "ev-1")
    assert stored["metadata"]["labels"] == {LABEL_ITEM: "item-a"}
    assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox"


def test_a_job_of_another_item_under_the_name_is_never_taken_as_ours(
        kube: Kube, k8s_namespace: str) -> None:
    kube.create(job(k8s_namespace, "ev-1", "item-a"))
    with pytest.raises(NameTaken, match="item-a, not item-b"):
        kube.create(job(k8s_namespace, "ev-1", "item-b"))


def test_refusals_other_than_409_are_raised(kube: Kube, k8s_namespace: str) -> None:
    invalid = job(k8s_namespace, "ev-1", "item-a")
    invalid["spec"]["template"]["spec"]["containers"] = [{"image": "busybox"}]  # no name
    with pytest.raises(ApiException) as refused:
        kube.create(invalid)
    assert refused.value.status == 422 and "containers" in refused.value.body
    invalid["spec"]["template"]["spec"]["containers"] = "not a list"
    with pytest.raises(ApiException) as undecodable:
        kube.create(invalid)
    assert undecodable.value.status == 400
    with pytest.raises(ApiException) as missing:
        kube.create(configmap("no-such-namespace", "task"))
    assert missing.value.status == 404
    with pytest.raises(ValueError, match="cannot create a Secret"):
        kube.create({"kind": "Secret", "metadata": {"namespace": k8s_namespace}})


def test_delete_job_lets_its_pods_go_in_the_background(kube: Kube, k8s_namespace: str,
                                                       test_cluster: Any) -> None:
    kube.create(job(k8s_namespace, "ev-1", "item-a"))
    kube.delete_job(k8s_namespace, "ev-1")
    jobs = test_cluster.store.resource("batch", "v1", "jobs")
    test_cluster.wait_for(lambda: test_cluster.store.find(jobs, k8s_namespace, "ev-1") is None,
                          10)
    deletes = test_cluster.calls("DELETE", f"/namespaces/{k8s_namespace}/jobs/ev-1")
    assert [code for *_, code in deletes] == [200]
    kube.delete_job(k8s_namespace, "ev-1")  # already gone: harmless
    assert [code for *_, code in test_cluster.calls(
        "DELETE", f"/namespaces/{k8s_namespace}/jobs/ev-1")] == [200, 404]

