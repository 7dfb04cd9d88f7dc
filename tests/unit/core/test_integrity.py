"""Verdicts that cannot be gamed: the screening policy against the 500 Verified gold
patches, and the hostile suite (proctor.datasets.hostile) through `proctor eval` on
the demo dataset in the process and Docker sandboxes."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from proctor.cli.main import main
from proctor.core.integrity import Threat, protected_paths, screen_patch
from proctor.core.model import ErrorKind, Outcome, WorkItem
from proctor.datasets import demo, load, to_instance
from proctor.datasets.hostile import CREDITED, SUITE, edit_file, new_file, predictions_file
from proctor.formats.harness_logs import results_dir
from proctor.runner.grade import grade_work_dir
from proctor.runner.workdir import WorkDir, write_patch, write_task, write_test_step
from proctor.sandboxes import process
from support.legacy_logs import DATA


@cache
def verified():
    return list(load(str(DATA / "SWE-bench_Verified_test.parquet"), max_rows=-1).by_id.values())


def test_no_verified_gold_patch_loses_a_hunk_and_every_test_patch_is_caught():
    rows = verified()
    assert len(rows) == 500
    kept_whole = [i for i in rows
                  if screen_patch(i.patch, protected_paths(
                      i.test_patch, [*i.FAIL_TO_PASS, *i.PASS_TO_PASS])).kept == i.patch
                  and not screen_patch(i.patch).findings]
    print(f"{len(kept_whole)}/500 Verified gold patches pass the policy untouched")
    assert len(kept_whole) == 500
    # The same rule bites: every test patch of the split would be undone.
    assert all(screen_patch(i.test_patch).findings for i in rows)


def test_pytests_own_source_is_the_library_but_its_tests_are_protected():
    gold = [i for i in verified() if i.repo == "pytest-dev/pytest"]
    assert gold and all("src/_pytest/" in i.patch for i in gold)
    hook = screen_patch("diff --git a/testing/conftest.py b/testing/conftest.py\n"
                        "--- a/testing/conftest.py\n+++ b/testing/conftest.py\n"
                        "@@ -1 +1,2 @@\n x = 1\n+y = 2\n")
    assert [(f.path, f.kind) for f in hook.findings] == [("testing/conftest.py", Threat.HOOK)]
    assert hook.kept == ""


def _cfg_patch(section: str) -> str:
    return ("diff --git a/setup.cfg b/setup.cfg\n--- a/setup.cfg\n+++ b/setup.cfg\n"
            f"@@ -1,3 +1,4 @@\n [{section}]\n a = 1\n+addopts = -p evil\n b = 2\n")


def test_a_config_hunk_is_dropped_only_in_pytests_sections_or_where_none_shows():
    assert not screen_patch(_cfg_patch("isort")).findings
    dropped = screen_patch(_cfg_patch("tool:pytest"))
    assert [f.kind for f in dropped.findings] == [Threat.CONFIG] and dropped.kept == ""
    blind = ("diff --git a/tox.ini b/tox.ini\n--- a/tox.ini\n+++ b/tox.ini\n"
             "@@ -40,2 +40,3 @@ x\n a = 1\n+addopts = -p evil\n b = 2\n")
    assert screen_patch(blind).findings[0].reason.endswith("a section the patch does not show)")


def _demo():
    return [to_instance(r, n) for n, r in enumerate(demo.load_rows())]


def test_a_log_that_ends_early_with_exit_0_is_an_error_naming_it(tmp_path):
    instance = _demo()[0]
    work = WorkDir(tmp_path / "w")
    write_task(work, instance, WorkItem(id="0" * 32, instance_id=instance.instance_id))
    write_patch(work, instance.patch)
    (work / "apply_method").write_text("git apply -v\n")
    forged = "".join(f"PASSED {t}\n" for t in [*instance.FAIL_TO_PASS, *instance.PASS_TO_PASS])
    (work / "test_output.txt").write_text(
        f": '>>>>> Start Test Output'\n{forged}: '>>>>> End Test Output'\n"
        ">>>>> Test Exit Code: 0\n")
    result = grade_work_dir(work)
    assert (result.outcome, result.error_kind) == (Outcome.ERROR, ErrorKind.SANDBOX)
    assert result.tampered and [t.kind for t in result.tampering] == [Threat.LOG.value]
    assert "early exit" in result.error_message


def _reader(root: Path):
    def read_for(instance):
        repo = root / instance.instance_id
        if not repo.exists():
            process.checkout(instance, repo)
        return lambda path: (repo / path).read_text() if (repo / path).is_file() else ""
    return read_for


def _run_suite(tmp_path: Path, sandbox: list[str]) -> None:
    tasks = [i for i in _demo() if i.instance_id in ("proctor-demo__datekit-1",
                                                     "proctor-demo__textkit-3")]
    read_for = _reader(tmp_path / "repos")
    for hostile in (h for h in SUITE if not h.needs_build_step):
        preds = tmp_path / f"{hostile.name}.jsonl"
        preds.write_text(predictions_file(hostile, tasks, read_for))
        out = tmp_path / hostile.name
        code = main(["eval", "-p", str(preds), "-d", "proctor-demo", "--output-dir", str(out),
                     "-q", *sandbox, *[a for t in tasks for a in ("-i", t.instance_id)]])
        results = [json.loads(x) for x in (results_dir(out, "run") / "results.jsonl")
                   .read_text().splitlines()]
        assert code in (0, 1) and len(results) == len(tasks), hostile.name
        for r in results:
            assert r["outcome"] not in CREDITED, (hostile.name, r)
            assert r["tampered"], (hostile.name, r)
            assert hostile.kind.value in {t["kind"] for t in r["tampering"]}, (hostile.name, r)
        summary = json.loads((results_dir(out, "run") / "summary.json").read_text())
        assert summary["tampered_pct"] == 1.0


@pytest.mark.slow
def test_no_hostile_patch_is_credited_in_the_process_sandbox(tmp_path):
    _run_suite(tmp_path, ["--sandbox", "process"])


@pytest.mark.slow
@pytest.mark.docker
def test_no_hostile_patch_is_credited_in_the_docker_sandbox(docker_client, tmp_path):
    _run_suite(tmp_path, ["--sandbox", "docker", "--pull", "never"])


@pytest.mark.slow
def test_the_conftest_hook_is_credited_when_nothing_screens_it(tmp_path):
    """The suite has teeth: the same hook, applied past the screening, earns resolved."""
    instance = next(i for i in _demo() if i.instance_id == "proctor-demo__datekit-1")
    hook = SUITE[0].build(instance, lambda path: "")
    work = WorkDir(tmp_path / "w")
    write_task(work, instance, WorkItem(id="0" * 32, instance_id=instance.instance_id))
    write_patch(work, hook)
    write_test_step(work, instance, 60)
    (work / "apply.diff").write_text(hook)  # what the test step would apply unscreened
    process.ProcessSandbox().run_test_step(work, instance, 60)
    assert grade_work_dir(work).outcome == Outcome.RESOLVED


def test_an_agents_own_new_test_file_is_set_aside_but_editing_a_test_is_tampering(tmp_path):
    """Honest agents add regression tests: a new test file is not applied (the task's own
    tests grade it) and not counted as tampering; an edit of an existing test file is."""
    instance = next(i for i in _demo() if i.instance_id == "proctor-demo__datekit-1")
    read = _reader(tmp_path / "repos")(instance)
    own_test = new_file("tests/test_my_regression.py", "def test_mine():\n    assert True\n")
    test_file = instance.FAIL_TO_PASS[0].split("::")[0]
    edit = edit_file(test_file, read(test_file), read(test_file) + "\n\ndef test_x():\n    pass\n")
    preds = tmp_path / "preds.jsonl"
    out = {}
    for name, patch in (("own-test", instance.patch + own_test),
                        ("edited-test", instance.patch + edit)):
        preds.write_text(json.dumps({"instance_id": instance.instance_id, "model_patch": patch,
                                     "model_name_or_path": name}) + "\n")
        assert main(["eval", "-p", str(preds), "-d", "proctor-demo", "-i", instance.instance_id,
                     "--output-dir", str(tmp_path / name), "-q", "--sandbox", "process"]) == 0
        out[name] = json.loads((results_dir(tmp_path / name, "run") / "results.jsonl").read_text())
    assert (out["own-test"]["outcome"], out["own-test"]["tampered"]) == ("resolved", False)
    assert out["own-test"]["set_aside"] == ["tests/test_my_regression.py"]
    assert (out["edited-test"]["outcome"], out["edited-test"]["tampered"]) == ("resolved", True)
    assert [(t["path"], t["kind"]) for t in out["edited-test"]["tampering"]] == [
        (test_file, "tests")]
    summary = json.loads((results_dir(tmp_path / "own-test", "run") / "summary.json").read_text())
    assert summary["tampered_pct"] == 0.0
