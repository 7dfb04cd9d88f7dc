"""Pod, container, Job and Event status shapes, as a 1.31+ kubelet and job-controller write
them (field sets, reasons and messages checked against shared/data/k8s-status)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from cluster.store import now, now_micro, random_hex

Obj = dict[str, Any]
RUNTIME = "containerd"


# --- Images ---------------------------------------------------------------------------------


def normalized_image(image: str) -> str:
    """The image as containerd reports it: docker.io and library/ filled in, a tag kept."""
    first, _, rest = image.partition("/")
    has_registry = bool(rest) and ("." in first or ":" in first or first == "localhost")
    name = image if has_registry else f"docker.io/{image if rest else 'library/' + image}"
    tail = name.rsplit("/", 1)[-1]
    return name if ":" in tail or "@" in tail else f"{name}:latest"


def image_digest(image: str) -> str:
    """A fake but stable registry digest of an image."""
    return "sha256:" + hashlib.sha256(normalized_image(image).encode()).hexdigest()


def image_id(image: str) -> str:
    """``docker.io/swebench/sweb.eval...@sha256:<digest>``, as containerd writes imageID."""
    repo = normalized_image(image).split("@")[0]
    tail = repo.rsplit("/", 1)
    repo = repo if ":" not in tail[-1] else repo[: repo.rindex(":")]
    return f"{repo}@{image_digest(image)}"


def container_id() -> str:
    return f"{RUNTIME}://{random_hex(64)}"


# --- Containers -----------------------------------------------------------------------------


def _mounts(container: Mapping[str, Any]) -> list[Obj]:
    found = []
    for mount in container.get("volumeMounts") or []:
        entry: Obj = {"name": mount["name"], "mountPath": mount["mountPath"]}
        if mount.get("readOnly"):
            entry |= {"readOnly": True, "recursiveReadOnly": "Disabled"}
        found.append(entry)
    return found


def waiting(container: Mapping[str, Any], reason: str = "PodInitializing",
            message: str | None = None) -> Obj:
    state: Obj = {"reason": reason}
    if message:
        state["message"] = message
    status = {"name": container["name"], "state": {"waiting": state}, "lastState": {},
              "ready": False, "restartCount": 0, "image": container.get("image", ""),
              "imageID": "", "started": False}
    mounts = _mounts(container)
    if mounts:
        status["volumeMounts"] = mounts
    return status


def running(container: Mapping[str, Any], cid: str, started_at: str, ready: bool = False
            ) -> Obj:
    image = container.get("image", "")
    status = {"name": container["name"], "state": {"running": {"startedAt": started_at}},
              "lastState": {}, "ready": ready, "restartCount": 0,
              "image": normalized_image(image), "imageID": image_id(image),
              "containerID": cid, "started": True}
    mounts = _mounts(container)
    if mounts:
        status["volumeMounts"] = mounts
    return status


def terminated(container: Mapping[str, Any], cid: str, started_at: str, finished_at: str,
               exit_code: int, reason: str | None = None, message: str = "",
               init: bool = False) -> Obj:
    """A container that ended: reason Completed (0), Error, or OOMKilled."""
    image = container.get("image", "")
    detail: Obj = {"exitCode": exit_code,
                   "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                   "startedAt": started_at, "finishedAt": finished_at, "containerID": cid}
    if message:
        detail["message"] = message
    status = {"name": container["name"], "state": {"terminated": detail}, "lastState": {},
              # A completed init container reads ready, as kubelets report it.
              "ready": init and exit_code == 0, "restartCount": 0,
              "image": normalized_image(image), "imageID": image_id(image),
              "containerID": cid, "started": False}
    mounts = _mounts(container)
    if mounts:
        status["volumeMounts"] = mounts
    return status


# --- Pod conditions -------------------------------------------------------------------------

CONDITION_ORDER = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                   "PodScheduled", "DisruptionTarget")


def set_condition(status: Obj, kind: str, value: bool, reason: str | None = None,
                  message: str | None = None) -> None:
    """Set one pod condition; lastTransitionTime changes only when the status flips."""
    conditions = status.setdefault("conditions", [])
    old = next((c for c in conditions if c["type"] == kind), None)
    text = "True" if value else "False"
    entry: Obj = {"type": kind, "status": text, "lastProbeTime": None,
                  "lastTransitionTime": old["lastTransitionTime"]
                  if old and old["status"] == text else now()}
    if reason:
        entry["reason"] = reason
    if message:
        entry["message"] = message
    if old is not None:
        conditions[conditions.index(old)] = entry
    else:
        conditions.append(entry)
    conditions.sort(key=lambda c: CONDITION_ORDER.index(c["type"])
                    if c["type"] in CONDITION_ORDER else 99)


def unready(names: Sequence[str], kind: str = "unready") -> str:
    return f"containers with {kind} status: [{' '.join(names)}]"


# --- Job conditions -------------------------------------------------------------------------


def job_condition(kind: str, reason: str, message: str) -> Obj:
    stamp = now()
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastProbeTime": stamp, "lastTransitionTime": stamp}


COMPLETE = ("CompletionsReached", "Reached expected number of succeeded pods")
BACKOFF = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE = ("DeadlineExceeded", "Job was active longer than specified deadline")


# --- Events ---------------------------------------------------------------------------------


def event(about: Mapping[str, Any], kind: str, reason: str, message: str, component: str,
          host: str | None = None, field_path: str | None = None) -> Obj:
    """A core v1 Event as a kubelet or controller records it (``type`` Normal/Warning)."""
    meta = about["metadata"]
    involved = {"kind": about["kind"], "namespace": meta.get("namespace", ""),
                "name": meta["name"], "uid": meta["uid"], "apiVersion": about["apiVersion"],
                "resourceVersion": meta.get("resourceVersion", "")}
    if field_path:
        involved["fieldPath"] = field_path
    stamp = now()
    source = {"component": component}
    if host:
        source["host"] = host
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{random_hex(16)}",
                         "namespace": meta.get("namespace", "default")},
            "involvedObject": involved, "reason": reason, "message": message,
            "source": source, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "type": kind, "eventTime": None, "reportingComponent": component,
            "reportingInstance": host or ""}


def scheduler_event(pod: Mapping[str, Any], node: str | None, reason: str = "Scheduled",
                    message: str | None = None, kind: str = "Normal") -> Obj:
    """A scheduler event: events.k8s.io style (eventTime, action), as in the real list."""
    meta = pod["metadata"]
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{random_hex(16)}",
                         "namespace": meta["namespace"]},
            "involvedObject": {"kind": "Pod", "namespace": meta["namespace"],
                               "name": meta["name"], "uid": meta["uid"], "apiVersion": "v1",
                               "resourceVersion": meta.get("resourceVersion", "")},
            "reason": reason,
            "message": message or f"Successfully assigned {meta['namespace']}/{meta['name']} "
                                  f"to {node}",
            "source": {}, "firstTimestamp": None, "lastTimestamp": None, "type": kind,
            "eventTime": now_micro(), "action": "Binding" if node else "Scheduling",
            "reportingComponent": "default-scheduler",
            "reportingInstance": f"default-scheduler-{node or 'control-plane'}"}
