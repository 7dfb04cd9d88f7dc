"""A demo item's Job under gVisor on the real cluster: an Evaluation whose
spec.runner.runtimeClassName is `gvisor` (the RuntimeClass scripts/cluster.sh offers when
runsc builds and runs here) runs to Succeeded, graded resolved, and its pod ran in gVisor's
kernel.

The evidence from inside the pod: a mutating admission webhook served by this test adds a
first init container that prints /proc/version, which names gVisor's kernel
(`Linux version 4.19.0-gvisor ...`) in a gVisor sandbox and the host's kernel under runc.
The operator keeps the finished Job (PROCTOR_JOB_TTL_SECONDS), so that its log can be read.

Where the cluster has no `gvisor` RuntimeClass, the test is skipped with the reason
`scripts/cluster.sh status` gives, even with PROCTOR_REQUIRE_CLUSTER=1: a cluster without
gVisor is a supported one (the README's "Isolation" says where gVisor's shim cannot run).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import kubernetes
import pytest

from proctor.k8s.children.store import RESULT_KEY
from support.real_cluster import CLUSTER_SH
from support.real_cluster_fixtures import (
    AdmissionWebhook,
    Answer,
    ClusterImages,
    RealCluster,
    in_process_operator,
    wait_for,
)

pytest_plugins = ["support.real_cluster_fixtures"]
pytestmark = [pytest.mark.cluster, pytest.mark.slow]

GROUP = ("proctor.dev", "v1alpha1")
RUNTIME_CLASS = "gvisor"
PODS_CREATE = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["pods"], "scope": "Namespaced"}]
RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "768Mi"}}


@pytest.fixture(scope="session")
def gvisor(real_cluster: RealCluster) -> None:
    """Skips, saying why, where the cluster offers no `gvisor` RuntimeClass. Session-scoped
    and named first, so that it runs before the images are built."""
    with real_cluster.api_client() as client:
        why = gvisor_absent(client)
    if why is not None:
        pytest.skip(why)


def gvisor_absent(client: Any) -> str | None:
    """Why the cluster offers no `gvisor` RuntimeClass, or None."""
    try:
        kubernetes.client.NodeV1Api(client).read_runtime_class(RUNTIME_CLASS)
        return None
    except kubernetes.client.ApiException as exc:
        if exc.status != 404:
            raise
    status = subprocess.run(["bash", str(CLUSTER_SH), "status"], capture_output=True,
                            text=True).stdout
    said = next((line for line in status.splitlines() if line.startswith("gvisor:")),
                "scripts/cluster.sh says nothing of gVisor")
    return f"the cluster has no RuntimeClass {RUNTIME_CLASS} ({said})"


def kernel_step(image: str) -> Any:
    """The webhook's handler: a first init container, in the pod's own sandbox, that prints
    the kernel the pod runs on."""
    step = {"name": "kernel", "image": image, "imagePullPolicy": "IfNotPresent",
            "command": ["cat", "/proc/version"],
            "securityContext": {"allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]}}}

    def handler(request: dict[str, Any]) -> Answer:
        return Answer(patch=[{"op": "add", "path": "/spec/initContainers/0", "value": step}])
    return handler


def test_a_demo_item_runs_under_gvisor(gvisor: None, real_cluster: RealCluster,
                                       cluster_images: ClusterImages, cluster_namespace: str,
                                       cluster_api_client: Any,
                                       admission_webhook: AdmissionWebhook,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    ns = cluster_namespace
    custom = kubernetes.client.CustomObjectsApi(cluster_api_client)
    core = kubernetes.client.CoreV1Api(cluster_api_client)
    hook = admission_webhook.register(PODS_CREATE, kernel_step(cluster_images.runner),
                                      mutating=True)
    custom.create_namespaced_custom_object(*GROUP, ns, "evaluations", {
        "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
        "metadata": {"name": "demo", "namespace": ns},
        "spec": {"predictions": {"source": "gold"},
                 "dataset": {"name": "proctor-demo", "maxRows": 1},
                 "runner": {"instanceImageRegistry": cluster_images.instance_registry,
                            "resources": RESOURCES, "runtimeClassName": RUNTIME_CLASS}}})

    def condition(type_: str) -> dict:
        body = custom.get_namespaced_custom_object(*GROUP, ns, "evaluations", "demo")
        return next((c for c in (body.get("status") or {}).get("conditions") or []
                     if c["type"] == type_), {})
    # The finished Job and its pod stay (the Job's TTL), for the kernel step's log.
    monkeypatch.setenv("PROCTOR_JOB_TTL_SECONDS", "1800")
    with in_process_operator(real_cluster, ns, runner_image=cluster_images.runner):
        wait_for(lambda: condition("Succeeded").get("status") == "True", 600, 0.5,
                 lambda: f"the Evaluation never succeeded: {condition('Succeeded')}")
    kept = [json.loads(c.data[RESULT_KEY]) for c in core.list_namespaced_config_map(ns).items
            if (c.metadata.labels or {}).get("app.kubernetes.io/component") == "result"]
    assert [(r["outcome"], r.get("error_kind")) for r in kept] == [("resolved", None)], kept
    assert len(hook.seen) == 1  # one pod, the item's: no retry hid a failure under gVisor
    (pod,) = core.list_namespaced_pod(ns).items
    assert pod.spec.runtime_class_name == RUNTIME_CLASS
    kernel = core.read_namespaced_pod_log(pod.metadata.name, ns, container="kernel")
    assert "gvisor" in kernel, kernel  # under runc: the host's kernel
