"""The process sandbox's test user: when Proctor runs as root, each item's test step runs
as a user of its own, so that the patch's code (the eval script, the tests, the build
step) can write its own checkout and temporary folder but not the work folder, the
results, Proctor or the rest of the machine.

Each item gets a fresh numeric uid (and gid of the same number) far above the ranges
that login users, system users, systemd's dynamic users and container sub-uid ranges
take; it has no passwd entry, so it owns nothing outside the item's temporary folder.
Privileges are dropped with util-linux's `setpriv` (no supplementary groups, no
capabilities, no_new_privs: a setuid binary cannot bring root back). When the test step
ends, every process of that uid is killed, whatever session it moved to, before its
outputs are read back.

The eval scripts run Proctor's own interpreter (its folder leads PATH). When that lies
under a folder other users cannot enter (a Python built in root's home, a virtual
environment there), the test step gets a mount namespace of its own in which each such
folder is covered by an empty, readable tmpfs holding only the interpreter's folders,
bound back in: the test user can run Python but sees nothing else of what the folder
held (nothing of the host changes).

Where Proctor does not run as root, or this does not work here (no setpriv or unshare),
the test step runs as the calling user, and the process sandbox is no boundary
(`available` says why).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

UID_BASE = 1_500_000_000
_NEXT = itertools.count()


def next_uid() -> int:
    """A uid no other item of any Proctor process on this machine uses at the same time."""
    return UID_BASE + (os.getpid() % 100_000) * 1_000 + next(_NEXT) % 1_000


def drop(uid: int) -> list[str]:
    """The command prefix that runs a command as `uid`, with nothing of root's left."""
    return [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}",
            "--clear-groups", "--no-new-privs", "--"]


def _closed(path: Path) -> Path | None:
    """The outermost folder on the way to `path` that other users cannot enter."""
    for folder in [*reversed(path.parents), path]:
        if folder.is_dir() and not folder.stat().st_mode & 0o001:
            return folder
    return None


def interpreter_folders() -> dict[Path, Path]:
    """The interpreter's folders (its installation, its virtual environment) that other
    users cannot reach, each with the closed folder above it."""
    found = {}
    for prefix in dict.fromkeys(Path(p).resolve() for p in (sys.base_prefix, sys.prefix)):
        closed = _closed(prefix)
        if closed is not None:
            found[prefix] = closed
    return found


def enter(uid: int, stage: Path) -> list[str]:
    """The command prefix that runs a command as `uid`, in a mount namespace where the
    interpreter's closed folders are reachable (`stage`: an empty folder of root's)."""
    folders = interpreter_folders()
    if not folders:
        return drop(uid)
    covers = sorted({c for c in folders.values()
                     if not any(o in c.parents for o in folders.values())})
    script = ["set -e", "mount --make-rprivate /"]
    for n, prefix in enumerate(folders):
        script += [f"mkdir -p {stage}/{n}", f"mount --bind '{prefix}' {stage}/{n}"]
    script += [f"mount -t tmpfs -o mode=0755 proctor-hidden '{c}'" for c in covers]
    for n, prefix in enumerate(folders):
        script += [f"mkdir -p '{prefix}'", f"mount --move {stage}/{n} '{prefix}'"]
    script.append('exec "$@"')
    return [shutil.which("unshare") or "unshare", "--mount", "sh", "-c", "\n".join(script),
            "sh", *drop(uid)]


def hand_over(root: Path, uid: int) -> None:
    """Give `root` and everything under it to `uid` (links themselves, not their targets)."""
    os.lchown(root, uid, uid)
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            os.lchown(os.path.join(folder, name), uid, uid)


@functools.cache
def available() -> str | None:
    """None when test steps run as their own user here; else why they do not."""
    if os.geteuid() != 0:
        return "Proctor does not run as root"
    if not shutil.which("setpriv"):
        return "setpriv (util-linux) is missing"
    if interpreter_folders() and not shutil.which("unshare"):
        return f"unshare (util-linux) is missing, and {sys.executable} lies in a closed folder"
    uid = next_uid()
    with tempfile.TemporaryDirectory(prefix="proctor-probe-") as tmp:
        stage, home = Path(tmp) / "stage", Path(tmp) / "home"
        stage.mkdir()
        home.mkdir()
        if any(c in home.parents for c in interpreter_folders().values()):
            return f"the temporary folder {tmp} lies in a folder other users cannot enter"
        Path(tmp).chmod(0o711)
        hand_over(home, uid)
        # As an eval script runs it: bash, finding python on PATH, in a folder of its own.
        probe = subprocess.run([*enter(uid, stage), "bash", "-c",
                                f"cd {home} && python -c 'import pytest'"],
                               cwd=home, capture_output=True, text=True,
                               env={"HOME": str(home), "PATH": f"{Path(sys.executable).parent}"
                                                               f"{os.pathsep}/usr/bin:/bin"})
    kill_user(uid)
    if probe.returncode != 0:
        return (f"a user other than root cannot run {sys.executable} with pytest here: "
                f"{probe.stderr.strip()[-200:]}")
    return None


def kill_user(uid: int) -> None:
    """Kill every process whose real uid is `uid` (none may outlive its test step)."""
    for _ in range(10):  # a process may fork while we look
        found = _processes_of(uid)
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if not found:
            return
        time.sleep(0.01)


def _processes_of(uid: int) -> list[int]:
    """The live processes whose real uid is `uid` (a zombie does nothing more; its parent
    reaps it). /proc/PID belongs to the process's user, or to root when it made itself
    non-dumpable: only those are read."""
    found = []
    for entry in os.scandir("/proc"):
        try:
            if not entry.name.isdigit() or entry.stat().st_uid not in (uid, 0):
                continue
            fields = dict(line.split(":", 1) for line in
                          Path(entry.path, "status").read_text().splitlines()
                          if line.startswith(("Uid:", "State:")))
        except (OSError, ValueError):
            continue  # it ended while we looked
        if fields.get("Uid", "").split()[:1] == [str(uid)] and \
                not fields.get("State", "").strip().startswith("Z"):
            found.append(int(entry.name))
    return found
