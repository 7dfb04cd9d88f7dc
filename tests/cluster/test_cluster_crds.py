"""CRD upgrades on the real Kubernetes of scripts/cluster.sh: a CRD changed on the server is
put back by `proctor crds apply` (a changed field restored, a field crds/ lacks removed), run
with exactly the rights the chart's hook gives it.

First the command alone: the hook's ServiceAccount, ClusterRole and binding are rendered from
the chart (release crdtest, in the test's namespace) and applied, and the command runs here
as that account, with a token of it. Then the chart itself: installed, a CRD changed, and
`helm upgrade` (its hook Job in the runner image) puts it back. They run where the other
real-cluster tests run (tests/support/real_cluster.py); the second needs the session's images.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from proctor.k8s.features.crds import packaged_crds
from support import k8s_tools
from support.paths import ROOT

pytest_plugins = ["support.real_cluster_fixtures"]
pytestmark = pytest.mark.cluster
RELEASE = "crdtest"
SCHEMA = "/spec/versions/0/schema/openAPIV3Schema"
PATCH = [{"op": "add", "path": f"{SCHEMA}/description",
          "value": "changed by tests/cluster/test_cluster_crds.py"},
         {"op": "add", "path": f"{SCHEMA}/properties/spec/properties/addedByATest",
          "value": {"type": "string"}}]
"""A description changed and a field that crds/ lacks added (by kubectl-patch, another
field manager): the apply puts back the one and removes the other."""


def _hook_rbac(namespace: str) -> list[dict[str, Any]]:
    done = subprocess.run([str(k8s_tools.tool_binary("helm")), "template", RELEASE,
                           str(ROOT / "charts" / "proctor"), "--namespace", namespace],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [o for o in yaml.safe_load_all(done.stdout) if o and o["kind"] in (
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding")
        and "helm.sh/hook" in (o["metadata"].get("annotations") or {})]


def _kubeconfig_with_token(admin: Path, token: str, folder: Path) -> Path:
    config = yaml.safe_load(admin.read_text())
    context = next(c["context"] for c in config["contexts"]
                   if c["name"] == config["current-context"])
    cluster = next(c for c in config["clusters"] if c["name"] == context["cluster"])
    path = folder / "hook-kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "hook",
        "clusters": [cluster], "users": [{"name": "hook", "user": {"token": token}}],
        "contexts": [{"name": "hook", "context": {"cluster": cluster["name"],
                                                  "user": "hook"}}]}))
    return path


def _crds_apply(kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proctor.cli.main", "crds", "apply"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KUBECONFIG": str(kubeconfig)})


def test_crds_apply_puts_back_a_changed_crd_with_the_hooks_rights(
        real_cluster: Any, cluster_namespace: str, tmp_path: Path) -> None:
    rbac = _hook_rbac(cluster_namespace)
    assert sorted(o["kind"] for o in rbac) == ["ClusterRole", "ClusterRoleBinding",
                                               "ServiceAccount"]
    real_cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(rbac))
    try:
        account = next(o for o in rbac if o["kind"] == "ServiceAccount")["metadata"]["name"]
        token = real_cluster.kubectl("create", "token", account, "-n", cluster_namespace,
                                     "--duration=10m").strip()
        kubeconfig = _kubeconfig_with_token(real_cluster.kubeconfig, token, tmp_path)
        real_cluster.kubectl("patch", "crd", "evaluations.proctor.dev", "--type=json",
                             "-p", json.dumps(PATCH))

        done = _crds_apply(kubeconfig)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            "Left CustomResourceDefinition agentundertests.proctor.dev unchanged",
            "Updated CustomResourceDefinition evaluations.proctor.dev: version v1alpha1: "
            "schema"]
        held = json.loads(real_cluster.kubectl("get", "crd", "evaluations.proctor.dev",
                                               "-o", "json", "--show-managed-fields"))
        packaged = next(c for c in packaged_crds()
                        if c["metadata"]["name"] == "evaluations.proctor.dev")
        assert held["spec"]["versions"][0]["schema"] == packaged["spec"]["versions"][0]["schema"]
        assert "proctor" in {m["manager"] for m in held["metadata"]["managedFields"]}

        again = _crds_apply(kubeconfig)
        assert again.stdout.splitlines() == [
            f"Left CustomResourceDefinition {name} unchanged"
            for name in ("agentundertests.proctor.dev", "evaluations.proctor.dev")]
    finally:
        for obj in rbac:
            if obj["kind"] != "ServiceAccount":  # the namespace takes it along
                real_cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"],
                                     "--ignore-not-found")
        real_cluster.apply_crds()


def _helm(real_cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(k8s_tools.tool_binary("helm")), "--kubeconfig",
                           str(real_cluster.kubeconfig), *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


def test_helm_upgrade_puts_back_a_changed_crd(real_cluster: Any, cluster_images: Any,
                                              cluster_namespace: str) -> None:
    """The chart's pre-upgrade hook, for real: its Job, in the runner image, under its own
    rights, applies the image's CRDs; then Helm deletes the hook's objects."""
    repository, tag = cluster_images.runner.rsplit(":", 1)
    values = ["--namespace", cluster_namespace, "--skip-crds",  # the fixture applied crds/
              "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
              "--set", "image.pullPolicy=Never", "--set", "metrics.service.enabled=false",
              "--set", f"operator.watchNamespaces={{{cluster_namespace}}}",
              "--set", "rbac.clusterReads=false", "--set", "admissionPolicy.enabled=false"]
    try:
        installed = _helm(real_cluster, "install", RELEASE, "charts/proctor", *values)
        assert installed.returncode == 0, installed.stderr
        real_cluster.kubectl("patch", "crd", "evaluations.proctor.dev", "--type=json",
                             "-p", json.dumps(PATCH))
        upgraded = _helm(real_cluster, "upgrade", RELEASE, "charts/proctor", *values)
        assert upgraded.returncode == 0, upgraded.stderr
        held = json.loads(real_cluster.kubectl("get", "crd", "evaluations.proctor.dev",
                                               "-o", "json", "--show-managed-fields"))
        packaged = next(c for c in packaged_crds()
                        if c["metadata"]["name"] == "evaluations.proctor.dev")
        assert held["spec"]["versions"][0]["schema"] == packaged["spec"]["versions"][0]["schema"]
        left = real_cluster.kubectl("get", "job,serviceaccount", "-n", cluster_namespace,
                                    "-l", "app.kubernetes.io/component=crds", "-o", "name")
        assert left.strip() == "", f"the hook's objects outlived it: {left}"
    finally:
        _helm(real_cluster, "uninstall", RELEASE, "--namespace", cluster_namespace, "--wait")
        real_cluster.apply_crds()
