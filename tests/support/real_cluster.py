"""The real Kubernetes the cluster tests run on: scripts/cluster.sh's one-node cluster, built
from Kubernetes' own sources, with the operator installed into it by scripts/try-operator.sh
(real helm, the chart's RBAC enforced by the API server).

The tests run wherever such a cluster can start: as root, with a Docker daemon (the images
are built here), mmdebstrap, and Go or a cached build of the cluster's binaries. Elsewhere
they skip, saying what is missing; with PROCTOR_REQUIRE_CLUSTER=1 (CI) that is a failure.
A cluster already running (PROCTOR_CLUSTER_DIR names its state folder, as for
scripts/cluster.sh) is used and left running; one started here is stopped when the session
ends. Each test module installs its own helm release serving a namespace of its own, so that
several can share one cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.paths import ROOT

CLUSTER_SH = ROOT / "scripts" / "cluster.sh"
TRY_OPERATOR = ROOT / "scripts" / "try-operator.sh"


def missing() -> str | None:
    """Why a cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "the real-cluster tests need root (scripts/cluster.sh starts a kubelet)"
    if not shutil.which("docker"):
        return "no docker client to build the images with"
    if subprocess.run(["docker", "version"], capture_output=True).returncode != 0:
        return "no Docker daemon answers (scripts/docker-daemon.sh starts one)"
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "proctor-cluster"
    if not shutil.which("go") and not any(cache.glob("*/complete")):
        return "neither Go nor a cached build of the cluster's binaries"
    if not shutil.which("mmdebstrap"):
        return "mmdebstrap is missing, so the images cannot be built"
    return None


def unavailable(why: str) -> None:
    """Skip a cluster test, or fail it where the cluster must be there (CI)."""
    if os.environ.get("PROCTOR_REQUIRE_CLUSTER") == "1":
        pytest.fail(f"PROCTOR_REQUIRE_CLUSTER=1 but {why}", pytrace=False)
    pytest.skip(why)


def running() -> bool:
    status = subprocess.run(["bash", str(CLUSTER_SH), "status"], capture_output=True,
                            text=True).stdout
    return "kubelet: running" in status


def session() -> Iterator[Path]:
    """The cluster's admin kubeconfig, for the session; skips where none can run."""
    why = missing()
    if why is not None:
        unavailable(why)
    started = not running()
    up = subprocess.run(["bash", str(CLUSTER_SH), "up"], capture_output=True, text=True,
                        timeout=1800)
    if up.returncode != 0:
        pytest.fail(f"scripts/cluster.sh up failed:\n{up.stderr[-4000:]}", pytrace=False)
    try:
        yield Path(up.stdout.strip().splitlines()[-1].removeprefix("KUBECONFIG="))
    finally:
        if started:
            subprocess.run(["bash", str(CLUSTER_SH), "down"], timeout=300)


@dataclass
class Install:
    """One helm release of the chart, its operator serving one namespace, and the reference
    agent `mixed` in that namespace (the AgentUnderTest `local-agent`)."""

    kubeconfig: Path
    release: str
    namespace: str
    """Where the agent and the Evaluations go, the one namespace the operator serves."""
    operator_namespace: str
    env: dict[str, str] = field(default_factory=dict)
    """try-operator.sh's settings naming all of the above."""

    @property
    def deployment(self) -> str:
        """The operator's Deployment (the chart's full name of the release)."""
        return self.release if "proctor" in self.release else f"{self.release}-proctor"


def settings(kubeconfig: Path, prefix: str) -> Install:
    """Names of a module's own release and namespaces: `<prefix>`, `<prefix>-operator`."""
    env = {"PROCTOR_RELEASE": prefix, "PROCTOR_NAMESPACE": prefix,
           "PROCTOR_OPERATOR_NAMESPACE": f"{prefix}-operator"}
    return Install(kubeconfig, prefix, prefix, f"{prefix}-operator", env)


def install(kubeconfig: Path, prefix: str, out: Path) -> Iterator[Install]:
    """scripts/try-operator.sh --install-only under the module's own names (the images are
    built and imported by it when missing); the release and both namespaces go at the end."""
    named = settings(kubeconfig, prefix)
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | named.env
    done = subprocess.run(["bash", str(TRY_OPERATOR), "--install-only", str(out)], env=env,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        pytest.fail(f"try-operator.sh --install-only failed:\n{done.stderr[-4000:]}\n"
                    + "\n".join(pods_report(kubeconfig, n)
                                for n in (named.namespace, named.operator_namespace)),
                    pytrace=False)
    try:
        yield named
    finally:
        uninstall(named)


def uninstall(named: Install) -> None:
    """The release and the module's namespaces, with everything in them."""
    from support.k8s_tools import tool_binary

    env = {**os.environ, "KUBECONFIG": str(named.kubeconfig)}
    subprocess.run([str(tool_binary("helm")), "uninstall", named.release, "-n",
                    named.operator_namespace, "--wait"], env=env, capture_output=True,
                   timeout=300)
    subprocess.run([str(tool_binary("kubectl")), "delete", "namespace", named.namespace,
                    named.operator_namespace, "--ignore-not-found", "--wait=false"], env=env,
                   capture_output=True, timeout=120)


def unwell_pods(pods: list[dict], events: list[dict]) -> list[str]:
    """A line for each pod that is neither done nor running ready, saying why (scheduling,
    a container waiting or ended, readiness), followed by the latest Warning events about it.
    Pure: ``pods`` and ``events`` are the items of `kubectl get pods/events -o json`."""
    lines = []
    for pod in pods:
        status = pod.get("status") or {}
        containers = status.get("containerStatuses") or []
        if status.get("phase") == "Succeeded" or (status.get("phase") == "Running"
                                                  and pod_ready(pod)):
            continue
        meta = pod["metadata"]
        said = [f"{meta.get('namespace')}/{meta['name']}: {status.get('phase')} "
                f"{status.get('reason', '')} {(status.get('message') or '')[:300]}".strip()]
        said += [f"{c['type']}={c['status']} {c.get('reason', '')} {c.get('message', '')}".strip()
                 for c in status.get("conditions") or [] if c["status"] != "True"]
        for c in (status.get("initContainerStatuses") or []) + containers:
            for when in ("state", "lastState"):
                for how, detail in (c.get(when) or {}).items():
                    if how != "running":
                        said.append(f"{c['name']} {when} {how} {detail.get('reason', '')} "
                                    f"{detail.get('exitCode', '')} "
                                    f"{(detail.get('message') or '')[:300]}".strip())
            if c.get("restartCount"):
                said.append(f"{c['name']} restarted {c['restartCount']}x")
        lines.append("; ".join(said))
        about = [e for e in events if e.get("type") == "Warning"
                 and e["involvedObject"].get("uid") == meta.get("uid")]
        lines += [f"  {e['reason']} x{e.get('count') or 1}: {e.get('message', '')[:300]}"
                  for e in about[-3:]]
    return lines


def pods_report(kubeconfig: Path, namespace: str | None = None) -> str:
    """unwell_pods() for one namespace (None: all of them), as a kubectl sees them now."""
    from support.k8s_tools import tool_binary

    where = ["-n", namespace] if namespace else ["-A"]
    kubectl = [str(tool_binary("kubectl")), "--kubeconfig", str(kubeconfig),
               "--request-timeout=20s"]
    items = []
    for kind, scope in (("pods", where), ("events", where), ("pods", ["-A"])):
        done = subprocess.run([*kubectl, "get", kind, *scope, "-o", "json"], capture_output=True,
                              text=True, timeout=60)
        if done.returncode != 0:
            return f"kubectl get {kind}: {done.stderr.strip()[-500:]}"
        items.append(json.loads(done.stdout)["items"])
    pods, events, everywhere = items
    lines = unwell_pods(pods, events)
    # A running pod that is not ready: what its containers printed, and any other pod that
    # holds its address (a probe refused at an address two pods share reaches the other one).
    for pod in pods:
        status, meta = pod.get("status") or {}, pod["metadata"]
        if status.get("phase") != "Running" or pod_ready(pod):
            continue
        lines += [f"  {meta['name']} shares {status.get('podIP')} with {line}"
                  for line in shared_ip(pod, everywhere)]
        logs = subprocess.run([*kubectl, "logs", "-n", meta["namespace"], meta["name"],
                               "--all-containers", "--tail=15"], capture_output=True,
                              text=True, timeout=60)
        said = (logs.stdout + logs.stderr).strip().splitlines() or ["(nothing)"]
        lines += [f"  {meta['name']} logs: {line[:300]}" for line in said]
    return "\n".join(lines) or "every pod is running ready, or done"


def pod_ready(pod: dict) -> bool:
    containers = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(containers) and all(c.get("ready") for c in containers)


def shared_ip(pod: dict, pods: list[dict]) -> list[str]:
    """The other live pods with `pod`'s address (pure)."""
    ip = (pod.get("status") or {}).get("podIP")
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods
            if ip and (p.get("status") or {}).get("podIP") == ip
            and p["metadata"].get("uid") != pod["metadata"].get("uid")
            and (p.get("status") or {}).get("phase") in ("Pending", "Running")
            and not (p.get("spec") or {}).get("hostNetwork")]


def diagnosis() -> str | None:
    """What the cluster's node and pods say now, for a run whose tests failed: the node's
    conditions and taints, the pods neither done nor running ready and why, the latest
    warning events and the disk; None where no cluster runs. A CI log then shows a sick node,
    or a pod that never got ready, not only the tests that timed out on it."""
    from support.k8s_tools import tool_binary

    state = Path(os.environ.get("PROCTOR_CLUSTER_DIR", ROOT / ".cluster"))
    kubeconfig = state / "admin.kubeconfig"
    if not kubeconfig.exists() or not running():
        return None
    kubectl = [str(tool_binary("kubectl")), "--kubeconfig", str(kubeconfig),
               "--request-timeout=20s"]
    asks = {
        "node conditions": ["get", "nodes", "-o", "jsonpath={range .items[*]}{.metadata.name}:"
                            "{range .status.conditions[*]} {.type}={.status}{end}; taints:"
                            " {.spec.taints}{\"\\n\"}{end}"],
        "latest warnings": ["get", "events", "-A", "--field-selector", "type=Warning",
                            "--sort-by=.lastTimestamp"],
    }
    parts = []
    for title, args in asks.items():
        done = subprocess.run(kubectl + args, capture_output=True, text=True, timeout=60)
        lines = (done.stdout + done.stderr).strip().splitlines()
        parts.append(f"--- {title}:\n" + "\n".join(lines[-12:]))
    parts.append("--- pods neither done nor running ready:\n" + pods_report(kubeconfig))
    df = subprocess.run(["df", "-h", str(ROOT), str(state)], capture_output=True, text=True)
    parts.append("--- disk:\n" + df.stdout.strip())
    return "\n".join(parts)
