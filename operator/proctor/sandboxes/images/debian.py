"""Debian root filesystems as Docker base images, built offline (mmdebstrap + docker import).

No registry is needed: mmdebstrap takes Debian's packages from the configured mirror (or
a proxy of it), and `docker import` turns the tarball into an image. The demo images and
the SWE-bench images both start from one of these; each is built once and kept.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from proctor.core.exits import BadInput

if TYPE_CHECKING:  # the SDK is imported where it is used (Docker is optional)
    from docker import DockerClient

# Docker's architecture names are Debian's for the two that matter here.
_MACHINE_TO_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


class ImageBuildError(BadInput):
    """An image could not be built; the message says why."""


@dataclass(frozen=True)
class Rootfs:
    """A Debian root filesystem to import as `image`."""

    image: str
    suite: str
    packages: tuple[str, ...]
    changes: tuple[str, ...] = ()
    """Dockerfile instructions applied on import (ENV, WORKDIR, ...)."""
    arch: str = ""
    """Debian architecture; empty: this machine's."""
    hooks: tuple[str, ...] = ()
    """mmdebstrap customize hooks (shell run on the host, the root filesystem in "$1")."""


def native_arch() -> str:
    """This machine's architecture, as Debian and Docker name it."""
    machine = platform.machine().lower()
    return _MACHINE_TO_ARCH.get(machine, machine)


def exists(client: DockerClient, image: str) -> bool:
    import docker

    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False


def mmdebstrap_command(rootfs: Rootfs, tarball: Path) -> list[str]:
    """The command that writes `rootfs` as a tarball (pure)."""
    command = ["mmdebstrap", "--quiet", "--variant=minbase",
               f"--include={','.join(rootfs.packages)}"]
    if rootfs.arch:
        command.append(f"--architectures={rootfs.arch}")
    command += [f"--customize-hook={hook}" for hook in rootfs.hooks]
    return [*command, rootfs.suite, str(tarball)]


def build_rootfs(client: DockerClient, rootfs: Rootfs, force: bool = False,
                 log: Callable[[str], None] = print) -> bool:
    """Import `rootfs` as its image; False when that image was already there."""
    if not force and exists(client, rootfs.image):
        return False
    if not shutil.which("mmdebstrap"):
        raise ImageBuildError(f"building {rootfs.image} needs mmdebstrap "
                              "(`apt-get install mmdebstrap`)")
    log(f"Building {rootfs.image} with mmdebstrap (Debian {rootfs.suite}, about a minute) ...")
    with tempfile.TemporaryDirectory(prefix="proctor-rootfs-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        done = subprocess.run(mmdebstrap_command(rootfs, tarball), capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise ImageBuildError(f"mmdebstrap {rootfs.suite} failed: "
                                  f"{_last_lines(done.stderr)}")
        repository, _, tag = rootfs.image.partition(":")
        client.api.import_image(src=str(tarball), repository=repository, tag=tag or "latest",
                                changes=list(rootfs.changes))
    return True


def _last_lines(text: str, count: int = 3) -> str:
    lines: Sequence[str] = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:])[-500:]
