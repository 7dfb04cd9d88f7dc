"""Real SWE-bench Verified rows, end to end: images built from the shared data's git bundles
(`proctor images build`), gold and empty predictions through `proctor eval --sandbox
docker`, and swebench 5.0.2's harness on the same images, item by item.

Docker tests: skipped without a daemon unless PROCTOR_REQUIRE_DOCKER=1 (CI), which makes
that a failure. The images are kept once built (about 30 s each on a warm build cache,
1 to 2 minutes more for each Debian root filesystem the first time).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from proctor.datasets import hostile
from proctor.formats.harness_logs import results_dir
from proctor.sandboxes import docker as ds
from proctor.sandboxes.images.build import build_images
from support.calc_task import git
from support.docker_daemon import docker_unavailable
from support.paths import BENCHMARKS, SHARED_DATA, shared

sys.path.insert(0, str(BENCHMARKS))
import real_rows

pytestmark = [pytest.mark.docker, pytest.mark.slow]
DATA = shared(SHARED_DATA / "swebench-verified")  # every test runs real rows
PARQUET = DATA / "SWE-bench_Verified_test.parquet"
REPOS = DATA / "repos"


@pytest.fixture(scope="module")
def client():
    found, problem = ds.connect()
    if found is None:
        docker_unavailable(problem)
    if not shutil.which("mmdebstrap"):
        docker_unavailable("mmdebstrap is missing, so no image can be built")
    return found


@pytest.fixture(scope="module")
def subset(client):
    """The subset's rows, their images built (or kept) from the bundles."""
    instances = real_rows.rows(PARQUET, real_rows.SUBSET)
    results = build_images(client, instances, source=REPOS,
                           log=lambda line: print(line, file=sys.stderr))
    failed = [r.error for r in results if r.status == "failed"]
    assert failed == []
    for r in results:
        assert r.size_bytes and r.size_bytes < 1e9, r  # a Debian base is ~250 MB
    return instances


def test_gold_resolves_empty_does_not_and_swebenchs_harness_agrees(subset, tmp_path):
    ids = [i.instance_id for i in subset]
    for source in ("gold", "empty"):
        real_rows.run_proctor(PARQUET, subset, source, tmp_path / "proctor" / source, 2, 600)
        real_rows.run_harness(subset, source, tmp_path / "harness" / source, 2, 600)
    ours = {s: real_rows.reports(tmp_path / "proctor" / s, s) for s in ("gold", "empty")}
    theirs = {s: real_rows.reports(tmp_path / "harness" / s, s) for s in ("gold", "empty")}
    expected_gold = [iid for iid in ids if iid not in real_rows.UNRESOLVED_HERE]
    assert sorted(i for i, e in ours["gold"].items() if e["resolved"]) == sorted(expected_gold)
    assert sorted(ours["empty"]) == sorted(ids)
    assert not any(e["resolved"] for e in ours["empty"].values())
    for source in ("gold", "empty"):
        assert sorted(theirs[source]) == sorted(ids), source
        for iid in ids:
            assert real_rows.verdict(ours[source][iid]) == real_rows.verdict(
                theirs[source][iid]), (source, iid)


def test_a_dependency_pypi_does_not_serve_fails_in_one_line_naming_row_and_package(
        client, tmp_path):
    """A flask 2.0 row (Python 3.9 in swebench's specs) whose requirements pin a numpy that
    needs Python 3.10: PyPI itself says no."""
    repo = tmp_path / "flask"
    (repo / "requirements").mkdir(parents=True)
    (repo / "requirements" / "dev.txt").write_text("numpy==2.1.0\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "requirements")
    row = json.loads(json.dumps(real_rows.rows(PARQUET, ("pallets__flask-5014",))[0]
                                .swebench_row()))
    row |= {"instance_id": "pallets__flask-4000", "version": "2.0",
            "base_commit": git(repo, "rev-parse", "HEAD"), "environment_setup_commit": "",
            "image": "proctor-test/no-such-dependency:1"}
    (tmp_path / "rows.json").write_text(json.dumps([row]))
    done = subprocess.run([sys.executable, "-m", "proctor.cli.main", "images", "build", "-d",
                           str(tmp_path / "rows.json"), "--source", str(repo)],
                          capture_output=True, text=True)
    assert done.returncode == 1, done.stdout + done.stderr
    line = "pallets__flask-4000: PyPI serves no numpy==2.1.0 for Python 3.9"
    assert f"Failed {line}\n" in done.stdout and done.stdout.count(line) == 2
    assert not client.images.list(name="proctor-test/no-such-dependency")


def test_hostile_patches_get_no_credit_on_a_real_row_and_are_named(subset, tmp_path):
    """One patch that stacks attacks of four classes on pytest-dev__pytest-7571: a root
    conftest.py rewriting every report to passed, a conftest beside the tests marking them
    xfail, pytest's pyproject section loading a plugin of the patch's, and setup.py code
    that, when the eval script's `pip install -e .` runs it (the host's network lets pip
    reach PyPI), writes a conftest.py into the repository and a .pth plus a plugin into
    site-packages. Each alone is credited when its defence is missing
    (benchmarks/integrity.py --real shows the harness crediting them); here none is, and
    every class is named."""
    instance = next(i for i in subset if i.instance_id == "pytest-dev__pytest-7571")
    read = real_rows.bundle_reader(REPOS, tmp_path / "repos")(instance)
    by_name = {h.name: h for h in hostile.SUITE}
    patch = "".join(by_name[n].build(instance, read) for n in (
        "conftest-makereport", "conftest-xfail-in-tests", "pyproject-ini-options")) + \
        hostile.put("setup.py", hostile.AT_BUILD_CONFTEST + hostile.AT_BUILD_SITE_PTH, read)
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"instance_id": instance.instance_id, "model_patch": patch,
                                 "model_name_or_path": "hostile"}) + "\n")
    real_rows.run_proctor(PARQUET, [instance], str(preds), tmp_path / "proctor", 1, 600,
                          network="host")
    result = json.loads((results_dir(tmp_path / "proctor", "real") / "results.jsonl").read_text())
    assert result["outcome"] not in hostile.CREDITED, result
    named = {(t["kind"], t["path"].rsplit("/", 1)[-1]) for t in result["tampering"]}
    assert {("hook", "conftest.py"), ("config", "pyproject.toml"), ("build", "conftest.py"),
            ("build", "proctor-evil.pth")} <= named, named
