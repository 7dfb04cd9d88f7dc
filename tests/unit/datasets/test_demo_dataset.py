"""The bundled demo dataset is true.

For every task the repository is cloned from its shipped bundle and its eval
script is run for real: the row's ``eval_script`` as it is on the untouched
base commit, and the form swebench's harness runs (``TestSpec.eval_script``,
which also records the test command's exit status) with the gold patch
applied.  swebench's parser and grader read the logs.  The gold patch must
resolve the task fully and the base commit must not.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE
from swebench.harness.constants import TestStatus as Status
from swebench.harness.grading import get_eval_report, get_logs_eval
from swebench.harness.log_parsers import PARSER_REGISTRY
from swebench.harness.utils import make_test_spec
from swebench.types import SWEbenchInstance

from proctor.datasets import demo
from proctor.datasets.demo import build as demo_build
from support.paths import ROOT

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

REQUIRED_KEYS = set(SWEbenchInstance.__annotations__) | {
    "difficulty",
    "eval_script",
    "log_parser",
    "eval_type",
    "image",
}
TEST_ID = re.compile(r"^tests/[\w/]+\.py::\w+(\[[^\s\]]+\])?$")
_DIFF_PATHS = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.MULTILINE)

ROWS = demo.load_rows()
ROW_IDS = [row["instance_id"] for row in ROWS]


def _tests(row: dict, key: str) -> list[str]:
    return json.loads(row[key])


def _patch_paths(patch: str) -> set[str]:
    paths = set()
    for old, new in _DIFF_PATHS.findall(patch):
        paths.update((old, new))
    return paths


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "advice.detachedHead=false", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=True,
    ).stdout


def _eval_env(testbed: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "GIT_")) and key != "PYTHONPATH"
    }
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["TESTBED"] = str(testbed)
    return env


@dataclass
class EvalRun:
    log: str
    log_path: Path
    status_before: str
    status_after: str


def _run_eval(row: dict, workdir: Path, gold: bool) -> EvalRun:
    """Clone the task's repository, optionally apply the gold patch, run its eval script."""
    testbed = workdir / ("gold" if gold else "base")
    bundle = demo.bundle_path(row["repo"])
    assert bundle is not None, row["repo"]
    subprocess.run(
        ["git", "clone", "-q", str(bundle), str(testbed)], check=True, capture_output=True
    )
    _git(testbed, "checkout", "-q", row["base_commit"])
    if gold:
        patch_file = workdir / "gold.diff"
        patch_file.write_text(row["patch"], encoding="utf-8")
        _git(testbed, "apply", str(patch_file))
    status_before = _git(testbed, "status", "--porcelain")

    script = workdir / f"eval-{testbed.name}.sh"
    text = make_test_spec(row).eval_script if gold else row["eval_script"]
    script.write_text(text, encoding="utf-8")
    proc = subprocess.run(
        ["bash", str(script)],
        cwd=workdir,
        env=_eval_env(testbed),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=120,
        check=False,
    )
    log = proc.stdout.decode("utf-8", errors="replace")
    log_path = workdir / f"{testbed.name}.log"
    log_path.write_text(log, encoding="utf-8")
    return EvalRun(log, log_path, status_before, _git(testbed, "status", "--porcelain"))


@pytest.fixture(scope="module")
def eval_runs(request, tmp_path_factory) -> dict[tuple[str, bool], EvalRun]:
    """Run the selected tasks' eval scripts, with and without the gold patch, in parallel."""
    selected = {
        item.callspec.params["row"]["instance_id"]
        for item in request.session.items
        if "eval_runs" in getattr(item, "fixturenames", ())
        and "row" in getattr(getattr(item, "callspec", None), "params", {})
    }
    root = tmp_path_factory.mktemp("demo-evals")
    jobs = []
    for row in ROWS:
        if row["instance_id"] not in selected:
            continue
        workdir = root / row["instance_id"]
        workdir.mkdir()
        jobs.extend((row, workdir, gold) for gold in (False, True))
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(lambda job: _run_eval(*job), jobs))
    return {(row["instance_id"], gold): run for (row, _, gold), run in zip(jobs, runs, strict=True)}


def _status_map(row: dict, run: EvalRun) -> dict[str, str]:
    """Parse the log between the markers with the parser the row names."""
    assert START_TEST_OUTPUT in run.log and END_TEST_OUTPUT in run.log, run.log
    section = run.log.split(START_TEST_OUTPUT)[1].split(END_TEST_OUTPUT)[0]
    parser = PARSER_REGISTRY[row["log_parser"]]
    status = parser(section, make_test_spec(row))
    assert status, run.log
    # swebench's own log reader must agree with the direct parse.
    graded, found = get_logs_eval(make_test_spec(row), str(run.log_path))
    assert found, run.log
    assert graded == status
    return status


def _report(row: dict, run: EvalRun) -> dict:
    prediction = {"instance_id": row["instance_id"], "model_patch": row["patch"]}
    report = get_eval_report(make_test_spec(row), prediction, str(run.log_path), True)
    return report[row["instance_id"]]


# ---------------------------------------------------------------------------
# Static properties of the dataset


def test_dataset_size_and_shape():
    assert demo.DATASET_NAME == "proctor-demo"
    assert demo.dataset_path().is_file()
    assert len(ROWS) >= 8
    assert len({row["repo"] for row in ROWS}) >= 2
    assert len(set(ROW_IDS)) == len(ROW_IDS)
    assert sum(len(_tests(row, "FAIL_TO_PASS")) >= 2 for row in ROWS) >= 3


def test_bundle_path():
    for repo in {row["repo"] for row in ROWS}:
        path = demo.bundle_path(repo)
        assert path is not None and path.is_file()
        assert path.stat().st_size < 64 * 1024
    assert demo.bundle_path("astropy/astropy") is None
    assert demo.bundle_path("proctor-demo/no-such-repo") is None
    assert demo.bundle_path("proctor-demo") is None


@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_row_is_swebench5(row):
    assert set(row) >= REQUIRED_KEYS
    assert all(isinstance(value, str) for value in row.values())
    assert row["instance_id"].startswith("proctor-demo__")
    assert row["repo"].startswith("proctor-demo/")
    assert re.fullmatch(r"[0-9a-f]{40}", row["base_commit"])
    assert row["environment_setup_commit"] == row["base_commit"]
    assert row["log_parser"] in PARSER_REGISTRY
    assert row["eval_type"] == "pass_and_fail"
    assert row["problem_statement"].strip() and row["version"] and row["image"]

    f2p, p2p = _tests(row, "FAIL_TO_PASS"), _tests(row, "PASS_TO_PASS")
    assert f2p and p2p
    assert not set(f2p) & set(p2p)
    assert len(set(f2p + p2p)) == len(f2p + p2p)
    assert all(TEST_ID.match(test) for test in f2p + p2p), f2p + p2p

    spec = make_test_spec(row)  # swebench accepts the row as it is
    assert (f2p, p2p) == (spec.FAIL_TO_PASS, spec.PASS_TO_PASS)


@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_patches_touch_the_right_files(row):
    gold_paths = _patch_paths(row["patch"])
    test_paths = _patch_paths(row["test_patch"])
    assert gold_paths and test_paths
    assert not any(path.startswith("tests/") for path in gold_paths)
    assert all(path.startswith("tests/") for path in test_paths)
    # The eval script runs exactly the test files that the test patch touches.
    for path in test_paths:
        assert path in row["eval_script"]
    for test in _tests(row, "FAIL_TO_PASS") + _tests(row, "PASS_TO_PASS"):
        assert test.split("::")[0] in test_paths


@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_eval_script_is_portable(row):
    script = row["eval_script"]
    assert script.startswith("#!/bin/bash\nset -uxo pipefail\n")
    assert 'cd "$TESTBED"' in script
    assert "/testbed" not in script and "conda" not in script
    assert f": '{START_TEST_OUTPUT}'" in script and f": '{END_TEST_OUTPUT}'" in script
    assert "python -m pytest -rA" in script
    assert row["test_patch"].rstrip("\n") in script


def test_rebuild_reproduces_shipped_data(tmp_path):
    # From the source tree: the installed package carries the data, not the sources.
    sources = (ROOT / "operator" / "proctor" / "datasets" / "demo"
               / "repos")
    rows = demo_build.build(tmp_path, sources)
    assert [row["base_commit"] for row in rows] == [row["base_commit"] for row in ROWS]
    shipped = demo.dataset_path()
    assert (tmp_path / shipped.name).read_bytes() == shipped.read_bytes()
    for repo in sorted({row["repo"] for row in ROWS}):
        bundle = demo.bundle_path(repo)
        assert demo_build.bundle_heads(tmp_path / bundle.name) == demo_build.bundle_heads(bundle)


# ---------------------------------------------------------------------------
# Real runs of every eval script


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_gold_patch_resolves_task(row, eval_runs):
    run = eval_runs[row["instance_id"], True]
    status = _status_map(row, run)
    for test in _tests(row, "FAIL_TO_PASS") + _tests(row, "PASS_TO_PASS"):
        assert status.get(test) == Status.PASSED.value, (test, run.log)
    assert f"{TEST_EXIT_CODE}: 0" in run.log
    assert _report(row, run)["resolved"] is True
    # The eval script leaves only the gold patch's own changes behind.
    assert run.status_before.strip()
    assert run.status_after == run.status_before


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_base_commit_fails_task(row, eval_runs):
    run = eval_runs[row["instance_id"], False]
    status = _status_map(row, run)
    for test in _tests(row, "FAIL_TO_PASS"):
        assert status.get(test) in (None, Status.FAILED.value, Status.ERROR.value), (
            test,
            run.log,
        )
    for test in _tests(row, "PASS_TO_PASS"):
        assert status.get(test) == Status.PASSED.value, (test, run.log)
    report = _report(row, run)
    assert report["resolved"] is False
    assert not report["tests_status"]["FAIL_TO_PASS"]["success"]
    assert run.status_before == run.status_after == ""
