"""The Docker sandbox: each item's test step in a fresh container of the task's own image.

For each item: a new container of the row's image (named as swebench 5 names it, with
`runner.instanceImageRegistry` as prefix), so /testbed is pristine; the work folder
copied in at /proctor; the cluster's `run.sh` run unchanged (with TESTBED exported when
the image does not set it); the outputs copied back out; the container removed, whatever
happened (success, failure, time limit, Ctrl-C; after a SIGKILL, at the next run on
this host, by the owner label each container carries). Nothing is mounted, so no file the
container's root writes ever lands on the host: the outputs are written here by this
process, as the calling user.

It talks to the daemon through the Docker SDK for Python (`docker`, already a
dependency of swebench) rather than the CLI: errors arrive as exceptions with a type
(image missing, daemon down), a pull streams its progress as structured events, files
go in and out as tar streams (`put_archive`, `get_archive`), and no `docker` binary is
needed beside the daemon. It also lets the tests stand a fake client in for the daemon.

Images are never deleted here; a missing image is pulled once, with progress, when
`pull` is `missing`, and otherwise the item stops with a message naming the image.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import socket
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO, TypedDict

from proctor.core.exits import Interrupted
from proctor.core.images import instance_image
from proctor.core.labels import LABEL_ITEM, LABEL_OWNER
from proctor.core.model import Instance
from proctor.runner.workdir import TEST_STEP_OUTPUTS, WorkDir
from proctor.sandboxes import process
from proctor.sandboxes.process import SandboxRun

if TYPE_CHECKING:  # the SDK itself is imported where used: `proctor run` without Docker
    # never pays for it (requests, urllib3)
    from docker import DockerClient
    from docker.models.containers import Container

PullPolicy = Literal["missing", "never"]
_PROGRESS_SECONDS = 5  # between two lines of a pull's download progress
_MOUNT = "/proctor"
_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10,
          "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}

START_DOCKER = ("start the Docker daemon (`sudo systemctl start docker`, or as root "
                "`dockerd &`) or point DOCKER_HOST at one")


class ImageUnavailable(Exception):
    """The item's image is not on this machine and may not, or could not, be pulled."""


def cpu_quantity(value: str | int | float) -> float:
    """CPUs from a Kubernetes quantity: "2", "0.5", "500m"."""
    text = str(value)
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


def memory_quantity(value: str | int) -> int:
    """Bytes from a Kubernetes quantity: "4Gi", "512Mi", "1G", "1000"."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]i?|k)?", str(value))
    if not match:
        raise ValueError(f"not a memory quantity: {value!r}")
    return int(float(match[1]) * _UNITS[match[2] or ""])


class Limits(TypedDict, total=False):
    """A container's CPU and memory limits, as `containers.create` takes them."""

    nano_cpus: int
    mem_limit: int


class _Network(TypedDict, total=False):
    """The container's network, as `containers.create` takes it (left out: the daemon's
    default network)."""

    network_mode: str


def container_limits(resources: Mapping[str, Any] | None) -> Limits:
    """Docker's CPU and memory limits from `runner.resources` (a Pod container's
    resources): its limits, else its requests; nothing when neither is given."""
    resources = resources or {}
    wanted = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    limits: Limits = {}
    if "cpu" in wanted:
        limits["nano_cpus"] = int(cpu_quantity(wanted["cpu"]) * 1e9)
    if "memory" in wanted:
        limits["mem_limit"] = memory_quantity(wanted["memory"])
    return limits


def connect(timeout: int = 300, pool: int = 64) -> tuple[DockerClient | None, str]:
    """A client of the daemon that DOCKER_HOST (or the default socket) names, or None and
    why not. `timeout` bounds each API call (a pull's stream can pause while a big layer
    is extracted); `pool` is how many threads may talk to the daemon at once (each
    running item waits on one connection)."""
    try:
        import docker

        client = docker.from_env(timeout=timeout, max_pool_size=pool)
        client.ping()
        return client, ""
    except Exception as exc:  # any failure means "no daemon here"
        return None, f"no Docker daemon answers ({type(exc).__name__}: {exc})"


class DockerSandbox:
    """Runs test steps in containers; one per `proctor run`, shared by its threads."""

    def __init__(self, client: DockerClient, registry: str = "", pull: PullPolicy = "missing",
                 network: str | None = None, resources: Mapping[str, Any] | None = None,
                 labels: Mapping[str, str] | None = None, progress: TextIO | None = None,
                 grace_seconds: int = process.GRACE_SECONDS):
        self.client, self.registry, self.pull = client, registry, pull
        self.network = network  # None: the daemon's default network
        self.limits = container_limits(resources)
        self.labels = dict(labels or {})
        self.progress = progress if progress is not None else sys.stderr
        self.grace_seconds = grace_seconds
        self._images: dict[str, str | None] = {}  # image -> why unavailable (None: here)
        self._image_locks: dict[str, threading.Lock] = {}
        self._live: set[Container] = set()
        self._guard = threading.Lock()
        self._stopping = False

    @property
    def network_isolated(self) -> bool:
        return self.network == "none"

    def image_of(self, instance: Instance) -> str:
        return instance_image(instance, self.registry)

    def has_image(self, image: str) -> bool:
        import docker

        try:
            self.client.images.get(image)
            return True
        except docker.errors.ImageNotFound:
            return False

    def ensure_image(self, image: str) -> None:
        """Make sure the image is here: pulled once (by one thread) when allowed."""
        with self._guard:
            lock = self._image_locks.setdefault(image, threading.Lock())
        with lock:
            if image not in self._images:
                self._images[image] = self._obtain(image)
        if self._images[image]:
            raise ImageUnavailable(self._images[image])

    def _obtain(self, image: str) -> str | None:
        if self.has_image(image):
            return None
        if self.pull == "never":
            return (f"image {image} is not on this machine and --pull never forbids pulling "
                    f"it; pull or build it first (`docker pull {image}`)")
        try:
            self._pull(image)
        except Exception as exc:  # the daemon's words name the cause
            return f"pulling image {image} failed: {exc}"
        return None

    def _pull(self, image: str) -> None:
        """Pull with progress: a line per layer as it completes, the bytes downloaded so
        far at most every few seconds (layers of official images reach gigabytes), and
        the final status."""
        print(f"Pulling {image} ...", file=self.progress, flush=True)
        repository, tag = _split_tag(image)
        layers: dict[str, tuple[int, int]] = {}  # layer -> (bytes downloaded, size)
        shown = time.monotonic()
        for event in self.client.api.pull(repository, tag=tag, stream=True, decode=True):
            if "error" in event:
                raise RuntimeError(event["error"])
            status, layer = event.get("status", ""), event.get("id")
            detail = event.get("progressDetail") or {}
            if layer and status == "Downloading" and detail.get("total"):
                layers[layer] = (detail.get("current", 0), detail["total"])
                if time.monotonic() - shown >= _PROGRESS_SECONDS:
                    shown = time.monotonic()
                    print(f"  {_size(sum(c for c, _ in layers.values()))} of "
                          f"{_size(sum(t for _, t in layers.values()))} downloaded",
                          file=self.progress, flush=True)
            elif layer and status in ("Pull complete", "Already exists"):
                print(f"  {layer}: {status}", file=self.progress, flush=True)
            elif not layer and status:
                print(f"  {status}", file=self.progress, flush=True)

    def run_test_step(self, work: WorkDir, instance: Instance, time_limit: int) -> SandboxRun:
        """Run run.sh in a fresh container of the task's image; the logs come back to
        `work`. Same contract as the process sandbox's `run_test_step`: `stop_all` removes
        its container, and it raises `Interrupted`."""
        started = time.perf_counter()
        if not (work / "patch.diff").exists() and not (work / "test_without_patch").exists():
            # Nothing to test (run.sh would stop at once): no container, no image pull.
            return SandboxRun(0.0, self.network_isolated)
        image = self.image_of(instance)
        try:
            self.ensure_image(image)
        except ImageUnavailable as exc:
            (work / "infra_error").write_text(f"{exc}\n")
            return SandboxRun(time.perf_counter() - started, self.network_isolated, str(exc))
        error = self._run(work, image, instance, time_limit + self.grace_seconds)
        if error:
            (work / "sandbox_error").write_text(error + "\n")
        return SandboxRun(time.perf_counter() - started, self.network_isolated, error)

    def _run(self, work: WorkDir, image: str, instance: Instance, limit: int) -> str | None:
        container = self._create(image, instance, ["bash", f"{_MOUNT}/run.sh"])
        try:
            container.put_archive("/", _pack(work.root))
            container.start()
            code = self._wait(container, limit)
            log = container.logs(stdout=False, stderr=True)
            (work / "run.log").write_bytes(log)
            _unpack(container.get_archive(_MOUNT)[0], work.root)
            if (work / "eval_exit").exists():  # the eval script ran: its output is the log
                (work / "test_output.txt").write_bytes(container.logs(stdout=True,
                                                                      stderr=False))
        except Exception:
            if self._stopping:  # stop_all removed it under our feet: not the item's fault
                raise Interrupted("the test step was stopped") from None
            raise
        finally:
            self._remove(container)
        if code is None:
            return f"the test step did not finish within {limit} s; its container was killed"
        if code != 0:
            return f"the test step exited {code}: {log[-500:].decode(errors='replace').strip()}"
        return None

    def _create(self, image: str, instance: Instance, command: list[str]) -> Container:
        """A new (not started) container of `image`, registered for removal."""
        env = {} if "TESTBED" in _image_env(self.client, image) else {"TESTBED": "/testbed"}
        env["PROCTOR_TEST_LOG"] = "/dev/stdout"
        labels = {**self.labels, LABEL_ITEM: instance.instance_id, LABEL_OWNER: _OWNER}
        network: _Network = {"network_mode": self.network} if self.network else {}
        with self._guard:
            if self._stopping:
                raise Interrupted("the run is stopping")
            container = self.client.containers.create(image, command=command, environment=env,
                                                      labels=labels, **network, **self.limits)
            self._live.add(container)
        return container

    def _wait(self, container: Container, limit: int) -> int | None:
        """The container's exit code; None when it ran past `limit` seconds and was killed."""
        import requests

        try:
            code = container.wait(timeout=limit)["StatusCode"]
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            container.kill()
            return None
        if self._stopping:
            raise Interrupted("the test step was stopped")
        return code

    def _remove(self, container: Container) -> None:
        import docker

        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass  # stop_all got there first
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: its removal is already in progress (stop_all)
                raise
        with self._guard:
            self._live.discard(container)

    def remove_orphans(self) -> int:
        """Remove the containers that a Proctor process on this host left when it was
        killed outright (SIGKILL: no chance to clean up); how many there were."""
        host = socket.gethostname()
        # sparse: the list's own answer, without inspecting each container (one removed
        # meanwhile, by its run or the daemon, would fail the inspection).
        found = self.client.containers.list(all=True, sparse=True,
                                            filters={"label": LABEL_OWNER})
        orphans = [c for c in found
                   if _dead_owner((c.attrs.get("Labels") or {}).get(LABEL_OWNER, ""), host)]
        for container in orphans:
            with contextlib.suppress(Exception):  # another run may be removing it too
                container.remove(force=True)
        return len(orphans)

    def stop_all(self) -> None:
        """Kill and remove every container still running (Ctrl-C); start no new one."""
        with self._guard:
            self._stopping = True
            live = list(self._live)
        for container in live:
            self._remove(container)

    def image_digest(self, image: str) -> str:
        """The image's digest as the daemon has it: its repo digest (what a registry
        serves, the same on every machine), else its local id; why not, when unknown."""
        try:
            attrs = self.client.images.get(image).attrs
        except Exception as exc:  # gone, or the daemon stopped answering: say which
            return f"unknown ({type(exc).__name__})"
        digests = attrs.get("RepoDigests") or []
        return str(digests[0].rpartition("@")[2] if digests else attrs.get("Id", "unknown"))

    def runtime(self) -> str:
        """The daemon's default runtime (runc, runsc, ...): what every container ran on."""
        try:
            return str(self.client.info().get("DefaultRuntime") or "unknown")
        except Exception as exc:  # the daemon stopped answering
            return f"unknown ({type(exc).__name__})"

    def limits_text(self) -> str:
        """The CPU and memory limits of every container, in words."""
        if not self.limits:
            return "none: the containers may use the whole machine"
        parts = []
        if "nano_cpus" in self.limits:
            parts.append(f"{self.limits['nano_cpus'] / 1e9:g} CPUs")
        if "mem_limit" in self.limits:
            parts.append(f"{self.limits['mem_limit']} bytes of memory")
        return ", ".join(parts)

    def checkout(self, instance: Instance, dest: Path) -> None:
        """The agent's REPO_DIR: a clone at base_commit, or, when the repository cannot be
        cloned, a copy of the image's /testbed, stripped of everything newer."""
        try:
            process.checkout(instance, dest)
        except RuntimeError:
            self.ensure_image(self.image_of(instance))
            process.checkout(instance, dest, build=self._copy_testbed)

    def _copy_testbed(self, instance: Instance, dest: Path) -> None:
        container = self._create(self.image_of(instance), instance, ["true"])
        try:
            with tempfile.TemporaryDirectory(prefix="proctor-testbed-") as tmp:
                stream, _ = container.get_archive("/testbed")
                with tarfile.open(fileobj=_Chunks(stream), mode="r|") as tar:
                    tar.extractall(tmp, filter="data")
                Path(tmp, "testbed").rename(dest)
        finally:
            self._remove(container)
        process.strip_to_commit(dest, instance.base_commit)


_OWNER = f"{socket.gethostname()}:{os.getpid()}"


def _dead_owner(owner: str, host: str) -> bool:
    """Whether `host:pid` names a process of this host that no longer runs."""
    owner_host, _, pid = owner.rpartition(":")
    if owner_host != host or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


def _size(count: int) -> str:
    return f"{count / 2**20:.1f} MiB" if count < 2**30 else f"{count / 2**30:.2f} GiB"


def _split_tag(image: str) -> tuple[str, str]:
    """`host:5000/a/b:tag` -> (`host:5000/a/b`, `tag`); no tag means `latest`."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        return image, "latest"
    return name, tag


def _image_env(client: DockerClient, image: str) -> set[str]:
    """Names of the environment variables the image sets."""
    env = client.images.get(image).attrs.get("Config", {}).get("Env") or []
    return {entry.partition("=")[0] for entry in env}


def _pack(folder: Path) -> bytes:
    """The work folder as a tar of `proctor/<file>`, owned by root (the container's user)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in [folder, *sorted(folder.iterdir())]:
            if path != folder and not path.is_file():
                continue
            info = tar.gettarinfo(str(path), arcname=f"proctor/{path.relative_to(folder)}"
                                  if path != folder else "proctor")
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if path.is_file():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    return buffer.getvalue()


# Only the test step's outputs (TEST_STEP_OUTPUTS) come back. The eval script runs as the
# container's root and could rewrite the task, the patch or the scripts in /proctor:
# those the grade step reads from the host's copy, which the container never touches.
# The test log itself is the container's stdout, as the daemon captured it: run.sh writes
# the eval script's output there (PROCTOR_TEST_LOG), not to a file the script could edit.


def _unpack(stream: Iterator[bytes], dest: Path) -> None:
    """Write back the test step's outputs from the container's /proctor, as this user."""
    with tarfile.open(fileobj=_Chunks(stream), mode="r|") as tar:
        for member in tar:
            name = member.name.removeprefix("proctor/")
            if not member.isfile() or name not in TEST_STEP_OUTPUTS:
                continue
            data = tar.extractfile(member)
            if data is not None:
                (dest / name).write_bytes(data.read())


class _Chunks(io.RawIOBase):
    """A file over the byte chunks the SDK streams (read by tarfile in stream mode)."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks, self._rest = iter(chunks), b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._rest:
            try:
                self._rest = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._rest))
        buffer[:size], self._rest = self._rest[:size], self._rest[size:]
        return size
