"""The operator benchmark's real control plane: scripts/cluster.sh with KWOK nodes.

`kwok_plane(...)` starts a control plane of its own (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, built from Kubernetes' sources) with simulated
nodes (`PROCTOR_CLUSTER_KWOK_NODES`), on ports moved clear of any other cluster on the
host (`PROCTOR_CLUSTER_PORT_OFFSET`) and with its own state folder, and takes it down at
the end. Two cores cannot run 50 real pods: KWOK plays the kubelets.

KWOK moves each pod through Stages (`pod_stages`, pure): at once to "the test step
runs" (the pull and solve steps ended), then, after the item's own duration, to
Succeeded with every step exited 0 and the grade step's compact result as its
termination message, as `proctor runner grade --termination-log` leaves it. The duration
reaches KWOK through the pod itself: the Stage's delay is a jq lookup of the pod's
instance id (in the work item the pod template carries as an annotation) in a table of
the workload's durations. The operator's pod template takes no annotations from the
Evaluation, and no per-item field of it could carry a simulated duration anyway.

The operator reads each item's full result from the grade step's log (pods/log, which
the API server fetches from the node's kubelet endpoint). KWOK serves it from the file
a `Logs` object names for the pod; `LogWriter` writes that file (a full RunResult, in
the container runtime's log format) and creates that object as each pod appears, before
its grade step could end.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
KWOK_GROUP, KWOK_VERSION = "kwok.x-k8s.io", "v1alpha1"
STAGES = Path(__file__).with_name("kwok_pod_stages.yaml")
UPSTREAM_POD_STAGES = ("pod-ready", "pod-complete")
"""cluster.sh's generic pod Stages that these replace (pod-delete stays)."""
TEST_STEP = "test"


@dataclass
class Plane:
    """A running control plane: its kubeconfig, state folder and clients."""

    kubeconfig: Path
    state: Path
    api: Any  # kubernetes.client.ApiClient

    def daemon_pids(self) -> dict[str, int]:
        """The pid of each daemon cluster.sh started (etcd, API server, ..., kwok)."""
        pids = {}
        for path in (self.state / "pids").glob("*.pid"):
            with contextlib.suppress(ValueError, OSError):
                pids[path.stem] = int(path.read_text())
        return pids


def delay_expression(seconds: Mapping[str, float], annotation: str) -> str:
    """A jq program that gives a pod its instance's duration ("4.430s"): the work item in
    the pod's ``annotation`` names the instance; the table holds every instance's."""
    table = json.dumps({task: f"{value:.3f}s" for task, value in sorted(seconds.items())})
    return f'{table}[.metadata.annotations["{annotation}"] | fromjson | .instance_id] // "0s"'


def pod_stages(seconds: Mapping[str, float], item_annotation: str, item_label: str
               ) -> list[dict[str, Any]]:
    """KWOK Stages for a work item's pod (kwok_pod_stages.yaml): the test step runs at
    once; after the item's duration every step has exited 0, the grade step with a
    compact result of the item (named by the pod's ``item_label``)."""
    text = STAGES.read_text().replace("@ITEM_LABEL@", item_label)
    stages = list(yaml.safe_load_all(text.replace("@TEST_STEP@", TEST_STEP)))
    for stage in stages:
        if "delay" in stage["spec"]:
            stage["spec"]["delay"]["durationFrom"]["expressionFrom"] = delay_expression(
                seconds, item_annotation)
    return stages


def cri_log(lines: list[str], at: datetime | None = None) -> str:
    """Lines in the container runtime's log format (what the kubelet, and KWOK, read)."""
    stamp = (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return "".join(f"{stamp} stdout F {line}\n" for line in lines)


class LogWriter:
    """Gives each pod a grade log, as the container runtime would: a file with the full
    result ``result_of(work item JSON)`` and a KWOK ``Logs`` object naming it (on a
    thread of its own, so that the watch that feeds it is never held up)."""

    def __init__(self, plane: Plane, folder: Path, item_annotation: str,
                 result_of: Callable[[str], dict[str, Any]]) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi(plane.api)
        self.folder, self.item_annotation, self.result_of = folder, item_annotation, result_of
        self.todo: queue.Queue[dict | None] = queue.Queue()
        self.written = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def pod(self, pod: dict) -> None:
        self.todo.put(pod)

    def close(self) -> None:
        self.todo.put(None)
        self.thread.join(timeout=30)

    def _run(self) -> None:
        while (pod := self.todo.get()) is not None:
            meta = pod["metadata"]
            item = (meta.get("annotations") or {}).get(self.item_annotation)
            if not item:
                continue
            path = self.folder / f"{meta['name']}.log"
            path.write_text(cri_log([json.dumps(self.result_of(item))]))
            body = {"apiVersion": f"{KWOK_GROUP}/{KWOK_VERSION}", "kind": "Logs",
                    "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                    "spec": {"logs": [{"containers": ["grade"], "logsFile": str(path)}]}}
            self.custom.create_namespaced_custom_object(
                KWOK_GROUP, KWOK_VERSION, meta["namespace"], "logs", body)
            self.written += 1


def watch(plane: Plane, path: str, on_event: Callable[[str, dict], None],
          stop: threading.Event) -> threading.Thread:
    """Follow a collection (e.g. /apis/batch/v1/namespaces/N/jobs) from now on: each event
    to ``on_event(type, object)`` as it arrives, read as plain JSON (the typed client's
    models would cost this process more CPU than the operator spends)."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.watch.watch import iter_resp_lines
    from urllib3.exceptions import ProtocolError

    seen = {"version": ""}  # the last resourceVersion delivered: a new watch goes on from it

    def follow() -> None:
        while not stop.is_set():
            try:
                follow_once()
            except (OSError, ValueError, ProtocolError, ApiException):
                if not stop.is_set():  # the connection broke: watch again
                    time.sleep(0.1)

    def follow_once() -> None:
        query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", "300")]
        if seen["version"]:
            query.append(("resourceVersion", seen["version"]))
        response = plane.api.call_api(*plane.api.param_serialize(
            "GET", path, query_params=query, auth_settings=["BearerToken"]),
            _request_timeout=None)
        for line in iter_resp_lines(response.response):
            event = json.loads(line)
            obj = event["object"]
            if event["type"] == "ERROR":  # 410 Gone: start over (a replay is harmless)
                seen["version"] = ""
                return
            seen["version"] = obj.get("metadata", {}).get("resourceVersion", seen["version"])
            if event["type"] != "BOOKMARK":
                on_event(event["type"], obj)
            if stop.is_set():
                return

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    return thread


def install(plane: Plane, namespace: str, stages: list[dict[str, Any]]) -> None:
    """Proctor's CRDs, the namespace, and the pod Stages in place of cluster.sh's own."""
    from kubernetes import client

    extensions = client.ApiextensionsV1Api(plane.api)
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                extensions.create_custom_resource_definition(doc)
    client.CoreV1Api(plane.api).create_namespace({"metadata": {"name": namespace}})
    custom = client.CustomObjectsApi(plane.api)
    for name in UPSTREAM_POD_STAGES:
        custom.delete_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "stages", name)
    for stage in stages:
        custom.create_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "stages", stage)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # Established: the operator may watch them
        crds = extensions.list_custom_resource_definition().items
        if all(any(c.type == "Established" and c.status == "True"
                   for c in (crd.status.conditions or [])) for crd in crds):
            return
        time.sleep(0.2)
    raise SystemExit("the CRDs were not Established within 60 s")


def _free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def port_offset() -> int:
    """An offset that moves every control-plane port (cluster.sh's) onto a free one."""
    for offset in range(20000, 25000, 100):
        if all(_free(base + offset) for base in (2379, 2380, 6443, 10247, 10257, 10259)):
            return offset
    raise SystemExit("no free ports for the control plane")


@contextlib.contextmanager
def kwok_plane(state: Path, nodes: int) -> Iterator[Plane]:
    """scripts/cluster.sh's control plane with ``nodes`` KWOK nodes, its state in
    ``state``, taken down at the end."""
    from kubernetes import config

    env = {**os.environ, "PROCTOR_CLUSTER_DIR": str(state),
           "PROCTOR_CLUSTER_KWOK_NODES": str(nodes),
           "PROCTOR_CLUSTER_PORT_OFFSET": str(port_offset())}
    script = ROOT / "scripts" / "cluster.sh"
    try:
        up = subprocess.run(["bash", str(script), "up"], env=env, capture_output=True,
                            text=True, timeout=1800)
        if up.returncode != 0:
            raise SystemExit(f"scripts/cluster.sh up failed:\n{up.stderr[-3000:]}")
        kubeconfig = Path(up.stdout.strip().splitlines()[-1].removeprefix("KUBECONFIG="))
        api = config.new_client_from_config(str(kubeconfig))
        yield Plane(kubeconfig=kubeconfig, state=state, api=api)
        api.close()
    finally:
        subprocess.run(["bash", str(script), "down"], env=env, capture_output=True,
                       timeout=300)
