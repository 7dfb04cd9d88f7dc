"""A real cluster as its admin and its users work it: kubectl and helm against the cluster
of scripts/cluster.sh (`Cluster`), the chart installed as a release of its own serving
chosen namespaces (`install_release`), the runner and demo images built from this tree and
imported into the node (`build_and_import`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from proctor.sandboxes.demo_images import demo_tasks
from support import k8s_tools, real_cluster
from support.paths import ROOT

BASE = os.environ.get("PROCTOR_RUNNER_BASE", "proctor/runner-base:bookworm")
"""The runner image's base, built offline where missing (runner-image/offline-base.sh)."""


def sh(*args: str, stdin: str | None = None, check: bool = True, timeout: float = 600,
       **env: str) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), input=stdin, capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env={**os.environ, **env})
    assert not check or done.returncode == 0, f"{args}: {done.stderr[-3000:]}"
    return done


class Cluster:
    def __init__(self, kubeconfig: str):
        self.kubeconfig = kubeconfig
        self.kubectl_bin = str(k8s_tools.tool_binary("kubectl"))
        self.helm_bin = str(k8s_tools.tool_binary("helm"))

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True
                ) -> subprocess.CompletedProcess:
        return sh(self.kubectl_bin, "--kubeconfig", self.kubeconfig, *args, stdin=stdin,
                  check=check)

    def apply(self, *objects: dict, check: bool = True) -> subprocess.CompletedProcess:
        return self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects),
                            check=check)

    def rollout(self, namespace: str, deployment: str) -> None:
        """Wait for the Deployment to be available, 10 minutes at most. Slower than 2 minutes
        (twice in CI a demo agent's pod never listened, its process running, for no reason
        the log kept), it is a warning that says what its pods said then (their logs too),
        and its unready pods are replaced once; failing, what they said then and at the end.
        These tests are about the operator, not about the start of an agent's pod."""
        def status(seconds: int) -> subprocess.CompletedProcess:
            return self.kubectl("-n", namespace, "rollout", "status",
                                f"deployment/{deployment}", f"--timeout={seconds}s", check=False)
        if status(120).returncode == 0:
            return
        slow = real_cluster.pods_report(Path(self.kubeconfig), namespace)
        selector = self.get("deployment", deployment, "-n", namespace)["spec"]["selector"]
        labels = ",".join(f"{k}={v}" for k, v in selector["matchLabels"].items())
        for pod in self.get("pods", "-n", namespace, "-l", labels)["items"]:
            if not real_cluster.pod_ready(pod):
                self.kubectl("-n", namespace, "delete", "pod", pod["metadata"]["name"],
                             "--wait=false")
        done = status(480)
        assert done.returncode == 0, (
            f"{namespace}/{deployment} not available in 600s: {done.stderr.strip()}\n"
            f"at 120s:\n{slow}\nat 600s:\n"
            + real_cluster.pods_report(Path(self.kubeconfig), namespace))
        warnings.warn(f"{namespace}/{deployment} took over 120s to be available; its pods "
                      f"then:\n{slow}", stacklevel=2)

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def condition(self, namespace: str, name: str, type_: str) -> dict:
        status = self.get("evaluation", name, "-n", namespace).get("status") or {}
        return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def wait(what: str, check: Callable[[], Any], seconds: float = 600, every: float = 1) -> Any:
    deadline = time.monotonic() + seconds
    while not (found := check()):
        assert time.monotonic() < deadline, f"no {what} within {seconds:.0f}s"
        time.sleep(every)
    return found


def namespace(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels}}


def build_and_import(image: str) -> None:
    """The runner image (from this tree) and the demo's task images, imported into the node."""
    if sh("docker", "image", "inspect", BASE, check=False).returncode != 0:
        sh("bash", "runner-image/offline-base.sh", BASE, timeout=1800)
    sh("docker", "build", "-q", "--network", "host", "--build-arg", f"BASE={BASE}",
       "-f", "runner-image/Dockerfile", "-t", image, ".", timeout=1800)
    sh(str(Path(sys.executable).parent / "proctor"), "images", "build-demo", timeout=1800)
    sh("bash", "-c", f"docker save {image} {' '.join(demo_tasks())} "
                     f"| bash scripts/cluster.sh import -", timeout=1800)


def install_release(c: Cluster, release: str, system: str, namespaces: list[str],
                    image: str, *values: str) -> None:
    """crds/ applied, then the chart as `release` in `system`, watching `namespaces`, running
    `image` (never pulled), its operator restarted onto that image and available; `values`:
    more of the chart's values (`key=value`)."""
    c.kubectl("apply", "--server-side", "--force-conflicts", "-f", "crds/")
    repository, tag = image.rsplit(":", 1)
    sh(c.helm_bin, "upgrade", "--install", release, "charts/proctor", "--namespace", system,
       "--create-namespace", "--kubeconfig", c.kubeconfig, "--wait", "--timeout", "5m",
       "--skip-crds",  # applied above, from crds/
       "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
       "--set", "image.pullPolicy=Never", "--set", "operator.reconcileSeconds=2",
       "--set", f"operator.watchNamespaces={{{','.join(namespaces)}}}",
       "--set", "jobs.ttlSecondsAfterFinished=1800",
       *(arg for value in values for arg in ("--set", value)))
    # The image was imported again under the same tag: restart the operator so it runs it.
    c.kubectl("-n", system, "rollout", "restart", f"deployment/{release}-proctor")
    c.rollout(system, f"{release}-proctor")
