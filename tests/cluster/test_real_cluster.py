"""The chart installed for real: scripts/cluster-demo.sh end to end on a real Kubernetes.

scripts/cluster.sh starts a one-node cluster built from Kubernetes' own sources
(tests/support/real_cluster.py); scripts/try-operator.sh, which cluster-demo.sh runs, installs
charts/proctor into it with helm, the operator runs in-cluster from the runner image under
the chart's ServiceAccount and Role (RBAC enforced by the API server), the demo Evaluation
runs against a reference agent served in-cluster, and the verdicts `proctor results pull`
gives must equal those of `proctor run` on this machine. Then one verb is taken from the
chart's rules, and the operator must fail as the API server makes it fail (403, no Job), and
go on once the verb is back. The operator serves only this module's namespace, so that it
leaves other Evaluations on a shared cluster alone: its rules are a Role there, the same
rules the chart's ClusterRole holds when it serves every namespace.

Where a cluster cannot run these skip (PROCTOR_REQUIRE_CLUSTER=1: fail). A few minutes with
the images and the cluster's binaries cached.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import k8s_tools, real_cluster
from support.paths import ROOT

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def install(cluster_kubeconfig: Path) -> Iterator[real_cluster.Install]:
    """This module's names; its release and namespaces go at the end."""
    named = real_cluster.settings(cluster_kubeconfig, "cluster-demo")
    try:
        yield named
    finally:
        real_cluster.uninstall(named)


@pytest.fixture(scope="module")
def demo(install: real_cluster.Install, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scripts/cluster-demo.sh's output folder. It builds and imports the images itself
    (KUBECONFIG unset) and leaves the chart and the agent installed."""
    out = tmp_path_factory.mktemp("cluster-demo")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | install.env
    done = subprocess.run(["bash", "scripts/cluster-demo.sh", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    print(done.stderr[-6000:])
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def _kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    kubectl = str(k8s_tools.tool_binary("kubectl"))
    done = subprocess.run([kubectl, "--kubeconfig", kubeconfig, *args], input=stdin,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _forbidden(log: str, namespace: str) -> bool:
    """demo-gold's Job creation was refused with a 403 naming the verb and resource."""
    return any("(403)" in line and 'cannot create resource "jobs"' in line
               for line in log.splitlines()
               if f"Acting failed evaluation={namespace}/demo-gold" in line)


def _wait(what: str, check, seconds: float = 90):
    deadline = time.monotonic() + seconds
    while not (found := check()):
        assert time.monotonic() < deadline, f"no {what} within {seconds:.0f}s"
        time.sleep(1)
    return found


def _verdicts(folder: Path) -> dict[str, tuple[str, str | None]]:
    rows = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()
            if line]
    return {r["item_id"]: (r["outcome"], r.get("error_kind")) for r in rows}


def test_demo_evaluation_succeeds_in_cluster_with_the_verdicts_of_proctor_run(demo):
    cluster, local = _verdicts(demo / "cluster"), _verdicts(demo / "local")
    assert len(cluster) == 10
    assert cluster == local
    # The mixed agent gives more than one outcome: the comparison is not all-resolved.
    assert len({outcome for outcome, _ in cluster.values()}) > 1


def test_timings_are_recorded(demo):
    phases = dict(line.split() for line in (demo / "timings.txt").read_text().splitlines())
    for phase in ("build-runner-image", "helm-install-to-operator-ready",
                  "evaluation-to-succeeded"):
        assert float(phases[phase]) >= 0


def test_a_verb_missing_from_the_chart_role_fails_as_the_api_server_makes_it(demo, install):
    """Without `create` on Jobs the API server answers 403: the operator logs the API
    server's refusal (counted in proctor_reconcile_errors), and no Job appears. With the
    chart's rule back, the same Evaluation goes on: the chart's rules let it."""
    kubeconfig, ns = str(install.kubeconfig), install.namespace
    role = json.loads(_kubectl(kubeconfig, "get", "role", install.deployment, "-n", ns,
                               "-o", "json"))
    shipped = json.dumps(role)
    jobs = next(r for r in role["rules"] if r.get("apiGroups") == ["batch"])
    jobs["verbs"].remove("create")
    _kubectl(kubeconfig, "replace", "-f", "-", stdin=json.dumps(role))
    jobs_of = ["get", "jobs", "-n", ns, "-l", "proctor.dev/evaluation=demo-gold", "-o", "name"]
    try:
        _kubectl(kubeconfig, "apply", "-n", ns, "-f", str(ROOT / "examples" / "demo-gold.yaml"))
        _wait("403 in the operator's log", lambda: _forbidden(_kubectl(
            kubeconfig, "-n", install.operator_namespace, "logs",
            f"deployment/{install.deployment}", "--tail=-1"), ns))
        assert _kubectl(kubeconfig, *jobs_of) == ""
    finally:
        restored = json.loads(shipped)
        restored["metadata"].pop("resourceVersion", None)
        _kubectl(kubeconfig, "replace", "-f", "-", stdin=json.dumps(restored))
    try:
        _wait("Job once the verb is back", lambda: _kubectl(kubeconfig, *jobs_of))
    finally:
        _kubectl(kubeconfig, "delete", "evaluation", "demo-gold", "-n", ns, "--wait=false")


def test_the_cluster_is_the_kubernetes_built_here(cluster_kubeconfig):
    """The server is the Kubernetes scripts/cluster/go.mod pins (v1.35 or newer), built here
    with its version stamped in, and its one node is the one scripts/cluster.sh starts."""
    pinned = re.search(r"^\s*k8s\.io/kubernetes (v\S+)",
                       (ROOT / "scripts" / "cluster" / "go.mod").read_text(), re.M)
    assert pinned is not None
    version = json.loads(_kubectl(str(cluster_kubeconfig), "version", "-o", "json"))
    server = version["serverVersion"]
    assert server["gitVersion"] == pinned[1] and server["gitTreeState"] == "clean"
    assert (int(server["major"]), int(server["minor"].rstrip("+"))) >= (1, 35)
    nodes = json.loads(_kubectl(str(cluster_kubeconfig), "get", "nodes", "-o", "json"))
    assert [(n["metadata"]["name"], n["status"]["nodeInfo"]["kubeletVersion"])
            for n in nodes["items"]] == [("proctor-node", pinned[1])]
