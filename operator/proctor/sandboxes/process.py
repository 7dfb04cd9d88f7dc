"""The process sandbox: the test step on this machine, without a container.

For each item: a fresh checkout of the task's repository at base_commit in a
temporary folder, `run.sh` in a subprocess with `TESTBED` pointing at it, an
environment holding nothing from the caller's (no tokens, no keys), and no
network where the kernel lets us make a new network namespace.

When Proctor runs as root, run.sh runs as a uid of its own (`testuser`), from a copy of
the work folder's inputs: the patch's code can write its checkout and temporary folder
(and world-writable folders such as /tmp), no file of another user's, and leaves no
process behind. Otherwise it runs as the calling user, can
read what that user can read and write outside the checkout: then this is NOT a security
boundary. It is meant for portable tasks (the bundled demo dataset, your own small
repositories).
Real SWE-bench rows need their image (conda, /testbed): on this machine they run in
the Docker sandbox (`sandboxes/docker.py`), on Kubernetes one Job per item.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from proctor.core.exits import BadInput, Interrupted
from proctor.core.model import Instance
from proctor.datasets import repo_bundle
from proctor.runner.workdir import TEST_STEP_INPUTS, WorkDir, bring_back
from proctor.sandboxes import testuser

# Signs that an eval script expects the official image rather than any checkout.
_IMAGE_ONLY_MARKERS = ("/testbed", "conda activate", "/opt/miniconda3")
GRACE_SECONDS = 30  # past the script's own watchdog, before the sandbox kills it itself

Builder = Callable[[Instance, Path], None]
"""Makes a task's stripped tree at the given path (a clone, or a copy out of its image)."""


class SandboxRefused(BadInput):
    """The task cannot run in the process sandbox (it needs its image)."""


@dataclass(frozen=True)
class SandboxRun:
    """What the process sandbox observed around run.sh."""

    seconds: float
    network_isolated: bool
    error: str | None = None


def needs_image(instance: Instance) -> str | None:
    """Why this task needs its SWE-bench image, or None if it runs in any checkout."""
    found = [m for m in _IMAGE_ONLY_MARKERS if m in instance.eval_script]
    if not found:
        return None
    return (
        f"instance {instance.instance_id} needs its image {instance.image} (its eval script "
        f"uses {', '.join(found)}); the process sandbox runs only portable tasks such as the "
        f"bundled demo dataset. Run it in Docker (`proctor run --sandbox docker`) or on "
        f"Kubernetes (`proctor operator`), where each item runs in the task's own image."
    )


def repo_source(instance: Instance) -> str:
    """Where to clone the task's repository from.

    In order: a bundle shipped with Proctor (a bundled dataset's); a local mirror named
    by PROCTOR_REPO_MIRROR (folders, separated like PATH, holding `owner/name.bundle`,
    `owner/name.git` or `owner/name`), for machines without network; GitHub.
    """
    bundle = repo_bundle(instance.repo)
    if bundle:
        return str(bundle)
    for root in filter(None, os.environ.get("PROCTOR_REPO_MIRROR", "").split(os.pathsep)):
        for candidate in (f"{instance.repo}.bundle", f"{instance.repo}.git", instance.repo):
            if (Path(root) / candidate).exists():
                return str(Path(root) / candidate)
    return f"https://github.com/{instance.repo}.git"


def _git(*args: str, cwd: Path | None = None) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                   env=git_env())


def git_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tempfile.gettempdir(),
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "LANG": "C.UTF-8"}


def _clone_at_base(instance: Instance, dest: Path) -> None:
    """Clone the repository and strip it to base_commit: no refs, no later commits."""
    try:
        _git("clone", "-q", "--no-checkout", repo_source(instance), str(dest))
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"checkout of {instance.repo} at {instance.base_commit} failed: "
                           f"{exc.stderr.strip()[-500:]}") from exc
    strip_to_commit(dest, instance.base_commit)


def strip_to_commit(repo: Path, commit: str) -> None:
    """Check out `commit` and leave the repository nothing newer: no refs, remotes,
    reflog or unreachable objects (what an agent must not see)."""
    try:
        _git("-c", "advice.detachedHead=false", "checkout", "-q", "--detach", commit, cwd=repo)
        refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)"], cwd=repo,
                              check=True, capture_output=True, text=True, env=git_env())
        for ref in refs.stdout.split():
            _git("update-ref", "-d", ref, cwd=repo)
        remotes = subprocess.run(["git", "remote"], cwd=repo, check=True, capture_output=True,
                                 text=True, env=git_env())
        for remote in remotes.stdout.split():
            _git("remote", "remove", remote, cwd=repo)
        _git("reflog", "expire", "--expire=now", "--all", cwd=repo)
        _git("gc", "-q", "--prune=now", cwd=repo)
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"checkout of {commit} in {repo.name} failed: "
                           f"{exc.stderr.strip()[-500:]}") from exc


class CheckoutCache:
    """One stripped clone per (repository, base commit); every checkout is a copy of it.

    Cloning and stripping costs tens of milliseconds; copying a small tree a few. The
    copies are independent (no shared object store), so an agent or an eval script
    can do anything to its own without touching the next item's.
    """

    def __init__(self) -> None:
        self._root: Path | None = None
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._guard = threading.Lock()

    def _dir(self) -> Path:
        with self._guard:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="proctor-checkouts-"))
                atexit.register(shutil.rmtree, self._root, ignore_errors=True)
            return self._root

    def pristine(self, instance: Instance, build: Builder | None = None) -> Path:
        """The stripped tree of this task, made once by `build` (default: a clone)."""
        key = (instance.repo, instance.base_commit)
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        path = self._dir() / f"{instance.repo.replace('/', '__')}-{instance.base_commit}"
        with lock:
            if not path.exists():
                building = path.with_name(path.name + ".building")
                shutil.rmtree(building, ignore_errors=True)
                (build or _clone_at_base)(instance, building)
                building.rename(path)
        return path


_CACHE = CheckoutCache()


def checkout(instance: Instance, dest: Path, build: Builder | None = None) -> None:
    """A fresh checkout of the task's repository at base_commit, holding nothing newer
    (no branches, tags or later commits: what an agent gets as REPO_DIR).

    `build` makes the first copy when cloning is not the way (the Docker sandbox takes
    it from the image's /testbed)."""
    shutil.copytree(_CACHE.pristine(instance, build), dest, symlinks=True)


@functools.cache
def network_wrapper() -> tuple[str, ...]:
    """The command prefix that gives a child no network, or () where the kernel says no."""
    unshare = shutil.which("unshare")
    if not unshare:
        return ()
    for prefix in ((unshare, "--net"), (unshare, "--net", "--map-root-user")):
        probe = subprocess.run([*prefix, "true"], capture_output=True)
        if probe.returncode == 0:
            return prefix
    return ()


def clean_env(testbed: Path, home: Path) -> dict[str, str]:
    """The eval script's whole environment: nothing inherited but a minimal PATH."""
    # The interpreter running Proctor comes first, so `python -m pytest` finds pytest.
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin",
                            "/bin"])
    return {"PATH": path, "HOME": str(home), "TESTBED": str(testbed), "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0", "TERM": "dumb"}


class ProcessSandbox:
    """The process sandbox of one run: it runs each item's test step, and `stop_all`
    (Ctrl-C, a full disk) kills the steps it has running and refuses new ones.

    Each step runs in a session of its own (a terminal's Ctrl-C never reaches it), so
    the sandbox keeps the steps it started: stopping a run kills their sessions at once,
    rather than each step waking now and then to look whether the run is stopping."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._stopping = False

    def run_test_step(self, work: WorkDir, instance: Instance, time_limit: int) -> SandboxRun:
        """Check out the task, run run.sh against it, clean up; the logs stay in `work`.

        run.sh runs from a copy of the work folder's inputs beside the checkout, as its
        own user where Proctor runs as root (`testuser`); only the test step's outputs
        come back, and the eval script's output is its stdout, which this process writes
        to the log (as the Docker sandbox does). Once `stop_all` is called, it raises
        `Interrupted` (its processes killed), and so does a step started after that."""
        reason = needs_image(instance)
        if reason:
            raise SandboxRefused(reason)
        if self._stopping:
            raise Interrupted("the run is stopping")
        started = time.perf_counter()
        wrapper = network_wrapper()
        uid = testuser.next_uid() if testuser.available() is None else None
        with tempfile.TemporaryDirectory(prefix="proctor-testbed-") as tmp:
            root = Path(tmp)
            testbed, home, inner = root / "repo", root / "home", root / "work"
            for folder in (home, inner, root / "tmp", root / "stage"):
                folder.mkdir()
            try:
                checkout(instance, testbed)
            except RuntimeError as exc:
                return _broke(work, started, wrapper, str(exc))
            for name in TEST_STEP_INPUTS:
                if (work / name).exists():
                    shutil.copyfile(work / name, inner / name)
            if uid is not None:  # the user may pass through root's folder, not list it
                root.chmod(0o711)
                for folder in (testbed, home, inner, root / "tmp"):
                    testuser.hand_over(folder, uid)
            env = {**clean_env(testbed, home), "TMPDIR": str(root / "tmp"),
                   "PROCTOR_TEST_LOG": "/dev/stdout"}
            argv = [*wrapper,
                    *(testuser.enter(uid, root / "stage") if uid is not None else ()),
                    "bash", str(inner / "run.sh")]
            try:
                error = self._run_script(work, argv, env, time_limit + GRACE_SECONDS,
                                         own_user=uid is not None)
            finally:
                if uid is not None:
                    testuser.kill_user(uid)
            bring_back(inner, work)
        stdout = work / "stdout.part"
        if (work / "eval_exit").exists():  # the eval script ran: its output is the log
            stdout.replace(work / "test_output.txt")
        else:
            stdout.unlink(missing_ok=True)
        if error:
            return _broke(work, started, wrapper, error)
        return SandboxRun(time.perf_counter() - started, bool(wrapper))

    def checkout(self, instance: Instance, dest: Path) -> None:
        checkout(instance, dest)

    def stop_all(self) -> None:
        """Kill every test step still running (each one's whole session; what a step
        running as its own user moved elsewhere, `run_test_step` kills by its uid) and
        start no new one."""
        with self._lock:
            self._stopping = True
            running = list(self._running)
        for proc in running:
            _kill(proc)

    def _start(self, argv: list[str], env: dict[str, str], log: IO[bytes]
               ) -> subprocess.Popen[bytes]:
        """Start the test step in its own session, known to `stop_all` from the start:
        under the lock, so that none starts once the run is stopping."""
        with self._lock:
            if self._stopping:
                raise Interrupted("the run is stopping")
            proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=log,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            self._running.add(proc)
        return proc

    def _run_script(self, work: WorkDir, argv: list[str], env: dict[str, str], limit: int,
                    own_user: bool = False) -> str | None:
        """Run the test step, its stdout into work/stdout.part through a pipe (nothing
        the step runs can rewrite what it printed before); the error text if it broke."""
        with open(work / "run.log", "wb") as log:
            proc = self._start(argv, env, log)
            assert proc.stdout is not None
            drain = threading.Thread(target=_drain, args=(proc.stdout, work / "stdout.part"),
                                     daemon=True)
            drain.start()
            try:
                try:
                    code: int | None = proc.wait(timeout=limit)
                except subprocess.TimeoutExpired:
                    code = None
                if self._stopping:  # stop_all killed it (or would have): not its result
                    raise Interrupted("the test step was stopped")
                if code is None:
                    _kill(proc)
                    return f"the test step did not finish within {limit} s"
            finally:
                with self._lock:
                    self._running.discard(proc)
                if not own_user:  # what it left running in its session (else: kill_user)
                    _kill(proc)
                drain.join(timeout=2)
        if code != 0:
            tail = (work / "run.log").read_text(errors="replace")[-500:].strip()
            return f"the test step exited {code}: {tail}"
        return None


def _drain(pipe: IO[bytes], path: Path) -> None:
    with open(path, "wb") as out, contextlib.suppress(OSError, ValueError):
        shutil.copyfileobj(pipe, out, 65536)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill every process of the test step: its whole session, not only its process
    group, since run.sh gives the eval script and its watchdog groups of their own."""
    for _ in range(5):  # a process may fork while we look
        others = [pid for pid in _session_members(proc.pid) if pid != proc.pid]
        # Popen's own kill: a no-op once the step was reaped, when its pid may be anyone's
        # (the session's other members keep their ids: the session holds them).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            proc.kill()
        for pid in others:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if not others:
            break
    proc.wait()


def _session_members(sid: int) -> list[int]:
    """The live processes of session `sid` (from /proc; [] where there is none)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # it ended while we looked
        if len(fields) > 3 and fields[3] == str(sid) and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def _broke(work: WorkDir, started: float, wrapper: tuple[str, ...], error: str) -> SandboxRun:
    (work / "sandbox_error").write_text(error + "\n")
    return SandboxRun(time.perf_counter() - started, bool(wrapper), error)
