"""scripts/cluster.sh's control plane with KWOK nodes (PROCTOR_CLUSTER_KWOK_NODES), which
the operator benchmark runs on: it starts beside any other cluster on this host (its own
ports and state), runs a Job's pod to completion on a simulated node, serves that pod's
log through the API server from KWOK's kubelet endpoint, and goes when taken down.

It needs Go or a cached build of the cluster (not root). Opt-in as the other real-cluster
tests are: PROCTOR_CLUSTER_TESTS=1 runs it, PROCTOR_REQUIRE_CLUSTER=1 also makes a missing
requirement a failure. About 15 s with the binaries cached.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from support.paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))
from kwok_plane import KWOK_GROUP, KWOK_VERSION, cri_log, kwok_plane

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def _missing() -> str | None:
    if "1" not in (os.environ.get("PROCTOR_CLUSTER_TESTS"),
                   os.environ.get("PROCTOR_REQUIRE_CLUSTER")):
        return "the real-cluster tests are opt-in: PROCTOR_CLUSTER_TESTS=1 runs them"
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "proctor-cluster"
    if not shutil.which("go") and not any(cache.glob("*/complete")):
        return "neither Go nor a cached build of the cluster's binaries"
    if not (shutil.which("openssl") and shutil.which("curl")):
        return "openssl and curl are needed to start the cluster"
    return None


def _until(what: str, check, seconds: float = 60):
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what} within {seconds:.0f} s"
        time.sleep(0.2)
    return value


def test_a_job_runs_to_completion_on_a_kwok_node(tmp_path: Path) -> None:
    why = _missing()
    if why is not None:
        if os.environ.get("PROCTOR_REQUIRE_CLUSTER") == "1":
            pytest.fail(f"PROCTOR_REQUIRE_CLUSTER=1 but {why}")
        pytest.skip(why)
    from kubernetes import client

    with kwok_plane(tmp_path / "cluster", nodes=1) as plane:
        assert client.VersionApi(plane.api).get_code().git_version.startswith("v1.3")
        batch, core = client.BatchV1Api(plane.api), client.CoreV1Api(plane.api)
        batch.create_namespaced_job("default", {
            "metadata": {"name": "hello"},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "hello", "image": "busybox", "command": ["true"]}]}}}})
        job = _until("the Job completed", lambda: (
            (j := batch.read_namespaced_job("hello", "default")).status.succeeded and j))
        assert job.status.succeeded == 1 and not job.status.failed
        pod = core.list_namespaced_pod("default", label_selector="job-name=hello").items[0]
        assert pod.spec.node_name == "kwok-node-0" and pod.status.phase == "Succeeded"
        assert pod.status.container_statuses[0].state.terminated.exit_code == 0

        # The pod's log, as the API server reads it from the node's kubelet endpoint.
        log = tmp_path / "hello.log"
        log.write_text(cri_log(["hello from kwok"]))
        client.CustomObjectsApi(plane.api).create_namespaced_custom_object(
            KWOK_GROUP, KWOK_VERSION, "default", "logs",
            {"apiVersion": f"{KWOK_GROUP}/{KWOK_VERSION}", "kind": "Logs",
             "metadata": {"name": pod.metadata.name, "namespace": "default"},
             "spec": {"logs": [{"containers": ["hello"], "logsFile": str(log)}]}})
        assert _until("the log was served", lambda: _log(core, pod.metadata.name)) == \
            "hello from kwok\n"
        pids = plane.daemon_pids()
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager",
                             "kube-scheduler", "kwok"}
    for pid in pids.values():  # taken down at the end
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def _log(core, pod: str) -> str:
    from kubernetes.client.exceptions import ApiException

    try:
        return core.read_namespaced_pod_log(pod, "default", container="hello")
    except ApiException:  # KWOK has not seen the Logs object yet
        return ""
