"""The ConfigMaps and Jobs of work items: valid on 1.29 and 1.35, and runnable by the runner."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from proctor.cli.main import build_parser
from proctor.cli.main import main as cli_main
from proctor.core.labels import LABEL_ATTEMPT
from proctor.core.model import Instance
from proctor.core.plan import PlanInputs, plan
from proctor.k8s.children import manifests as m
from proctor.runner.solve import init_from_task
from proctor.runner.workdir import TEST_STEP_INPUTS, WorkDir, eval_script_of
from proctor.variants import variants_for
from support.calc_task import git
from support.job_manifests import (
    SHAPES,
    SIDECAR_STEPS,
    STEPS,
    VERSIONS,
    agent,
    check_names_and_labels,
    containers,
    evaluation,
    item_of,
    job_for,
    task_configmaps,
    task_files,
    valid_versions,
    validate,
)

# --- Every shape of Job validates -----------------------------------------------------------


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_of_job_and_configmap_validates(shape: str, task: Instance) -> None:
    spec, aut_spec, kwargs = SHAPES[shape]
    aut = agent(**aut_spec) if aut_spec else None
    ev = evaluation(**spec) if aut else evaluation(**{**spec, "agentRef": None})
    cm, job = job_for(ev, aut, task, **kwargs)
    for obj in (cm, job):
        assert valid_versions(obj) == VERSIONS, obj["kind"]
        check_names_and_labels(obj)
    # Each object is the shape's: the Job's pod reads /task from this ConfigMap, and runs
    # the shape's steps (a sidecar agent's two more).
    assert task_configmaps(job) == [cm["metadata"]["name"]]
    assert list(containers(job)) == (SIDECAR_STEPS if "sidecar" in (aut_spec or {}) else STEPS)


def test_retry_with_a_kept_patch_validates_and_never_asks_the_agent(task: Instance) -> None:
    ev, aut = evaluation(), agent(sidecar={"image": "agent:1"})
    item = item_of(task)
    cm = m.task_configmap(ev, task, {})
    kept = m.patch_configmap(ev, item, "diff --git a/x b/x\n")
    job = m.desired_job(ev, aut, item, task, cm, runner_version="0.1.0", kept_patch=kept,
                        attempt=1)
    validate(kept, job)
    steps = containers(job)
    assert list(steps) == ["pull", "solve", "test-log", "test", "grade"]  # no agent
    assert steps["solve"]["command"][-2:] == ["--patch-file", "/task/patch.diff"]
    assert "env" not in steps["solve"]  # no token either
    assert job["metadata"]["name"].endswith("-r1")
    assert job["metadata"]["labels"][LABEL_ATTEMPT] == "1"
    assert job["spec"]["activeDeadlineSeconds"] == 1800 + m.POD_DEADLINE_MARGIN_SECONDS
    assert task_files(job, [cm, kept])["patch.diff"] == "diff --git a/x b/x\n"


def test_a_kept_patch_is_only_for_agent_predictions(task: Instance) -> None:
    ev = evaluation(predictions={"source": "gold"}, agentRef=None)
    item = item_of(task)
    kept = m.patch_configmap(ev, item, "diff")
    with pytest.raises(ValueError, match="kept patch"):
        m.desired_job(ev, None, item, task, m.task_configmap(ev, task, {}),
                      runner_version="1", kept_patch=kept)


# --- The pod ---------------------------------------------------------------------------------


def test_pod_basics(task: Instance) -> None:
    _, job = job_for(evaluation(), agent(), task)
    assert job["spec"]["backoffLimit"] == 0
    assert "ownerReferences" not in job["metadata"]  # left to kopf.adopt
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
    assert "affinity" not in pod
    assert {v["name"]: v.get("emptyDir") for v in pod["volumes"]}["work"] == {
        "sizeLimit": m.WORK_VOLUME_LIMIT}
    steps = containers(job)
    assert list(steps) == ["pull", "solve", "test-log", "test", "grade"]
    assert steps["pull"]["image"] == task.image and steps["pull"]["command"] == ["true"]
    assert steps["test"]["image"] == task.image
    assert steps["test"]["command"] == ["bash", "-c", m.TEST_SCRIPT, "test", "/proctor",
                                        *TEST_STEP_INPUTS]
    assert {"name": "TESTBED", "value": "/testbed"} in steps["test"]["env"]
    assert steps["solve"]["image"] == steps["grade"]["image"] == "proctor-runner:0.1.0"
    assert steps["test-log"]["image"] == "proctor-runner:0.1.0"
    assert steps["test-log"]["restartPolicy"] == "Always"  # a native sidecar
    assert steps["grade"]["command"] == ["proctor", "runner", "grade", "--work-dir", "/proctor",
                                         "--test-dir", m.TEST_DIR, "--test-log",
                                         m.TEST_LOG_FILE, "--termination-log",
                                         "/dev/termination-log", "--artifacts"]
    assert steps["grade"]["terminationMessagePolicy"] == "File"
    for name in ("solve", "test", "grade"):
        assert steps[name]["resources"]["limits"]["ephemeral-storage"] == "20Gi"
    # Only solve reads the task; the test step gets what solve wrote to /proctor.
    assert [v["name"] for v in steps["test"]["volumeMounts"]] == ["work", "test"]


def test_nothing_the_grade_step_reads_can_be_rewritten_by_the_test_step(task: Instance) -> None:
    """The test step runs the patch's code as root: every volume it can write is one the
    grade step reads only as outputs brought back, and the log comes from a volume the test
    step does not mount at all."""
    _, job = job_for(evaluation(), agent(), task)
    steps = containers(job)

    def mounts(step: str) -> dict[str, dict]:
        return {v["name"]: v for v in steps[step]["volumeMounts"]}
    writable = {name for name, v in mounts("test").items() if not v.get("readOnly")}
    assert writable == {"test"}
    assert mounts("test")["work"]["readOnly"] is True
    assert mounts("grade")["test"]["readOnly"] is True
    log_volume = m.TEST_LOG_DIR
    kept = next(n for n, v in mounts("test-log").items() if v["mountPath"] == log_volume)
    assert kept not in mounts("test")
    assert mounts("grade")[kept]["readOnly"] is True
    env = {e["name"]: e["value"] for e in steps["test"]["env"]}
    assert env["PROCTOR_TEST_LOG"] == m.TEST_LOG_PIPE
    assert m.TEST_LOG_PIPE.startswith(mounts("test")["test"]["mountPath"] + "/")
    # The test step starts once the pipe exists.
    assert steps["test-log"]["startupProbe"]["exec"]["command"] == ["test", "-p",
                                                                   m.TEST_LOG_PIPE]


def test_labels_name_the_item(task: Instance) -> None:
    _, job = job_for(evaluation(), agent(), task)
    item = item_of(task)
    labels = job["metadata"]["labels"]
    assert labels == job["spec"]["template"]["metadata"]["labels"]
    assert labels == {"app.kubernetes.io/managed-by": "proctor",
                      "app.kubernetes.io/component": "work-item",
                      "proctor.dev/evaluation": "demo", "proctor.dev/item": item.id,
                      "proctor.dev/instance": task.instance_id,
                      "proctor.dev/variant": "original", "proctor.dev/repeat": "0",
                      "proctor.dev/attempt": "0"}


def test_deadline_is_agent_plus_tests_plus_margin_unless_given(task: Instance) -> None:
    ev = evaluation(timeouts={"testSeconds": 900})
    aut = agent(endpoint="http://a/", requestTimeoutSeconds=600)
    assert job_for(ev, aut, task)[1]["spec"]["activeDeadlineSeconds"] == \
        600 + 900 + m.POD_DEADLINE_MARGIN_SECONDS
    gold = evaluation(timeouts={"testSeconds": 900}, predictions={"source": "gold"})
    assert job_for(gold, None, task)[1]["spec"]["activeDeadlineSeconds"] == \
        900 + m.POD_DEADLINE_MARGIN_SECONDS
    given = evaluation(timeouts={"testSeconds": 900, "podSeconds": 1234})
    assert job_for(given, aut, task)[1]["spec"]["activeDeadlineSeconds"] == 1234


def test_runner_options_reach_the_pod(task: Instance) -> None:
    spec, aut_spec, kwargs = SHAPES["runner-options"]
    _, job = job_for(evaluation(**spec), agent(**aut_spec), task, **kwargs)
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "amd64", "pool": "swe"}
    assert pod["tolerations"] == [{"key": "swe", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["imagePullSecrets"] == [{"name": "hub"}]
    preference = pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preference[0]["preference"]["matchFields"][0]["values"] == ["node-7"]
    steps = containers(job)
    assert steps["test"]["image"] == f"mirror.example:5000/{task.image}"
    assert steps["solve"]["image"] == "registry.example/proctor-runner:9"
    # The spec's resources replace the defaults whole; ephemeral storage is still added.
    assert steps["test"]["resources"] == {
        "requests": {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "2Gi"},
        "limits": {"ephemeral-storage": "20Gi"}}
    assert "--time-limit" in steps["solve"]["command"]
    assert steps["solve"]["command"][steps["solve"]["command"].index("--time-limit") + 1] == "600"


def test_the_spec_may_pick_another_architecture(task: Instance) -> None:
    _, job = job_for(evaluation(runner={"nodeSelector": {"kubernetes.io/arch": "arm64"}}),
                     agent(), task)
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/arch": "arm64"}


def test_user_ephemeral_storage_is_kept() -> None:
    given = {"limits": {"ephemeral-storage": "50Gi", "memory": "1Gi"}}
    assert m.runner_resources(given) == given
    assert m.runner_resources(None)["requests"] == {"cpu": "1", "memory": "2Gi",
                                                    "ephemeral-storage": "2Gi"}


@pytest.mark.parametrize(("image", "registry", "expected"), [
    ("swebench/sweb.eval.x86_64.a:latest", "", "swebench/sweb.eval.x86_64.a:latest"),
    ("swebench/sweb.eval.x86_64.a:latest", "mirror:5000",
     "mirror:5000/swebench/sweb.eval.x86_64.a:latest"),
    ("docker.io/swebench/x:latest", "registry.example/cache/",
     "registry.example/cache/swebench/x:latest"),
    ("localhost/x:1", "r.example", "r.example/x:1"),
    ("ubuntu", "r.example", "r.example/ubuntu"),
])
def test_instance_image_registry_replaces_only_the_registry(task: Instance, image: str,
                                                            registry: str, expected: str) -> None:
    assert m.instance_image(task.model_copy(update={"image": image}), registry) == expected


def test_runner_image_precedence() -> None:
    assert m.runner_image(evaluation(), "0.1.0") == "proctor-runner:0.1.0"
    assert m.runner_image(evaluation(), "0.0.0+source") == "proctor-runner:0.0.0-source"
    assert m.runner_image(evaluation(), "0.1.0", "ops/runner:2") == "ops/runner:2"
    assert m.runner_image(evaluation(runner={"image": "mine:1"}), "0.1.0", "ops/r:2") == "mine:1"


# --- Solve's flags, checked against the real CLI --------------------------------------------


def solve_args(job: dict) -> Any:
    command = containers(job)["solve"]["command"]
    assert command[0] == "proctor"
    return build_parser().parse_args(command[1:])


def test_solve_asks_an_endpoint_agent(task: Instance) -> None:
    args = solve_args(job_for(evaluation(), agent(endpoint="http://a.example:1/",
                                                  requestTimeoutSeconds=99), task)[1])
    assert (args.endpoint, args.timeout, args.patch_file, args.repo_dir) == (
        "http://a.example:1/", 99, None, None)
    assert (args.work_dir, args.task_dir, args.time_limit, args.no_hints) == (
        "/proctor", "/task", 1800, False)


@pytest.mark.parametrize(("source", "patch_file", "without_patch"), [
    ("gold", "/task/patch.diff", False), ("file", "/task/patch.diff", False),
    ("empty", "", True)])
def test_solve_takes_given_patches(task: Instance, source: str, patch_file: str,
                                   without_patch: bool) -> None:
    spec: dict[str, Any] = {"predictions": {"source": source}, "agentRef": None}
    if source == "file":
        spec["predictions"]["path"] = "p.jsonl"
    args = solve_args(job_for(evaluation(**spec), None, task)[1])
    assert (args.endpoint, args.patch_file, args.without_patch) == (None, patch_file,
                                                                    without_patch)


def test_sidecar_agent_runs_beside_the_task_and_sees_only_its_workspace(task: Instance) -> None:
    spec, aut_spec, _ = SHAPES["sidecar+auth"]
    _, job = job_for(evaluation(**spec), agent(**aut_spec), task)
    steps = containers(job)
    assert list(steps) == ["pull", "workspace", "agent", "solve", "test-log", "test", "grade"]
    sidecar = steps["agent"]
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["volumeMounts"] == [{"name": "workspace", "mountPath": "/workspace"}]
    assert sidecar["args"] == ["--host", "0.0.0.0", "--port", "9009",
                               "--card-url", "http://127.0.0.1:9009/", "--model", "m"]
    assert sidecar["env"] == [{"name": "MODEL", "value": "m"},
                              {"name": "KEY", "valueFrom": {"secretKeyRef": {
                                  "name": "agent-env", "key": "KEY"}}},
                              {"name": "REPO_DIR", "value": "/workspace/repo"}]
    assert sidecar["startupProbe"]["tcpSocket"] == {"port": 9009}
    assert steps["workspace"]["image"] == task.image
    assert {"name": "BASE_COMMIT", "value": task.base_commit} in steps["workspace"]["env"]
    args = solve_args(job)
    assert (args.endpoint, args.repo_dir, args.no_hints) == (
        "http://127.0.0.1:9009/", "/workspace/repo", True)
    assert [v["name"] for v in steps["solve"]["volumeMounts"]] == ["work", "task", "tmp"]
    # The token reaches the solve step only.
    assert steps["solve"]["env"][0]["name"] == "PROCTOR_AGENT_TOKEN"
    assert steps["solve"]["env"][0]["valueFrom"] == {
        "secretKeyRef": {"name": "tok", "key": "token"}}
    assert all("PROCTOR_AGENT_TOKEN" not in json.dumps(steps[n]) for n in steps if n != "solve")


def test_the_workspace_script_cuts_history_at_the_base_commit(tmp_path: Path) -> None:
    testbed = tmp_path / "testbed"
    testbed.mkdir()
    git(testbed, "init", "-q", "-b", "main")
    (testbed / "a.py").write_text("base\n")
    git(testbed, "add", ".")
    git(testbed, "commit", "-qm", "base")
    base = git(testbed, "rev-parse", "HEAD")
    (testbed / "fix.py").write_text("the fix\n")
    git(testbed, "add", ".")
    git(testbed, "commit", "-qm", "the fix, later")
    future = git(testbed, "rev-parse", "HEAD")
    git(testbed, "reset", "-q", "--hard", base)
    (testbed / "built.so").write_text("an untracked build output\n")
    repo = tmp_path / "workspace" / "repo"
    env = {"TESTBED": str(testbed), "BASE_COMMIT": base, "REPO_DIR": str(repo),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    subprocess.run(["bash", "-c", m.WORKSPACE_SCRIPT], env=env, check=True)
    assert git(repo, "rev-parse", "HEAD") == base
    assert (repo / "a.py").read_text() == "base\n" and (repo / "built.so").exists()
    assert not (repo / "fix.py").exists()
    missing = subprocess.run(["git", "cat-file", "-e", future], cwd=repo, capture_output=True)
    assert missing.returncode != 0, "a commit after the base commit reached the agent"
    assert git(repo, "status", "--porcelain") == "?? built.so"


# --- /task: what the runner finds there -----------------------------------------------------


def test_the_gold_patch_never_reaches_an_agent_run(task: Instance) -> None:
    cm = m.task_configmap(evaluation(), task, {})
    shipped = Instance.model_validate_json(cm["data"]["instance.json"])
    assert shipped.patch == "" and task.patch
    assert "patch.diff" not in cm["data"]
    assert shipped.model_copy(update={"patch": task.patch}) == task
    # The eval script, hence the grade, does not depend on the gold patch.
    assert eval_script_of(shipped) == eval_script_of(task)


def test_gold_and_file_predictions_ship_their_patch(task: Instance) -> None:
    gold = m.task_configmap(evaluation(predictions={"source": "gold"}, agentRef=None), task, {})
    assert gold["data"]["patch.diff"] == task.patch
    assert Instance.model_validate_json(gold["data"]["instance.json"]) == task
    file_ev = evaluation(predictions={"source": "file", "path": "p.jsonl"}, agentRef=None)
    given = m.task_configmap(file_ev, task, {}, {task.instance_id: "diff --git a/y b/y\n"})
    assert given["data"]["patch.diff"] == "diff --git a/y b/y\n"
    assert m.task_configmap(file_ev, task, {}, {})["data"]["patch.diff"] == ""


def test_the_runner_starts_its_work_folder_from_the_projected_task(task: Instance,
                                                                   tmp_path: Path) -> None:
    ev = evaluation(predictions={"source": "gold"}, agentRef=None, timeouts={"testSeconds": 77})
    item = item_of(task, variant="v1")
    cm = m.task_configmap(ev, task, {"v1": "reworded problem"})
    job = m.desired_job(ev, None, item, task, cm, runner_version="0.1.0")
    files = task_files(job, [cm])
    assert sorted(files) == ["instance.json", "item.json", "patch.diff", "prompt.txt"]
    assert files["prompt.txt"] == "reworded problem"
    task_dir, work_dir = tmp_path / "task", tmp_path / "proctor"
    task_dir.mkdir()
    for name, text in files.items():  # byte for byte, as the kubelet writes them
        (task_dir / name).write_bytes(text.encode())
    # Run the Job's own solve command, its paths moved under tmp_path.
    command = containers(job)["solve"]["command"][1:]
    moved = [str(task_dir) + arg[len("/task"):] if arg.startswith("/task") else
             str(work_dir) if arg == "/proctor" else arg for arg in command]
    assert cli_main(moved) == 0
    work = WorkDir(work_dir)
    assert work.item() == item and work.instance() == task
    assert work.read("patch.diff") == task.patch
    assert (work.read("time_limit") or "").strip() == "77"
    assert work.read("prompt.txt") == "reworded problem"
    assert (work / "run.sh").exists() and (work / "eval.sh").exists()


def test_init_from_task_reads_an_agent_items_files(task: Instance, tmp_path: Path) -> None:
    ev = evaluation()
    item = item_of(task, repeat=2)
    cm = m.task_configmap(ev, task, {})
    files = task_files(m.desired_job(ev, agent(), item, task, cm, runner_version="1"), [cm])
    assert sorted(files) == ["instance.json", "item.json", "prompt.txt"]
    for name, text in files.items():
        (tmp_path / name).write_bytes(text.encode())
    work = WorkDir(tmp_path / "work")
    init_from_task(work, tmp_path)
    assert work.item() == item
    assert (work / "prompt.txt").read_bytes() == task.problem_statement.encode()


def test_a_variant_missing_from_the_configmap_is_refused(task: Instance) -> None:
    ev = evaluation()
    cm = m.task_configmap(ev, task, {})
    with pytest.raises(ValueError, match=r"prompt\.v9\.txt"):
        m.desired_job(ev, agent(), item_of(task, variant="v9"), task, cm, runner_version="1")


def test_task_configmaps_are_content_addressed_and_immutable(task: Instance) -> None:
    ev = evaluation()
    first = m.task_configmap(ev, task, {"v1": "a"})
    assert first == m.task_configmap(ev, task, {"v1": "a"})
    assert first["immutable"] is True
    assert first["metadata"]["name"] != m.task_configmap(ev, task, {"v1": "b"})["metadata"][
        "name"]
    assert first["metadata"]["name"] != m.task_configmap(evaluation("other"), task, {"v1": "a"})[
        "metadata"]["name"]
    assert sorted(first["data"]) == ["instance.json", "prompt.original.txt", "prompt.v1.txt"]


def test_an_oversized_task_is_refused_with_what_to_do(task: Instance) -> None:
    huge = task.model_copy(update={"problem_statement": "x" * 600_000})
    with pytest.raises(m.TaskTooLarge, match=r"over the 1048576 .*instanceIds"):
        m.task_configmap(evaluation(), huge, {})


# --- The whole real split -------------------------------------------------------------------


def test_the_real_split_times_four_variants(verified: list[Instance]) -> None:
    # The operator's own template variants (each task's biggest ConfigMap: 285 KiB; with
    # all 14 templates, 405 KiB: under the 1 MiB a ConfigMap holds either way).
    plan_variants = variants_for(verified, 3)
    variants = m.variant_texts(plan_variants)
    items = plan(PlanInputs(dataset="d", revision="r", agent="agent"), verified, plan_variants)
    assert len(items) == 2000
    ev = evaluation("verified-run")
    cms, jobs = m.desired_objects(ev, agent(), items, {i.instance_id: i for i in verified},
                                  variants, runner_version="0.1.0")
    assert len(cms) == 500 and len(jobs) == 2000
    assert len({j["metadata"]["name"] for j in jobs}) == 2000
    assert len({c["metadata"]["name"] for c in cms}) == 500
    sizes = [sum(len(k) + len(v.encode()) for k, v in c["data"].items()) for c in cms]
    assert max(sizes) < m.CONFIGMAP_MAX_BYTES
    for job in jobs:
        check_names_and_labels(job)
    for obj in cms[::50] + jobs[::200]:
        validate(obj)
    by_name = {c["metadata"]["name"]: c for c in cms}
    for job in jobs[::97]:
        volume = next(v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "task")
        assert volume["projected"]["sources"][0]["configMap"]["name"] in by_name
