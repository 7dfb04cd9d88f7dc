"""Images of the demo dataset, built offline: `proctor images build-demo`.

One base image from Debian's packages (mmdebstrap: python3, pytest, git, patch, bash),
imported with TESTBED, PATH and LANG set; then, for each image the demo rows name, an
image `FROM` that base with the repository at the row's base commit `COPY`ed to
/testbed (history stripped to that commit, as an agent's checkout is). No registry is
needed. Images that exist are kept (build once, reuse), unless `force`.

They let the demo run in the Docker sandbox, let the tests use the real thing, and can
be loaded into kind (`kind load docker-image proctor/demo-datekit:0.4`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from proctor.core.model import Instance
from proctor.datasets import demo
from proctor.sandboxes import process
from proctor.sandboxes.images.debian import ImageBuildError, Rootfs, build_rootfs, exists

if TYPE_CHECKING:  # the SDK is imported where it is used (Docker is optional)
    from docker import DockerClient

BASE_IMAGE = "proctor/demo-base:bookworm"
PACKAGES = ("python3", "python3-pytest", "python-is-python3", "git", "patch")
_BASE_CHANGES = ("ENV TESTBED=/testbed",
                 "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                 "ENV LANG=C.UTF-8", "WORKDIR /testbed")
_DOCKERFILE = f"FROM {BASE_IMAGE}\nCOPY testbed /testbed\nWORKDIR /testbed\n"


def build_base(client: DockerClient, force: bool = False,
               log: Callable[[str], None] = print) -> bool:
    """The base image from Debian's packages; False when it was already there."""
    return build_rootfs(client, Rootfs(BASE_IMAGE, "bookworm", PACKAGES, _BASE_CHANGES),
                        force, log)


def demo_tasks() -> dict[str, Instance]:
    """One demo row per image the dataset names (rows naming one image share its commit)."""
    tasks: dict[str, Instance] = {}
    for row in demo.load_rows():
        tasks.setdefault(row["image"], Instance.model_validate(row))
    return tasks


def build_demo_images(client: DockerClient, force: bool = False,
                      log: Callable[[str], None] = print) -> list[str]:
    """Build the base and every demo image that is missing; the images built."""
    built = [BASE_IMAGE] if build_base(client, force, log) else []
    for image, instance in demo_tasks().items():
        # A new base makes every image on the old one stale.
        if not force and not built and exists(client, image):
            continue
        with tempfile.TemporaryDirectory(prefix="proctor-image-") as tmp:
            process.checkout(instance, Path(tmp) / "testbed")
            (Path(tmp) / "Dockerfile").write_text(_DOCKERFILE)
            try:
                client.images.build(path=tmp, tag=image, rm=True, forcerm=True)
            except Exception as exc:  # the daemon's words name the cause
                raise ImageBuildError(f"building {image} failed: {exc}") from exc
        log(f"Built {image} ({instance.repo} at {instance.base_commit[:12]})")
        built.append(image)
    return built
