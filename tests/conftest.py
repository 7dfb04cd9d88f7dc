"""Fixtures shared by every folder of tests: small real git repositories and tasks on them,
the Docker daemon with the demo images, and the session's real cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Before any test module imports them (conftest is read first), so that the asserts of the
# shared helpers say what they compared, as a test's own do.
pytest.register_assert_rewrite("support")

from proctor.core.model import Instance  # noqa: E402
from support import real_cluster  # noqa: E402
from support.calc_task import make_calc_repo, make_instance  # noqa: E402
from support.docker_daemon import demo_docker_client  # noqa: E402

# The test modules over 30 s, named at the end.
pytest_plugins = ["support.suite_plan"]


@pytest.fixture
def mirror(tmp_path, monkeypatch) -> Path:
    """A folder of local repositories that the sandbox clones from (no network)."""
    root = tmp_path / "mirror"
    root.mkdir()
    monkeypatch.setenv("PROCTOR_REPO_MIRROR", str(root))
    return root


@pytest.fixture
def calc_task(mirror) -> Instance:
    """A real task: `add` subtracts; test_add fails before the fix, test_sub passes."""
    return make_instance(make_calc_repo(mirror / "acme" / "calc"))


@pytest.fixture(scope="module")
def docker_client() -> Any:
    """A Docker client whose daemon holds the demo images (built once, then kept); without
    a daemon, a skip (a failure with PROCTOR_REQUIRE_DOCKER=1)."""
    return demo_docker_client()


@pytest.fixture(scope="session")
def cluster_kubeconfig() -> Iterator[Path]:
    """The real cluster's admin kubeconfig (tests/support/real_cluster.py): started for the
    session where it can run and not already running (then stopped at its end), else a skip."""
    yield from real_cluster.session()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any) -> Iterator[None]:
    """After failures, what the real cluster says now, where one runs
    (tests/support/real_cluster.py): many tests use it, and a sick node fails them all the
    same way. Printed last, after pytest's short summary, where a log's tail shows it."""
    result = yield
    if any(terminalreporter.stats.get(kind) for kind in ("failed", "error")):
        said = real_cluster.diagnosis()
        if said is not None:
            terminalreporter.section("the real cluster after the failures")
            terminalreporter.write_line(said)
    return result
