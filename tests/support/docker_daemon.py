"""The Docker daemon of the Docker tests: a skip where none answers, or a failure where one
must (PROCTOR_REQUIRE_DOCKER=1, as in CI)."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

import pytest


def docker_unavailable(why: str) -> None:
    """Skip a Docker test, or fail it where Docker must be there (PROCTOR_REQUIRE_DOCKER=1)."""
    if os.environ.get("PROCTOR_REQUIRE_DOCKER") == "1":
        pytest.fail(f"PROCTOR_REQUIRE_DOCKER=1 but {why}")
    pytest.skip(why)


def demo_docker_client() -> Any:
    """A client of the daemon, which holds the demo images (built once, then kept), or
    `docker_unavailable`."""
    from proctor.sandboxes import docker as ds
    from proctor.sandboxes.demo_images import build_demo_images

    found, problem = ds.connect()
    if found is None:
        docker_unavailable(problem)
    if not shutil.which("mmdebstrap") and not found.images.list(
            name="proctor/demo-base:bookworm"):
        docker_unavailable("mmdebstrap is missing, so the demo images cannot be built")
    build_demo_images(found, log=lambda line: print(line, file=sys.stderr))
    return found
