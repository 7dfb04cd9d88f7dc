"""One pod on one fake node: its volumes as local folders, its containers as local processes,
its status written as the kubelet writes it.

Paths in a container's command, args, env and workingDir are moved to local folders: each
volume mount (emptyDirs are folders, projected/configMap/secret/downwardAPI volumes are
materialised from the stored objects), ``/testbed`` (a checkout of the task at its base
commit, made with ``proctor.sandboxes.process.checkout``, for containers of the task's image)
and the termination message path. ``proctor ...`` runs as ``<python> -m proctor.cli.main ...``.
A container's stdout and stderr are its log (the pod log endpoint serves it). When the test
cluster runs as root, a container runs as its ``runAsUser`` / ``runAsGroup`` (its
securityContext over the pod's; the group defaults to 0, the fsGroup and supplementalGroups
are added), emptyDirs are world-writable (group-owned by the fsGroup) and the termination
message file is writable by all, as the kubelet makes them: a step that cannot write beside
another fails here as it would there.

A pod's life (`PodRun.life`) is a generator of the waits between its steps (seconds), so that
whoever drives it chooses how to wait: a thread of its own (`run`, for pods that run real
processes, which block it) or the kubelet's one thread for every simulated pod, woken by a
timer (`cluster.kubelet`). A step never sleeps itself: it yields (`_sleep`).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cluster import shapes
from cluster.errors import ApiError
from cluster.faults import Fault
from cluster.store import clone, now

if TYPE_CHECKING:
    from cluster.kubelet import Kubelet, Node

Obj = dict[str, Any]
Waits = Generator[float, None, None]
"""A part of a pod's life: the seconds of each wait it makes (see `PodRun.life`); a part
that answers something is a ``Generator[float, None, answer]``."""
MESSAGE_MAX = 4096
FALLBACK_MAX, FALLBACK_LINES = 2048, 80
POD_MESSAGES_MAX = 12 * 1024
TESTBED = "/testbed"


def run_as(pod_spec: Mapping[str, Any], container: Mapping[str, Any]
           ) -> tuple[int, int, list[int]] | None:
    """(uid, gid, supplementary groups) a container asks to run as, or None: the image's
    user (here, the test cluster's)."""
    pod = pod_spec.get("securityContext") or {}
    own = container.get("securityContext") or {}
    uid, gid = own.get("runAsUser", pod.get("runAsUser")), own.get("runAsGroup",
                                                                     pod.get("runAsGroup"))
    if uid is None and gid is None:
        return None
    groups = [*(pod.get("supplementalGroups") or []),
              *([pod["fsGroup"]] if pod.get("fsGroup") is not None else [])]
    return (os.geteuid() if uid is None else int(uid)), int(gid or 0), [int(g) for g in groups]


class PodGone(Exception):
    """The pod was deleted while it ran."""


class Killed(Exception):
    """The pod is being stopped (deleted, evicted, past its Job's deadline)."""


def _size_bytes(text: str) -> int:
    units = {"Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3, "Ti": 1024 ** 4, "k": 1000,
             "M": 1000 ** 2, "G": 1000 ** 3}
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]*)", str(text).strip())
    if not m:
        return 0
    return int(float(m.group(1)) * units.get(m.group(2), 1))


def _folder_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _tail(data: bytes, limit: int) -> str:
    return data[-limit:].decode(errors="replace") if len(data) > limit else data.decode(
        errors="replace")


class PodRun:
    """Runs one pod; ``kill()`` from any thread stops it."""

    def __init__(self, kubelet: Kubelet, pod: Obj, node: Node) -> None:
        self.kubelet, self.store = kubelet, kubelet.store
        self.pods = self.store.resource("", "v1", "pods")
        meta = pod["metadata"]
        self.ns, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.labels = meta.get("labels") or {}
        self.job_name = self.labels.get("job-name")
        self.pod, self.node = pod, node
        self.spec = pod["spec"]
        self.dir = node.root / "pods" / self.uid
        self.status: Obj = dict(pod.get("status") or {})
        self.killed = threading.Event()
        self.kill_reason: str | None = None
        self.kill_message = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._sidecars: list[subprocess.Popen[bytes]] = []
        self.volumes: dict[str, Path] = {}
        self._instance: Obj | None = None
        self._ports: dict[int, int] = {}
        self.step_started: dict[str, float] = {}
        self.ended = threading.Event()
        self._unpublished = False
        self.on_kill: Callable[[], None] | None = None
        """Called when the pod is killed: its driver ends the wait it is in (see `life`)."""

    # --- Control ----------------------------------------------------------------------------

    def kill(self, reason: str, message: str = "") -> None:
        """Stop the pod: ``deleted`` (graceful deletion, Job deadline) or ``evicted``."""
        if self.killed.is_set():
            return
        self.kill_reason, self.kill_message = reason, message
        self.killed.set()
        for proc in [self._proc, *self._sidecars]:
            self._signal(proc, signal.SIGKILL)
        if self.on_kill is not None:
            self.on_kill()

    @staticmethod
    def _signal(proc: subprocess.Popen[bytes] | None, sig: int) -> None:
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)

    def write(self) -> None:
        """Publish ``self.status`` (the kubelet owns the pod's status)."""
        self._unpublished = False
        try:
            self.store.set_status(self.pods, self.ns, self.name, clone(self.status))
        except ApiError as exc:
            if exc.code == 404:
                raise PodGone() from exc
            raise

    def note(self) -> None:
        """A container started or ended: published when the pod next waits (`_sleep`,
        `_wait`) or ends. A kubelet reports the state a pod is in when it syncs, not each
        state it went through since (it relists the runtime about once a second): a step
        that takes no time (a simulated one, `true`) shows only as done."""
        self._unpublished = True

    def _publish(self) -> None:
        if self._unpublished:
            self.write()

    def event(self, kind: str, reason: str, message: str, container: str | None = None,
              init: bool = False) -> None:
        field_path = None
        if container:
            field_path = f"spec.{'initContainers' if init else 'containers'}{{{container}}}"
        pod = self.store.peek(self.pods, self.ns, self.name) or self.pod
        self.kubelet.record(pod, kind, reason, message, "kubelet", self.node.name, field_path)

    # --- The pod's life ---------------------------------------------------------------------

    @property
    def inits(self) -> list[Obj]:
        return list(self.spec.get("initContainers") or [])

    @property
    def mains(self) -> list[Obj]:
        return list(self.spec.get("containers") or [])

    def admit(self) -> None:
        """The kubelet takes the pod: sandbox, IPs, every container waiting."""
        st = self.status
        st.update(phase="Pending", hostIP=self.node.ip, hostIPs=[{"ip": self.node.ip}],
                  podIP=self.node.pod_ip(), startTime=now())
        st["podIPs"] = [{"ip": st["podIP"]}]
        shapes.set_condition(st, "PodReadyToStartContainers", True)
        names = [c["name"] for c in self.inits if c.get("restartPolicy") != "Always"]
        if names:
            shapes.set_condition(st, "Initialized", False, "ContainersNotInitialized",
                                 shapes.unready(names, "incomplete"))
        else:
            shapes.set_condition(st, "Initialized", True)
        mains = [c["name"] for c in self.mains]
        for kind in ("Ready", "ContainersReady"):
            shapes.set_condition(st, kind, False, "ContainersNotReady", shapes.unready(mains))
        st["initContainerStatuses"] = [shapes.waiting(c) for c in self.inits]
        if not self.inits:
            st.pop("initContainerStatuses")
        st["containerStatuses"] = [
            shapes.waiting(c, "PodInitializing" if self.inits else "ContainerCreating")
            for c in self.mains]
        self.write()

    @functools.cached_property
    def item(self) -> Any:
        """The work item the pod runs (from its annotation), or None."""
        return self.kubelet.item_of(self.pod)

    @property
    def blocks(self) -> bool:
        """Whether the pod runs processes (real steps, sidecars), which block whoever drives
        it: it needs a thread of its own. A simulated pod only waits."""
        return self.kubelet.simulation_for(self) is None or any(
            c.get("restartPolicy") == "Always" for c in self.inits)

    def run(self) -> None:
        """The pod's life in the calling thread, which it keeps until the pod ends."""
        for seconds in self.life():
            self.killed.wait(seconds)

    def life(self) -> Waits:
        """The pod's life, step by step: yields the seconds of each wait; the driver resumes
        it when they have passed, or at once when the pod is killed (`on_kill`)."""
        try:
            yield from self._run()
        except (PodGone, Killed):
            pass
        finally:
            for proc in [self._proc, *self._sidecars]:
                self._signal(proc, signal.SIGKILL)
            self.ended.set()

    def _run(self) -> Waits:
        if self.killed.is_set():
            raise Killed()
        yield from self._mount_volumes()
        sim = self.kubelet.simulation_for(self)
        for container in self.inits:
            if container.get("restartPolicy") == "Always":
                yield from self._start_sidecar(container)
                continue
            code = yield from self._container(container, init=True, sim=sim)
            if code != 0:
                self._finish("Failed")
                return
        if self.inits:
            shapes.set_condition(self.status, "Initialized", True)
        codes = []
        for container in self.mains:
            codes.append((yield from self._container(container, init=False, sim=sim)))
        self._finish("Succeeded" if all(c == 0 for c in codes) else "Failed")

    def _finish(self, phase: str) -> None:
        if self._sidecars:  # they take a while to stop: the main containers' end first
            self._publish()
        st = self.status
        st["phase"] = phase
        reason = "PodCompleted" if phase == "Succeeded" else "PodFailed"
        shapes.set_condition(st, "PodReadyToStartContainers", False)
        if phase == "Succeeded" and self.inits:
            shapes.set_condition(st, "Initialized", True, "PodCompleted")
        for kind in ("Ready", "ContainersReady"):
            shapes.set_condition(st, kind, False, reason)
        self._cut_messages()
        codes = self._stop_sidecars()
        sidecars = [c for c in self.inits if c.get("restartPolicy") == "Always"]
        for status in st.get("initContainerStatuses") or []:
            if "running" in status["state"]:  # a sidecar, stopped with the pod
                started = status["state"]["running"]["startedAt"]
                spec = next(c for c in self.inits if c["name"] == status["name"])
                code = codes[sidecars.index(spec)] if sidecars.index(spec) < len(codes) else 137
                status.update(shapes.terminated(spec, status["containerID"], started, now(),
                                                code, init=True))
        self.write()

    def _stop_sidecars(self) -> list[int]:
        """SIGTERM, a grace period, then SIGKILL, as the kubelet stops sidecars."""
        for proc in self._sidecars:
            self._signal(proc, signal.SIGTERM)
        codes = []
        for proc in self._sidecars:
            try:
                code = proc.wait(timeout=0 if self.killed.is_set() else 2)
            except subprocess.TimeoutExpired:
                self._signal(proc, signal.SIGKILL)
                code = proc.wait()
            codes.append(128 - code if code < 0 else code)
        return codes

    def _cut_messages(self) -> None:
        """All of a pod's termination messages share 12 KiB: each is cut evenly."""
        details = [s["state"]["terminated"] for key in ("initContainerStatuses",
                                                        "containerStatuses")
                   for s in self.status.get(key) or [] if "terminated" in s["state"]]
        total = sum(len(d.get("message", "").encode()) for d in details)
        if total > POD_MESSAGES_MAX:
            share = POD_MESSAGES_MAX // max(1, len(details))
            for d in details:
                if d.get("message"):
                    d["message"] = _tail(d["message"].encode(), share)

    # --- Volumes ----------------------------------------------------------------------------

    def _mount_volumes(self) -> Waits:
        """emptyDirs as folders; projected, configMap, secret, downwardAPI volumes written out.
        A missing ConfigMap or Secret keeps the pod waiting (FailedMount), as in Kubernetes."""
        warned = False
        while True:
            try:
                for volume in self.spec.get("volumes") or []:
                    self.volumes[volume["name"]] = self._volume(volume)
                break
            except LookupError as exc:
                if not warned:
                    self.event("Warning", "FailedMount", f'MountVolume.SetUp failed for volume '
                                                         f'"{exc.args[0]}" : {exc.args[1]}')
                    warned = True
                yield from self._sleep(self.kubelet.retry_seconds)
        if "task" in self.volumes and (self.volumes["task"] / "instance.json").exists():
            self._instance = json.loads((self.volumes["task"] / "instance.json").read_text())

    def _volume(self, volume: Obj) -> Path:
        path = self.dir / "volumes" / volume["name"]
        if not any(k in volume for k in ("projected", "configMap", "secret", "downwardAPI")):
            path.mkdir(parents=True, exist_ok=True)  # emptyDir (and anything else: a folder)
            fs_group = (self.spec.get("securityContext") or {}).get("fsGroup")
            if os.geteuid() == 0 and fs_group is not None:
                os.chown(path, -1, int(fs_group))
            path.chmod(0o2777 if fs_group is not None else 0o777)
            return path
        files: dict[str, bytes] = {}
        sources = (volume.get("projected") or {}).get("sources") or [
            {k: volume[k]} for k in ("configMap", "secret", "downwardAPI") if k in volume]
        for source in sources:
            files |= self._project(volume["name"], source)
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        for rel, data in files.items():
            target = path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(0o444)
        return path

    def _project(self, volume: str, source: Obj) -> dict[str, bytes]:
        for kind, plural in (("configMap", "configmaps"), ("secret", "secrets")):
            if kind not in source:
                continue
            ref = source[kind]
            name = ref.get("name") or ref.get("secretName")
            obj = self.store.find(self.store.resource("", "v1", plural), self.ns, name)
            if obj is None:
                if ref.get("optional"):
                    return {}
                raise LookupError(volume, f'{kind.lower()} "{name}" not found'
                                  if kind == "configMap" else f'secret "{name}" not found')
            data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
            if kind == "secret":
                data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
            data |= {k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()}
            items = ref.get("items")
            if not items:
                return data
            missing = [i["key"] for i in items if i["key"] not in data]
            if missing and not ref.get("optional"):
                raise LookupError(volume, f'configmap references non-existent config key: '
                                          f'{missing[0]}')
            return {i["path"]: data[i["key"]] for i in items if i["key"] in data}
        found = {}
        for item in (source.get("downwardAPI") or {}).get("items") or []:
            found[item["path"]] = self._field(item["fieldRef"]["fieldPath"]).encode()
        return found

    def _field(self, path: str) -> str:
        meta = self.pod["metadata"]
        m = re.fullmatch(r"metadata\.(annotations|labels)\['(.+)'\]", path)
        if m:
            return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
        if path in ("metadata.annotations", "metadata.labels"):
            values = meta.get(path.split(".")[1]) or {}
            return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
        simple = {"metadata.name": self.name, "metadata.namespace": self.ns,
                  "metadata.uid": self.uid, "spec.nodeName": self.node.name,
                  "spec.serviceAccountName": self.spec.get("serviceAccountName", ""),
                  "status.hostIP": self.node.ip, "status.podIP": self.status.get("podIP", "")}
        return simple.get(path, "")

    # --- Containers -------------------------------------------------------------------------

    def _set(self, container: Obj, init: bool, status: Obj) -> None:
        key = "initContainerStatuses" if init else "containerStatuses"
        statuses = self.status[key]
        index = next(i for i, s in enumerate(statuses) if s["name"] == container["name"])
        statuses[index] = status

    def _sleep(self, seconds: float) -> Waits:
        """Wait `seconds` (the status noted so far published first); Killed if the pod is
        killed before or meanwhile."""
        if seconds > 0 and not self.killed.is_set():
            self._publish()
            yield seconds
        if self.killed.is_set():
            raise Killed()

    def _pull(self, container: Obj, init: bool) -> Waits:
        """The image pull: events, and a stuck pull while an image_pull fault holds."""
        image = container.get("image", "")
        name = container["name"]
        first_init = self.inits[0]["name"] if self.inits else self.mains[0]["name"]
        fault = self._fault("image_pull", None)
        if fault is not None and (fault.step or first_init) != name:
            fault = None
        backoff = False
        while fault is not None and self.kubelet.faults.active(fault):
            if not backoff:
                self.event("Normal", "Pulling", f'Pulling image "{image}"', name, init)
                detail = fault.message or (
                    f'rpc error: code = NotFound desc = failed to pull and unpack image '
                    f'"{shapes.normalized_image(image)}": failed to resolve reference '
                    f'"{shapes.normalized_image(image)}": {shapes.normalized_image(image)}: '
                    f'not found')
                self.event("Warning", "Failed", f'Failed to pull image "{image}": {detail}',
                           name, init)
                self.event("Warning", "Failed", "Error: ErrImagePull", name, init)
                self._set(container, init, shapes.waiting(container, "ErrImagePull", detail))
            else:
                self.event("Normal", "BackOff", f'Back-off pulling image "{image}"', name, init)
                self.event("Warning", "Failed", "Error: ImagePullBackOff", name, init)
                self._set(container, init, shapes.waiting(
                    container, "ImagePullBackOff", f'Back-off pulling image "{image}"'))
            self.write()
            backoff = not backoff
            yield from self._sleep(self.kubelet.pull_backoff_seconds)
        policy = container.get("imagePullPolicy", "IfNotPresent")
        if policy != "Always" and image in self.node.images:
            self.event("Normal", "Pulled", f'Container image "{image}" already present on '
                                           f'machine', name, init)
            return
        self.event("Normal", "Pulling", f'Pulling image "{image}"', name, init)
        if self.kubelet.pull_seconds:
            yield from self._sleep(self.kubelet.pull_seconds)
        self.node.images.add(image)
        took = f"{int(self.kubelet.pull_seconds * 1000) or 412}ms"
        self.event("Normal", "Pulled", f'Successfully pulled image "{image}" in {took} ({took} '
                                       f'including waiting). Image size: '
                                       f'{100_000_000 + len(image) * 1_000_003} bytes.', name, init)

    def _container(self, container: Obj, init: bool, sim: Any) -> Generator[float, None, int]:
        """Pull, create, start, wait: the container's exit code (its status written)."""
        name = container["name"]
        yield from self._pull(container, init)
        env = yield from self._env_or_wait(container, init)
        cid = shapes.container_id()
        self.event("Normal", "Created", f"Created container: {name}", name, init)
        self.event("Normal", "Started", f"Started container {name}", name, init)
        started = now()
        self.step_started[name] = time.monotonic()
        ready = not init and all(
            c["name"] == name or c.get("restartPolicy") == "Always" for c in self.mains)
        self._set(container, init, shapes.running(container, cid, started, ready=ready))
        if ready:
            for kind in ("Ready", "ContainersReady"):
                shapes.set_condition(self.status, kind, True)
        if not init:
            self.status["phase"] = "Running"
        self.note()
        self.kubelet.step_started(self, name)
        log = self.dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.touch()
        self.store.set_container_log(self.ns, self.name, name, log)
        message_file = self.dir / "termination" / name
        message_file.parent.mkdir(parents=True, exist_ok=True)
        message_file.write_bytes(b"")
        message_file.chmod(0o666)
        try:
            if sim is not None:
                code, reason = yield from self._simulate(container, sim, log, message_file)
            else:
                code, reason = self._exec(container, env, log, message_file)  # blocks
        except Killed:
            code, reason = 137, None
            self.step_started.pop(name, None)
            with contextlib.suppress(PodGone):
                self.event("Normal", "Killing", f"Stopping container {name}", name, init)
            self._set(container, init, shapes.terminated(
                container, cid, started, now(), code, reason, init=init))
            self._after_kill()
            raise
        message = self._message(container, code, log, message_file)
        self._set(container, init, shapes.terminated(container, cid, started, now(), code,
                                                     reason, message, init=init))
        self._check_size_limits()
        self.note()
        return code

    def _after_kill(self) -> None:
        """A killed pod's last status: Failed, evicted or not."""
        st = self.status
        if self.kill_reason == "evicted":
            st["reason"], st["message"] = "Evicted", self.kill_message
            shapes.set_condition(st, "DisruptionTarget", True, "TerminationByKubelet",
                                 self.kill_message)
            self.event("Warning", "Evicted", self.kill_message)
        with contextlib.suppress(PodGone):
            self._finish("Failed")

    def _check_size_limits(self) -> None:
        """An emptyDir over its sizeLimit gets the pod evicted, as the kubelet does."""
        for volume in self.spec.get("volumes") or []:
            limit = (volume.get("emptyDir") or {}).get("sizeLimit")
            path = self.volumes.get(volume["name"])
            if limit and path and _folder_size(path) > _size_bytes(limit):
                self.kill("evicted", f'Usage of EmptyDir volume "{volume["name"]}" exceeds the '
                                     f'limit "{limit}". ')
                self._after_kill()
                raise Killed()

    def _message(self, container: Obj, code: int, log: Path, message_file: Path) -> str:
        data = message_file.read_bytes() if message_file.exists() else b""
        message = _tail(data, MESSAGE_MAX)
        if not data and code != 0 and container.get(
                "terminationMessagePolicy") == "FallbackToLogsOnError":
            lines = log.read_bytes().splitlines(keepends=True)[-FALLBACK_LINES:]
            message = _tail(b"".join(lines), FALLBACK_MAX)
        return message

    # --- Environment and paths ----------------------------------------------------------------

    def _env_or_wait(self, container: Obj, init: bool
                     ) -> Generator[float, None, dict[str, str]]:
        """The container's env, waiting (CreateContainerConfigError) for what is missing."""
        warned = False
        while True:
            fault = self._fault("config", container["name"])
            try:
                if fault is not None and self.kubelet.faults.active(fault):
                    raise LookupError(fault.message or 'secret "agent-token" not found')
                return self._env(container)
            except LookupError as exc:
                if not warned:
                    self._set(container, init, shapes.waiting(
                        container, "CreateContainerConfigError", str(exc.args[0])))
                    self.write()
                    self.event("Warning", "Failed", f"Error: {exc.args[0]}", container["name"],
                               init)
                    warned = True
                yield from self._sleep(self.kubelet.retry_seconds)

    def _env(self, container: Obj) -> dict[str, str]:
        env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/sbin",
                                        "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin",
                                        "/bin"]),
               "HOSTNAME": self.name, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
        home = self.dir / "home" / container["name"]
        home.mkdir(parents=True, exist_ok=True)
        env["HOME"] = str(home)
        for entry in container.get("env") or []:
            if "value" in entry:
                env[entry["name"]] = str(entry["value"])
                continue
            source = entry.get("valueFrom") or {}
            if "fieldRef" in source:
                env[entry["name"]] = self._field(source["fieldRef"]["fieldPath"])
            for kind, plural in (("secretKeyRef", "secrets"), ("configMapKeyRef", "configmaps")):
                if kind not in source:
                    continue
                ref = source[kind]
                obj = self.store.find(self.store.resource("", "v1", plural), self.ns,
                                      ref["name"])
                what = "secret" if plural == "secrets" else "configmap"
                if obj is None or ref["key"] not in (obj.get("data") or {}):
                    if ref.get("optional"):
                        continue
                    if obj is None:
                        raise LookupError(f'{what} "{ref["name"]}" not found')
                    raise LookupError(f"couldn't find key {ref['key']} in {what.title()} "
                                      f"{self.ns}/{ref['name']}")
                value = obj["data"][ref["key"]]
                env[entry["name"]] = base64.b64decode(value).decode() \
                    if plural == "secrets" else value
        return env

    def _paths(self, container: Obj) -> dict[str, Path]:
        """Pod paths -> local folders, for this container."""
        paths: dict[str, Path] = {}
        # Another container's mounts first: a path sent to a sidecar (REPO_DIR) names its
        # volume there; then this container's own.
        others = [c for c in [*self.inits, *self.mains] if c is not container]
        for mount in [*(m for c in others for m in c.get("volumeMounts") or []
                        if not m.get("subPath")), *(container.get("volumeMounts") or [])]:
            local = self.volumes[mount["name"]]
            if mount.get("subPath"):
                local = local / mount["subPath"]
                local.mkdir(parents=True, exist_ok=True)
            paths[mount["mountPath"]] = local
        paths[container.get("terminationMessagePath") or "/dev/termination-log"] = \
            self.dir / "termination" / container["name"]
        if self._instance is not None and TESTBED not in paths and self._task_image(container):
            paths[TESTBED] = self.dir / "testbeds" / container["name"]
        return paths

    def _task_image(self, container: Obj) -> bool:
        """Whether the container runs the task's own image (which holds /testbed)."""
        pull = next((c for c in self.inits if c["name"] == "pull"), None)
        return pull is not None and container.get("image") == pull.get("image")

    def _rewrite(self, text: str, paths: Mapping[str, Path]) -> str:
        # The harness's own paths stay: its folders (HOME), its Python and this checkout,
        # any of which may lie under /tmp, which a pod's /tmp mount must not move.
        own = (str(self.dir), sys.prefix, str(Path(__file__).resolve().parents[2]))
        for prefix in sorted(paths, key=len, reverse=True):
            pattern = r"(?<![\w.-])" + re.escape(prefix) + r"(?=/|$|[\s'\"\]:;,)])"
            text = re.sub(pattern, lambda m, p=prefix: m.group(0) if any(
                m.string.startswith(o, m.start()) for o in own) else str(paths[p]), text)
        for port, local in self._ports.items():
            text = re.sub(rf"((?:127\.0\.0\.1|localhost|0\.0\.0\.0):){port}\b",
                          rf"\g<1>{local}", text)
        return text

    def _argv(self, container: Obj) -> list[str] | None:
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        if not container.get("command"):
            entry = self.kubelet.entrypoint(container.get("image", ""))
            if entry is None:
                return None
            argv = [*entry, *(container.get("args") or [])]
        if not argv:
            return None
        argv = [self._port_arg(argv, i) for i in range(len(argv))]
        if argv[0] == "proctor":
            return [sys.executable, "-m", "proctor.cli.main", *argv[1:]]
        if argv[0] in ("python", "python3"):
            return [sys.executable, *argv[1:]]
        return argv

    def _port_arg(self, argv: list[str], index: int) -> str:
        if index and argv[index - 1] == "--port" and argv[index].isdigit():
            return str(self._ports.get(int(argv[index]), argv[index]))
        return argv[index]

    def _exec(self, container: Obj, env: dict[str, str], log: Path,
              message_file: Path) -> tuple[int, str | None]:
        name = container["name"]
        argv = self._argv(container)
        if argv is None:
            self._write_log(log, f"no command, and no local entrypoint known for image "
                                 f"{container.get('image')!r} (Kubelet(entrypoints=...))\n")
            return 128, "StartError"
        paths = self._paths(container)
        argv = [self._rewrite(a, paths) for a in argv]
        env = {k: self._rewrite(v, paths) for k, v in env.items()}
        strike = self._strike(name)
        if argv == ["true"] and strike is None:
            return 0, None
        if TESTBED in paths and any(str(paths[TESTBED]) in s for s in [*argv, *env.values()]):
            self._checkout(paths[TESTBED])
        cwd = self._rewrite(container["workingDir"], paths) if container.get("workingDir") \
            else env["HOME"]
        executable = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0], path=env[
            "PATH"])
        if executable is None:
            self._write_log(log, "")
            return 128, "StartError"
        if strike is not None and strike.kind == "exit":
            self._write_log(log, strike.message or f"{name}: failed (injected exit "
                                                   f"{strike.exit_code})\n")
            return strike.exit_code, None
        with open(log, "ab") as out:
            self._proc = subprocess.Popen([executable, *argv[1:]], env=env, cwd=cwd,
                                          stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True,
                                          **self._identity(container, env, executable))
            return self._wait(self._proc, name, strike)

    def _identity(self, container: Obj, env: Mapping[str, str],
                  executable: str = "") -> dict[str, Any]:
        """Popen's user and groups for a container that asks for them (only root can switch;
        else it runs as the test cluster does). Its HOME, a folder of the harness, is its.
        Proctor's own steps run the harness's Python, which stands in for the runner image
        and may lie where another user cannot read (a venv in root's home): they run as the
        test cluster does."""
        wanted = run_as(self.spec, container)
        if wanted is None or os.geteuid() != 0 or executable == sys.executable:
            return {}
        uid, gid, groups = wanted
        os.chown(env["HOME"], uid, gid)
        return {"user": uid, "group": gid, "extra_groups": groups}

    def _fault(self, kind: str, step: str | None) -> Fault | None:
        """The fault of ``kind`` striking this pod now (none once it is being stopped)."""
        if self.killed.is_set():
            return None
        return self.kubelet.faults.strike(kind, self.uid, self.labels, self.job_name, step,
                                          self.ns)

    def _strike(self, step: str) -> Fault | None:
        for kind in ("exit", "oom", "evict"):
            fault = self._fault(kind, step)
            if fault is not None:
                return fault
        return None

    def _wait(self, proc: subprocess.Popen[bytes], step: str,
              strike: Fault | None) -> tuple[int, str | None]:
        self._publish()
        started = time.monotonic()
        while True:
            try:
                code = proc.wait(timeout=0.02)
                break
            except subprocess.TimeoutExpired:
                pass
            if self.killed.is_set():
                self._signal(proc, signal.SIGKILL)
                proc.wait()
                raise Killed()
            if strike is not None and time.monotonic() - started >= strike.after:
                self._signal(proc, signal.SIGKILL)
                proc.wait()
                if strike.kind == "oom":
                    return 137, "OOMKilled"
                volume = next((v for v in self.spec.get("volumes") or [] if "emptyDir" in v),
                              {"name": "work", "emptyDir": {"sizeLimit": "4Gi"}})
                limit = volume["emptyDir"].get("sizeLimit", "4Gi")
                self.kill("evicted", strike.message or f'Usage of EmptyDir volume '
                                                       f'"{volume["name"]}" exceeds the limit '
                                                       f'"{limit}". ')
                raise Killed()
        self._proc = None
        return (128 - code if code < 0 else code), None

    def _simulate(self, container: Obj, sim: Any, log: Path, message_file: Path
                  ) -> Generator[float, None, tuple[int, str | None]]:
        """The step replaced by a sleep; the grade step writes a result built for the item."""
        name = container["name"]
        item = self.item
        strike = self._strike(name)
        seconds = float(sim.durations(item).get(name, 0.0))
        until = time.monotonic() + seconds
        if strike is not None:  # it strikes `after` seconds into the step, if that is sooner
            until = min(until, self.step_started[name] + strike.after)
        yield from self._sleep(max(0.0, until - time.monotonic()))  # one wait: few wake-ups
        if strike is not None:
            if strike.kind == "exit":
                self._write_log(log, strike.message or f"{name}: failed (injected exit "
                                                       f"{strike.exit_code})\n")
                return strike.exit_code, None
            if strike.kind == "oom":
                return 137, "OOMKilled"
            self.kill("evicted", strike.message or 'Usage of EmptyDir volume "work" exceeds '
                                                   'the limit "4Gi". ')
            raise Killed()
        if name == "solve":
            self._write_log(log, ">>>>> Proctor Patch Begin\n>>>>> Proctor Patch End\n")
        if container is self.mains[-1] and item is not None:
            full, compact = self.kubelet.simulated_result(item, sim.outcome_of(item))
            self._write_log(log, json.dumps(full) + "\n")
            message_file.write_text(json.dumps(compact))
        return 0, None

    @staticmethod
    def _write_log(log: Path, text: str) -> None:
        with open(log, "a") as out:
            out.write(text)

    def _checkout(self, dest: Path) -> None:
        from proctor.core.model import Instance
        from proctor.sandboxes import process

        if dest.exists():
            return
        dest.parent.mkdir(parents=True, exist_ok=True)
        process.checkout(Instance.model_validate(self._instance), dest)

    # --- Native sidecars --------------------------------------------------------------------

    def _start_sidecar(self, container: Obj) -> Waits:
        """An init container with restartPolicy Always: started, then left running."""
        name = container["name"]
        for port in container.get("ports") or []:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                self._ports[int(port["containerPort"])] = sock.getsockname()[1]
        yield from self._pull(container, True)
        env = yield from self._env_or_wait(container, True)
        argv = self._argv(container)
        cid = shapes.container_id()
        started = now()
        log = self.dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self.store.set_container_log(self.ns, self.name, name, log)
        if argv is None:
            self._write_log(log, f"no local entrypoint for image {container.get('image')!r}\n")
            self._set(container, True, shapes.terminated(container, cid, started, now(), 128,
                                                         "StartError", init=True))
            self.write()
            return
        paths = self._paths(container)
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [self._rewrite(a, paths) for a in argv],
                env={k: self._rewrite(v, paths) for k, v in env.items()},
                cwd=env["HOME"], stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
                **self._identity(container, env, argv[0]))
        self._sidecars.append(proc)
        self.event("Normal", "Started", f"Started container {name}", name, True)
        self._set(container, True, shapes.running(container, cid, started))
        self.write()
        probe = (container.get("startupProbe") or {}).get("tcpSocket")
        if probe:
            local = self._ports.get(int(probe["port"]), int(probe["port"]))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                with socket.socket() as sock:
                    if sock.connect_ex(("127.0.0.1", local)) == 0:
                        break
                yield from self._sleep(0.1)
        self._set(container, True, shapes.running(container, cid, started, ready=True))
        self.write()
