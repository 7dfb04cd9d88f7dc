"""The test step for real: checkout, apply chain, eval script under a limit, grade."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from proctor.core.model import ErrorKind, Outcome
from proctor.runner.grade import grade_work_dir
from proctor.sandboxes import process, testuser
from support.calc_task import GOLD, git, make_instance, prepare_work
from support.trust_support import processes_naming, wait_for


def run_and_grade(tmp_path, instance, patch, **kw):
    work = prepare_work(tmp_path, instance, patch, **kw)
    run = process.ProcessSandbox().run_test_step(work, instance, kw.get("time_limit", 60))
    return work, run, grade_work_dir(work)


def test_gold_patch_resolves(tmp_path, calc_task):
    work, run, result = run_and_grade(tmp_path, calc_task, GOLD)
    assert run.error is None
    assert result.outcome == Outcome.RESOLVED
    assert result.patch.apply_method == "git apply -v"
    assert result.FAIL_TO_PASS.success == ["test_calc.py::test_add"]
    assert result.PASS_TO_PASS.success == ["test_calc.py::test_sub"]
    # swebench's make_test_spec adds the recorded exit code after the end marker
    assert result.test_exit_code == 0
    assert ">>>>> Start Test Output" in work.read("test_output.txt")


def test_no_patch_is_no_op_and_runs_nothing(tmp_path, calc_task):
    work, _, result = run_and_grade(tmp_path, calc_task, "")
    assert result.outcome == Outcome.NO_OP and not result.patch.present
    assert work.read("test_output.txt") is None


def test_without_patch_the_tests_still_run_when_validating(tmp_path, calc_task):
    _, _, result = run_and_grade(tmp_path, calc_task, "", without_patch=True)
    assert result.outcome == Outcome.NO_OP and result.tests_ran
    assert result.FAIL_TO_PASS.failure == ["test_calc.py::test_add"]
    assert result.PASS_TO_PASS.success == ["test_calc.py::test_sub"]


def test_fuzzy_patch_falls_back_to_patch_command(tmp_path, calc_task):
    # Context lines that no longer match exactly: git apply refuses, patch --fuzz takes it.
    fuzzy = GOLD.replace(" def sub(a, b):", " def sub(x, y):")
    _, _, result = run_and_grade(tmp_path, calc_task, fuzzy)
    assert result.patch.apply_method == "patch --batch --fuzz=5 -p1 -i"
    assert result.outcome == Outcome.RESOLVED


def test_patch_that_does_not_apply_is_no_op_and_leaves_no_trace(tmp_path, calc_task):
    bad = GOLD.replace("-    return a - b", "-    return a * b").replace(
        " def add(a, b):", " def mul(a, b):").replace(" def sub(a, b):", " def div(a, b):")
    work, _, result = run_and_grade(tmp_path, calc_task, bad)
    assert result.outcome == Outcome.NO_OP and result.error_message == "patch did not apply"
    assert work.read("apply_method").strip() == "none"
    assert "Patch Apply Failed" in work.read("apply.log")


def test_breaking_patch_is_breaking_resolved(tmp_path, calc_task):
    breaking = ("diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n"
                "@@ -1,6 +1,6 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n \n \n"
                " def sub(a, b):\n-    return a - b\n+    return a + b\n")
    _, _, result = run_and_grade(tmp_path, calc_task, breaking)
    assert result.outcome == Outcome.BREAKING_RESOLVED, result.error_message
    assert result.PASS_TO_PASS.failure == ["test_calc.py::test_sub"]


def test_refused_patch_is_no_op_and_never_applied(tmp_path, calc_task):
    evil = ("diff --git a/../evil.py b/../evil.py\n--- /dev/null\n+++ b/../evil.py\n"
            "@@ -0,0 +1 @@\n+boom\n")
    work, _, result = run_and_grade(tmp_path, calc_task, evil)
    assert result.outcome == Outcome.NO_OP
    assert "outside the repository" in result.patch.refused
    assert work.read("patch.diff") is None
    assert not (tmp_path / "work" / "evil.py").exists()


def test_eval_script_past_its_limit_is_error_timeout(tmp_path, mirror):
    repo = mirror / "acme" / "calc"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "f").write_text("x\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "x")
    marker = tmp_path / "still-running"
    # The script's child sleeps (its command line names it), then would touch the marker:
    # unless its group is killed at the limit it is still there when the step returns.
    child = "sleep 41.3"
    instance = make_instance(git(repo, "rev-parse", "HEAD"),
                             pre=f"({child}; touch {marker}) & sleep 60")
    _work, _run, result = run_and_grade(tmp_path, instance, "", time_limit=1,
                                       without_patch=True)
    assert result.outcome == Outcome.ERROR and result.error_kind == ErrorKind.TIMEOUT
    wait_for(lambda: processes_naming(child) == [], "the eval script's child to be killed",
             timeout=10)
    assert not marker.exists(), "the eval script's children outlived the limit"


def test_log_without_markers_is_error_sandbox(tmp_path, calc_task):
    script = calc_task.eval_script.replace(": '>>>>> Start Test Output'\n", "")
    instance = calc_task.model_copy(update={"eval_script": script})
    _, _, result = run_and_grade(tmp_path, instance, GOLD)
    assert result.outcome == Outcome.ERROR and result.error_kind == ErrorKind.SANDBOX
    assert "markers" in result.error_message


def test_fake_passed_lines_with_a_failing_exit_code_are_not_trusted(tmp_path, calc_task):
    # A patch printing its own PASSED lines while the test command fails.
    script = calc_task.eval_script.replace(
        "python -m pytest -rA -p no:cacheprovider test_calc.py",
        "echo 'PASSED test_calc.py::test_add'; echo 'PASSED test_calc.py::test_sub'; false")
    instance = calc_task.model_copy(update={"eval_script": script})
    _, _, result = run_and_grade(tmp_path, instance, GOLD)
    assert result.outcome == Outcome.ERROR and result.error_kind == ErrorKind.SANDBOX


def test_skipped_f2p_counts_as_failed(tmp_path, calc_task):
    script = calc_task.eval_script.replace(
        "python -m pytest -rA -p no:cacheprovider test_calc.py",
        "python -m pytest -rA -p no:cacheprovider test_calc.py -k 'not test_add'; "
        "echo 'SKIPPED test_calc.py::test_add'")
    instance = calc_task.model_copy(update={"eval_script": script})
    _, _, result = run_and_grade(tmp_path, instance, GOLD)
    assert result.FAIL_TO_PASS.failure == ["test_calc.py::test_add"]
    assert result.outcome == Outcome.NO_OP


def test_shell_metacharacters_in_fields_cannot_run_commands(tmp_path, calc_task):
    canary = tmp_path / "pwned"
    hostile = f"test_calc.py::test_add; touch {canary}; $(touch {canary}) `touch {canary}`"
    instance = calc_task.model_copy(update={"FAIL_TO_PASS": [hostile],
                                            "problem_statement": f"$(touch {canary})",
                                            "version": f"1; touch {canary}"})
    _, _, result = run_and_grade(tmp_path, instance, GOLD)
    assert not canary.exists()
    assert result.FAIL_TO_PASS.failure == [hostile]


def test_instance_ids_with_shell_metacharacters_are_refused():
    with pytest.raises(ValueError, match="instance_id"):
        make_instance("a" * 40, instance_id="x; touch /tmp/pwned")


def test_the_eval_script_sees_no_secrets_and_no_network(tmp_path, calc_task, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    probe = (f"env; (exec 3<>/dev/tcp/127.0.0.1/{port}) && echo NET=yes || echo NET=no")
    instance = make_instance(calc_task.base_commit, pre=probe)
    work, run, _ = run_and_grade(tmp_path, instance, GOLD)
    server.close()
    log = work.read("test_output.txt")
    assert "TESTBED=" in log and "sk-secret" not in log
    if process.network_wrapper():
        assert run.network_isolated
        assert "\nNET=no\n" in log


@pytest.mark.skipif(testuser.available() is not None,
                    reason=f"test steps run as the calling user here: {testuser.available()}")
def test_as_root_the_eval_script_runs_as_its_own_user_and_writes_only_its_checkout(
        tmp_path, calc_task):
    """Where Proctor runs as root, the eval script (and the patch's code) cannot write the
    work folder, the log, Proctor's files or anything else outside its checkout, nor leave
    a process behind; its own checkout and temporary folder it can."""
    targets = [tmp_path / "work" / "acme__calc-1" / "eval_exit", tmp_path / "outside.txt",
               Path(process.__file__)]
    tries = "; ".join(f"(echo forged >> {t} && echo WROTE {t.name})" for t in targets)
    probe = (f"echo UID=$(id -u); {tries}; echo mine > $TESTBED/mine.txt && echo WROTE mine; "
             "echo tmp > $TMPDIR/x && echo WROTE tmp; (setsid sleep 3171 &) ; true")
    work, run, result = run_and_grade(tmp_path, make_instance(calc_task.base_commit,
                                                              pre=probe), GOLD)
    log = work.read("test_output.txt")
    assert run.error is None and result.outcome == Outcome.RESOLVED, log
    assert "UID=0" not in log and "UID=" in log
    assert "WROTE mine" in log and "WROTE tmp" in log
    assert not any(f"WROTE {t.name}" in log for t in targets), log
    assert "forged" not in work.read("eval_exit") and not (tmp_path / "outside.txt").exists()
    assert subprocess.run(["pgrep", "-f", "sleep 3171"], capture_output=True).returncode == 1


def test_rows_that_need_their_image_are_refused(tmp_path):
    instance = make_instance("a" * 40, pre="source /opt/miniconda3/bin/activate; cd /testbed")
    work = prepare_work(tmp_path, instance, GOLD)
    with pytest.raises(process.SandboxRefused, match="Kubernetes"):
        process.ProcessSandbox().run_test_step(work, instance, 60)
