"""The check that the operator's tests ran on a Kubernetes v1.35+ built by scripts/cluster.sh
(`real_cluster_fixtures.not_built_here`), on /version answers of real servers; and what a
failed run says of the cluster's pods (`real_cluster.unwell_pods`), on real status objects."""

from __future__ import annotations

import json

import pytest
import yaml

from support.paths import SHARED_DATA, shared
from support.real_cluster import shared_ip, unwell_pods
from support.real_cluster_fixtures import not_built_here

BUILT_HERE = {"major": "1", "minor": "35", "gitVersion": "v1.35.4", "gitCommit": "$Format:%H$",
              "gitTreeState": "clean", "buildDate": "1970-01-01T00:00:00Z",
              "goVersion": "go1.26.8", "compiler": "gc", "platform": "linux/amd64"}
"""What the shared cluster's API server answered (cluster.sh stamps only the version)."""


def test_a_server_built_by_cluster_sh_passes():
    assert not_built_here(BUILT_HERE) is None
    assert not_built_here(BUILT_HERE | {"gitVersion": "v1.36.0"}) is None


@pytest.mark.parametrize(("change", "words"), [
    # A released binary (kind's node image, a cloud's control plane) names its commit and
    # build date (these two are made up).
    ({"gitVersion": "v1.35.0", "gitCommit": "0123456789abcdef0123456789abcdef01234567",
      "buildDate": "2025-12-17T12:32:06Z"}, "not built by scripts/cluster.sh"),
    ({"gitVersion": "v1.34.2"}, "not a release v1.35 or newer"),
    # A plain `go build` of the sources, nothing stamped:
    ({"gitVersion": "v0.0.0-master+$Format:%H$"}, "not a release v1.35 or newer"),
    ({"gitVersion": "v1.35.4-kwok"}, "not a release v1.35 or newer"),
])
def test_any_other_server_is_refused(change, words):
    problem = not_built_here(BUILT_HERE | change)
    assert problem is not None and words in problem


def test_a_failed_runs_report_names_the_pods_that_never_got_ready_and_why():
    """real_cluster.unwell_pods, what a failed run prints of the cluster, on real objects."""
    k8s = shared(SHARED_DATA / "k8s-status")
    pods = [*json.loads((k8s / "podlist-errimagepull-pending_troubleshoot.json").read_text())[
        "items"], *json.loads((k8s / "kubelet-podlist-succeeded-and-running-job-pod_nvsentinel"
                                     ".json").read_text())["items"],
            yaml.safe_load((k8s / "pod-evicted-emptydir-sizelimit_aiops-e2e-report_k8s1.26"
                                  ".yaml").read_text())]
    events = json.loads((k8s / "eventlist-imagepull-oomjob-backofflimit_troubleshoot.json"
                         ).read_text())["items"]
    lines = unwell_pods(pods, events)
    pending, *warnings, evicted = lines
    assert pending.startswith("message-image-pull-fail/no-image-deployment-849c4c4958-rxqmt: "
                               "Pending")
    assert "ErrImagePull" in pending or "ImagePullBackOff" in pending
    assert warnings and all(w.startswith("  ") for w in warnings) and len(warnings) <= 3
    assert any("Failed" in w for w in warnings)
    assert ": Failed" in evicted and "Evicted" in evicted
    # The running ready pod and the succeeded one are not named.
    assert not any("gpu-job" in line or "node-debugger" in line for line in lines)


def test_a_report_names_the_live_pods_that_share_an_unready_pods_address():
    def pod(name: str, ip: str, phase: str = "Running", host: bool = False) -> dict:
        return {"metadata": {"namespace": "ns", "name": name, "uid": name},
                "spec": {"hostNetwork": host}, "status": {"phase": phase, "podIP": ip}}
    unready = pod("agent", "10.244.0.6")
    others = [unready, pod("zombie", "10.244.0.6"), pod("done", "10.244.0.6", "Succeeded"),
              pod("node", "10.244.0.6", host=True), pod("fine", "10.244.0.7")]
    assert shared_ip(unready, others) == ["ns/zombie"]
    assert shared_ip(pod("fine", "10.244.0.7"), others) == []
