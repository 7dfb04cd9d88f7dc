"""Shared fixtures: small real git repositories and tasks on them."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from proctor.core.model import Instance, WorkItem
from proctor.runner.workdir import WorkDir, write_patch, write_task, write_test_step

# Before any test module imports them (conftest is read first), so that their asserts say
# what they compared, as a test's own do.
pytest.register_assert_rewrite("real_cluster", "real_cluster_fixtures")

import real_cluster  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
VERIFIED_PARQUET = SHARED_DATA / "swebench-verified" / "SWE-bench_Verified_test.parquet"

SOURCE = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
TESTS = ("from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 2) == 4\n\n\n"
         "def test_sub():\n    assert sub(3, 1) == 2\n")
GOLD = """diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,5 +1,5 @@
 def add(a, b):
-    return a - b
+    return a + b


 def sub(a, b):
"""

EVAL = """#!/bin/bash
set -uxo pipefail
cd "$TESTBED"
{pre}
: '>>>>> Start Test Output'
python -m pytest -rA -p no:cacheprovider test_calc.py
: '>>>>> End Test Output'
"""


def docker_unavailable(why: str) -> None:
    """Skip a Docker test, or fail it where Docker must be there (PROCTOR_REQUIRE_DOCKER=1)."""
    if os.environ.get("PROCTOR_REQUIRE_DOCKER") == "1":
        pytest.fail(f"PROCTOR_REQUIRE_DOCKER=1 but {why}")
    pytest.skip(why)


def shared(path: Path) -> Path:
    """``path`` (under SHARED_DATA), or a skip naming it where it is absent: a fresh clone
    has no ../shared. Called at a module's top level the skip covers the module; in a test
    or fixture, only what uses it."""
    if not path.exists():
        pytest.skip(f"shared data missing: {path}", allow_module_level=True)
    return path


def git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                           text=True).stdout.strip()


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
    repo = mirror / "acme" / "calc"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "calc.py").write_text(SOURCE)
    (repo / "test_calc.py").write_text(TESTS)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "calc")
    return make_instance(git(repo, "rev-parse", "HEAD"))


def make_instance(base: str, pre: str = "", **fields) -> Instance:
    row = dict(instance_id="acme__calc-1", repo="acme/calc", base_commit=base,
               problem_statement="add() subtracts", patch=GOLD, test_patch="",
               FAIL_TO_PASS=json.dumps(["test_calc.py::test_add"]),
               PASS_TO_PASS=json.dumps(["test_calc.py::test_sub"]), version="1.0",
               image="acme/calc:1", eval_script=EVAL.format(pre=pre),
               log_parser="parse_log_pytest", eval_type="pass_and_fail")
    row.update(fields)
    return Instance.model_validate(row)


def prepare_work(tmp_path: Path, instance: Instance, patch: str, time_limit: int = 60,
                 without_patch: bool = False) -> WorkDir:
    work = WorkDir(tmp_path / "work" / instance.instance_id)
    item = WorkItem(id="0" * 32, instance_id=instance.instance_id)
    write_task(work, instance, item)
    write_patch(work, patch)
    write_test_step(work, instance, time_limit, test_without_patch=without_patch)
    return work


def task_files(job: Mapping[str, Any], configmaps: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """What /task holds in the pod of ``job``: path -> text, as a kubelet projects it from
    the ConfigMaps given and the pod template's annotations (written apart from the
    manifests, from Kubernetes' projected volumes; on the real cluster of
    tests/test_operator.py the runner steps read what a kubelet projects)."""
    by_name = {cm["metadata"]["name"]: cm.get("data", {}) for cm in configmaps}
    template = job["spec"]["template"]
    annotations = template["metadata"].get("annotations", {})
    (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == "task"]
    files: dict[str, str] = {}
    for source in volume["projected"]["sources"]:
        if "configMap" in source:
            data = by_name[source["configMap"]["name"]]
            files |= {entry["path"]: data[entry["key"]] for entry in source["configMap"]["items"]}
        for entry in source.get("downwardAPI", {}).get("items", []):
            key = re.fullmatch(r"metadata\.annotations\['(.+)'\]", entry["fieldRef"]["fieldPath"])
            assert key is not None
            files[entry["path"]] = annotations[key.group(1)]
    return files


@pytest.fixture(scope="session")
def cluster_kubeconfig() -> Iterator[Path]:
    """The real cluster's admin kubeconfig (tests/real_cluster.py): started for the session
    where it can run and not already running (then stopped at its end), else a skip."""
    yield from real_cluster.session()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any) -> Iterator[None]:
    """After failures, what the real cluster says now, where one runs (tests/real_cluster.py):
    many tests use it, and a sick node fails them all the same way. Printed last, after
    pytest's short summary, where a log's tail shows it."""
    result = yield
    if any(terminalreporter.stats.get(kind) for kind in ("failed", "error")):
        said = real_cluster.diagnosis()
        if said is not None:
            terminalreporter.section("the real cluster after the failures")
            terminalreporter.write_line(said)
    return result
