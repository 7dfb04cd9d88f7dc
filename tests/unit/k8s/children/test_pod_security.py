"""What a work item's pod asks of a cluster: each container's security settings, the
runtime and priority classes, how long a finished Job stays (pure; the real cluster's
admission of the same pods is in test_cluster_admission.py)."""

from __future__ import annotations

import os
import subprocess

import pytest

from proctor import datasets
from proctor.k8s.children import manifests as m
from proctor.k8s.children import security
from support.calc_task import git
from support.job_manifests import SHAPES, agent, containers, evaluation, job_for, validate
from support.pod_security import restricted_departures


@pytest.fixture(scope="module")
def task():
    return datasets.load("proctor-demo", max_rows=1).instances[0]


BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                         "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID",
                         "SYS_CHROOT"}
"""Pod Security's baseline profile: the capabilities a container may add (the Kubernetes
documentation's list, written out here rather than taken from the code under test)."""


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_step_but_the_test_step_meets_restricted(shape: str, task) -> None:
    spec, aut_spec, kwargs = SHAPES[shape]
    aut = agent(**aut_spec) if aut_spec else None
    ev = evaluation(**spec) if aut else evaluation(**{**spec, "agentRef": None})
    _, job = job_for(ev, aut, task, **kwargs)
    pod = job["spec"]["template"]["spec"]
    for name, container in containers(job).items():
        departures = restricted_departures(pod, container)
        if name == "test":
            assert departures == set(security.TEST_EXCEPTIONS), departures
        else:
            assert departures == set(), (name, departures)
        assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_test_step_stays_within_baseline_and_adds_only_documented_capabilities(
        task) -> None:
    _, job = job_for(evaluation(), agent(), task)
    test = containers(job)["test"]["securityContext"]
    added = set(test["capabilities"].get("add", []))
    assert test["capabilities"]["drop"] == ["ALL"] and not test.get("privileged")
    assert added == set(security.TEST_CAPABILITIES) and added <= BASELINE_CAPABILITIES
    assert "NET_RAW" not in added
    assert all(reason.strip() for reason in security.TEST_EXCEPTIONS.values())


def test_read_only_steps_get_a_writable_tmp_and_the_rest_do_not(task) -> None:
    _, job = job_for(evaluation(), agent(sidecar={"image": "agent:1"}), task)
    pod = job["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tmp"]["emptyDir"]["sizeLimit"]
    for name, container in containers(job).items():
        read_only = container["securityContext"]["readOnlyRootFilesystem"]
        mounts = {v["mountPath"] for v in container.get("volumeMounts", [])}
        assert read_only == security.PROFILES[name].read_only_root
        assert ("/tmp" in mounts) == read_only, name
    assert not containers(job)["test"]["securityContext"]["readOnlyRootFilesystem"]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_runtime_and_priority_classes_come_from_the_spec_else_the_operator(task) -> None:
    defaults = m.JobDefaults(runtime_class_name="gvisor", priority_class_name="batch-low",
                             ttl_seconds_after_finished=600)
    _, job = job_for(evaluation(), agent(), task, defaults=defaults)
    pod = job["spec"]["template"]["spec"]
    assert (pod["runtimeClassName"], pod["priorityClassName"]) == ("gvisor", "batch-low")
    assert job["spec"]["ttlSecondsAfterFinished"] == 600
    validate(job)
    own = evaluation(runner={"runtimeClassName": "kata", "priorityClassName": "urgent"})
    _, job = job_for(own, agent(), task, defaults=defaults)
    pod = job["spec"]["template"]["spec"]
    assert (pod["runtimeClassName"], pod["priorityClassName"]) == ("kata", "urgent")
    _, plain = job_for(evaluation(), agent(), task)
    assert not {"runtimeClassName", "priorityClassName"} & set(plain["spec"]["template"]["spec"])
    assert "ttlSecondsAfterFinished" not in plain["spec"]


@pytest.mark.parametrize(("environ", "expected"), [
    ({}, m.JobDefaults()),
    ({"PROCTOR_JOB_TTL_SECONDS": ""}, m.JobDefaults()),
    ({"PROCTOR_JOB_TTL_SECONDS": "0", "PROCTOR_JOB_RUNTIME_CLASS_NAME": "gvisor"},
     m.JobDefaults(runtime_class_name="gvisor", ttl_seconds_after_finished=0)),
])
def test_job_defaults_from_the_environment(environ: dict[str, str],
                                           expected: m.JobDefaults) -> None:
    assert m.JobDefaults.from_env(environ) == expected


def test_a_bad_ttl_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"^PROCTOR_JOB_TTL_SECONDS is '-5': give a whole"):
        m.JobDefaults.from_env({"PROCTOR_JOB_TTL_SECONDS": "-5"})


def test_the_workspace_step_writes_nothing_in_the_testbed(tmp_path) -> None:
    """It runs on a read-only root filesystem as a non-root user, so it must leave /testbed
    as the image has it (the history cut is checked in test_k8s_manifests)."""
    testbed = tmp_path / "testbed"
    testbed.mkdir()
    git(testbed, "init", "-q", "-b", "main")
    (testbed / "a.py").write_text("base\n")
    git(testbed, "add", ".")
    git(testbed, "commit", "-qm", "base")
    base = git(testbed, "rev-parse", "HEAD")
    (testbed / "a.py").write_text("later\n")
    git(testbed, "commit", "-qam", "later")

    def snapshot() -> list[tuple[str, int]]:
        return sorted((str(p), p.stat().st_mtime_ns) for p in testbed.rglob("*"))
    before = snapshot()
    run = subprocess.run(["bash", "-c", m.WORKSPACE_SCRIPT], capture_output=True, text=True,
                         env={**os.environ, "TESTBED": str(testbed), "BASE_COMMIT": base,
                              "REPO_DIR": str(tmp_path / "ws" / "repo")})
    assert run.returncode == 0, run.stderr
    assert snapshot() == before
    assert git(tmp_path / "ws" / "repo", "rev-parse", "HEAD") == base


def test_the_test_step_runs_a_copy_prints_its_apply_log_and_keeps_run_shs_exit(
        tmp_path) -> None:
    """The test step copies run.sh's inputs from the read-only work folder to its own
    volume and runs them there; `kubectl logs -c test` shows the apply log; the step's exit
    status is run.sh's (non-zero: the sandbox broke)."""
    work, test = tmp_path / "work", tmp_path / "test"
    work.mkdir(), test.mkdir()
    (work / "eval.sh").write_text("echo tests\n")
    for code in (0, 3):
        (work / "run.sh").write_text('echo ">>>>> Applied" > "${BASH_SOURCE[0]%/*}/apply.log"'
                                     f'\necho running\nexit {code}\n')
        done = subprocess.run(["bash", "-c", m.TEST_SCRIPT, "test", str(work), "run.sh",
                               "eval.sh", "patch.diff"], capture_output=True, text=True,
                              env={**os.environ, "TEST_DIR": str(test)})
        assert done.returncode == code
        assert done.stdout == "running\n>>>>> Applied\n"
        assert sorted(p.name for p in test.iterdir()) == ["apply.log", "eval.sh", "run.sh"]
        assert sorted(p.name for p in work.iterdir()) == ["eval.sh", "run.sh"]
