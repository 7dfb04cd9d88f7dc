"""The objects an Evaluation's work items need, as plain dicts (pure).

One Job per attempt at a work item; its pod runs the steps of ``proctor runner``:

    init  pull       task image    `true`: the big image is pulled before the agent is asked
    init  workspace  task image    (sidecar agents) /testbed, history cut at base_commit,
                                   copied into a volume that only the agent mounts
    init  agent      agent image   (sidecar agents) a native sidecar: restartPolicy Always
    init  solve      runner image  the task from /task -> the agent, or a given patch
    init  test       task image    bash /proctor/run.sh: apply, eval script, log
    main  grade      runner image  the compact result in the termination message

The task data comes from one content-addressed ConfigMap per task (not per item): the task
itself (``instance.json``, hundreds of KiB for some Verified rows) is the bulk, and every
variant and repeat of a task shares it. Per item, the pod picks its variant's prompt from
that ConfigMap and gets ``item.json`` from its own annotation (downward API), both
projected into /task beside ``instance.json``. For the Verified split x 4 variants that
is 500 ConfigMaps holding 12 MB instead of 2,000 holding 37 MB, all kept in etcd. A patch
kept from an earlier attempt (a retry after an infrastructure failure) is the one piece of
data specific to an item: it comes in a small ConfigMap of its own.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proctor.core.images import instance_image
from proctor.core.labels import (
    ANNOTATION_ITEM,
    ANNOTATION_ITEM_KEY,
    ANNOTATION_RUNNER_VERSION,
    COMPONENT,
    KUEUE_QUEUE_NAME,
    LABEL_ATTEMPT,
    LABEL_EVALUATION,
    LABEL_INSTANCE,
    LABEL_ITEM,
    LABEL_REPEAT,
    LABEL_VARIANT,
    MANAGED_BY,
)
from proctor.core.model import ORIGINAL_VARIANT, Instance, WorkItem
from proctor.core.plan import Variant
from proctor.core.spec import AgentUnderTest, Evaluation
from proctor.formats.predictions import patch_for
from proctor.k8s.children.agent_manifests import agent_args, agent_endpoint, env_var
from proctor.k8s.children.security import (
    PROFILES,
    TMP_VOLUME,
    container_security_context,
    pod_security_context,
)
from proctor.k8s.machinery.names import configmap_name, job_name, label_value
from proctor.k8s.machinery.objects import ConfigMap
from proctor.runner.workdir import TEST_STEP_INPUTS

WORK_DIR = "/proctor"
"""The work folder (runner/workdir.py) on the pod's ``work`` emptyDir."""
TASK_DIR = "/task"
"""The task files: instance.json, item.json, prompt.txt, and patch.diff when one is given."""
TESTBED = "/testbed"
"""Where SWE-bench images keep the task's repository."""
WORKSPACE_DIR = "/workspace"
"""Mount point of the agent's own copy of the repository (sidecar agents)."""
REPO_DIR = f"{WORKSPACE_DIR}/repo"
"""The repository as a sidecar agent sees it, sent to it as REPO_DIR."""
WORK_MOUNT = {"name": "work", "mountPath": WORK_DIR}
TMP_MOUNT = {"name": TMP_VOLUME, "mountPath": "/tmp"}
TMP_VOLUME_LIMIT = "1Gi"
"""Size limit of /tmp in the steps whose root filesystem is read-only."""
WORKSPACE_MOUNT = {"name": "workspace", "mountPath": WORKSPACE_DIR}

DEFAULT_RUNNER_IMAGE = "proctor-runner"
"""Runner image when neither the spec nor the operator names one; tagged with the version."""
DEFAULT_ARCH = "amd64"
"""SWE-bench's images are x86-64."""
POD_DEADLINE_MARGIN_SECONDS = 1800
"""Time a pod gets beyond the agent's and the tests' own limits.

The Job's deadline counts from its start, image pulls included, and SWE-bench images are
several GB: a cold node can take minutes to pull one. A deadline hit is an infrastructure
failure, retried from the start, so the margin errs long; it only delays noticing a pod
that hangs outside both limits.
"""
CONFIGMAP_MAX_BYTES = 1024 * 1024
"""The apiserver refuses a ConfigMap whose data exceeds 1 MiB."""
WORK_VOLUME_LIMIT = "4Gi"
"""Size limit of /proctor: logs (test logs reach tens of MB), the patch, the results."""
WORKSPACE_VOLUME_LIMIT = "8Gi"
"""Size limit of the sidecar agent's copy of the repository and what it writes there."""
DEFAULT_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "1", "memory": "2Gi"},
    # No CPU limit: throttling makes timing-sensitive tests flaky.
    "limits": {"memory": "8Gi"},
}
"""Resources of the runner and test steps when spec.runner.resources is unset."""
EPHEMERAL_STORAGE = {"requests": "2Gi", "limits": "20Gi"}
"""Ephemeral storage of each step, unless spec.runner.resources names it (the test step
writes to its image's layer: builds and pip installs of the eval script)."""
PULL_RESOURCES = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}
"""The pull step runs `true`: it needs nothing, and must not size the pod."""
AGENT_STARTUP_SECONDS = 300
"""How long a sidecar agent may take to open its port before the pod fails."""


# The workspace step: a copy of /testbed whose git history ends at the base commit, so an
# agent cannot read the fix from a later commit. It runs in the task's image as a non-root
# user on a read-only root filesystem (security.PROFILES): it fetches the base commit by its
# id from /testbed into a new repository, writing nothing in /testbed. No value is pasted
# into the script: the commit and paths come as environment variables.
WORKSPACE_SCRIPT = """\
set -euo pipefail
# /testbed is root's: git reads another user's repository only when the user's own
# configuration says so (a setting on the command line does not reach upload-pack).
export GIT_CONFIG_GLOBAL=/tmp/workspace.gitconfig
git config --global safe.directory '*'
mkdir -p "$REPO_DIR"
tar -C "$TESTBED" --exclude=./.git -cf - . | tar -C "$REPO_DIR" -xf -
git init -q "$REPO_DIR"
git -C "$REPO_DIR" fetch -q --no-tags "$TESTBED" "$BASE_COMMIT"
git -C "$REPO_DIR" reset -q FETCH_HEAD
chmod -R a+rwX "$REPO_DIR"
"""


# The test step runs where nothing the grade step reads can be changed by it: the work
# folder is mounted read-only, run.sh and its inputs are copied to the test volume and run
# from there, and the eval script's output goes into the test-log step's pipe (see
# runner/testlog.py). Arguments: the work folder, then the names of run.sh's inputs. Its
# apply log is printed afterwards for `kubectl logs -c test` (the test log: `-c test-log`).
TEST_SCRIPT = """\
set -u
from="$1"; shift
for name in "$@"; do
  if [ -f "$from/$name" ]; then cp "$from/$name" "$TEST_DIR/$name" || exit 3; fi
done
bash "$TEST_DIR/run.sh"; rc=$?
cat "$TEST_DIR/apply.log" 2>/dev/null
exit "$rc"
"""
TEST_DIR = "/proctor-test"
"""Where the test step runs run.sh and writes its outputs: the pod's ``test`` emptyDir."""
TEST_LOG_DIR = "/proctor-log"
"""Where the test-log step keeps the eval script's output: the pod's ``test-log`` emptyDir,
which the test step does not mount."""
TEST_LOG_PIPE = f"{TEST_DIR}/test_output.pipe"
TEST_LOG_FILE = f"{TEST_LOG_DIR}/test_output.txt"
TEST_LOG_RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"},
                      "limits": {"memory": "128Mi"}}
"""The test-log step copies a pipe to a file: little memory, no CPU to speak of."""


QUEUE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?")
"""A LocalQueue name that is also a label value (the CRD's queueName pattern)."""


@dataclass(frozen=True)
class JobDefaults:
    """What the operator's own settings (the chart's values) give every Job it creates."""

    runtime_class_name: str = ""
    """RuntimeClass of the pods (gVisor's, Kata's) when spec.runner names none; empty: the
    cluster's default runtime."""
    priority_class_name: str = ""
    """PriorityClass of the pods when spec.runner names none; empty: the cluster's default."""
    queue_name: str = ""
    """Kueue LocalQueue of the Jobs when spec.queueName names none; empty: no queue."""
    ttl_seconds_after_finished: int | None = None
    """How long a finished Job (and its pod, with the steps' logs) stays for `kubectl logs`
    before Kubernetes' TTL controller deletes it; None: the operator deletes it as soon as
    its result is kept."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> JobDefaults:
        """From PROCTOR_JOB_RUNTIME_CLASS_NAME, PROCTOR_JOB_PRIORITY_CLASS_NAME,
        PROCTOR_JOB_QUEUE_NAME (a label value) and PROCTOR_JOB_TTL_SECONDS (an integer >= 0;
        empty or unset: None)."""
        ttl = environ.get("PROCTOR_JOB_TTL_SECONDS", "").strip()
        if ttl and not (ttl.isdigit()):
            raise ValueError(f"PROCTOR_JOB_TTL_SECONDS is {ttl!r}: give a whole number of "
                             f"seconds (0 or more), or leave it empty")
        queue = environ.get("PROCTOR_JOB_QUEUE_NAME", "").strip()
        if queue and not QUEUE_NAME.fullmatch(queue):
            raise ValueError(f"PROCTOR_JOB_QUEUE_NAME is {queue!r}: give a LocalQueue's name "
                             f"(lower-case letters, digits, - and ., at most 63), or leave it "
                             f"empty")
        return cls(environ.get("PROCTOR_JOB_RUNTIME_CLASS_NAME", ""),
                   environ.get("PROCTOR_JOB_PRIORITY_CLASS_NAME", ""), queue,
                   int(ttl) if ttl else None)


NO_JOB_DEFAULTS = JobDefaults()
"""The operator's settings when none are given: nothing added, finished Jobs deleted."""


class TaskTooLarge(ValueError):
    """A task's data does not fit in one ConfigMap."""


# --- Small pieces ---------------------------------------------------------------------------


def _digest(data: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def owner_labels(evaluation: Evaluation) -> dict[str, str]:
    """Labels of everything an Evaluation owns: the operator lists its children by them."""
    return {MANAGED_BY: "proctor", LABEL_EVALUATION: label_value(evaluation.name)}


def item_labels(evaluation: Evaluation, item: WorkItem, attempt: int = 0) -> dict[str, str]:
    """Labels of one attempt's Job and pod: which item, of which Evaluation."""
    return {
        **owner_labels(evaluation),
        COMPONENT: "work-item",
        LABEL_ITEM: item.id,
        LABEL_INSTANCE: label_value(item.instance_id),
        LABEL_VARIANT: label_value(item.variant_id),
        LABEL_REPEAT: str(item.repeat),
        LABEL_ATTEMPT: str(attempt),
    }


def runner_image(evaluation: Evaluation, runner_version: str, default: str | None = None) -> str:
    """spec.runner.image, else the operator's default, else ``proctor-runner:<version>``."""
    if evaluation.spec.runner.image:
        return evaluation.spec.runner.image
    if default:
        return default
    # A tag allows letters, digits, _ . - only: `0.1.0+local` becomes `0.1.0-local`.
    return f"{DEFAULT_RUNNER_IMAGE}:{re.sub(r'[^A-Za-z0-9_.-]', '-', runner_version)}"


def queue_name(evaluation: Evaluation, defaults: JobDefaults) -> str:
    """The Kueue LocalQueue of the Evaluation's Jobs: spec.queueName, else the operator's
    default; empty: none (the Jobs are not suspended and run at once)."""
    return evaluation.spec.queue_name or defaults.queue_name


def asks_agent(evaluation: Evaluation, kept_patch: Mapping[str, Any] | None = None) -> bool:
    """Whether this attempt asks the agent (not when the patch is given or kept)."""
    return evaluation.spec.predictions.source == "agent" and kept_patch is None


def runner_resources(resources: Mapping[str, Any] | None) -> dict[str, Any]:
    """The steps' resources: spec.runner.resources (else defaults), plus ephemeral storage.

    The spec's resources replace the defaults whole rather than merging, so that a request
    above a default limit can never make an invalid pair.
    """
    out = copy.deepcopy(dict(resources)) if resources else copy.deepcopy(DEFAULT_RESOURCES)
    named = set(out.get("requests", {})) | set(out.get("limits", {}))
    if "ephemeral-storage" not in named:
        for section, size in EPHEMERAL_STORAGE.items():
            out.setdefault(section, {})["ephemeral-storage"] = size
    return out


# --- ConfigMaps -----------------------------------------------------------------------------


def prompt_key(variant_id: str) -> str:
    """The ConfigMap key of a variant's problem text."""
    return f"prompt.{variant_id}.txt"


def variant_texts(variants: Mapping[str, Iterable[Variant]]) -> dict[str, dict[str, str]]:
    """Each task's variant texts by variant id, as ``task_data`` takes them."""
    return {task: {v.variant_id: v.text for v in own} for task, own in variants.items()}


def task_variants(configmaps: Iterable[ConfigMap]
                  ) -> tuple[list[Instance], dict[str, list[Variant]]]:
    """What task ConfigMaps gave their Jobs (the inverse of ``task_data``): each task's row
    (its gold patch left out) and its variants, in variant id order."""
    instances: dict[str, Instance] = {}
    variants: dict[str, list[Variant]] = {}
    for cm in configmaps:
        data = cm.get("data") or {}
        if "instance.json" not in data:
            continue
        instance = Instance.model_validate_json(data["instance.json"])
        instances[instance.instance_id] = instance
        variants[instance.instance_id] = [
            Variant(key.removeprefix("prompt.").removesuffix(".txt"), text)
            for key, text in sorted(data.items()) if key.startswith("prompt.")
            and key != prompt_key(ORIGINAL_VARIANT)]
    return [instances[i] for i in sorted(instances)], variants


def task_data(evaluation: Evaluation, instance: Instance, variants: Mapping[str, str],
              predictions: Mapping[str, str] | None = None) -> dict[str, str]:
    """What /task holds for every item of one task, by ConfigMap key.

    ``variants`` maps variant ids to problem texts (the original is added when absent);
    ``predictions`` is the loaded predictions file when predictions.source is ``file``.
    The gold patch stays out unless predictions.source is ``gold``: the solve step (and
    anything it runs) must not be able to read the answer.
    """
    source = evaluation.spec.predictions.source
    task = instance if source == "gold" else instance.model_copy(update={"patch": ""})
    data = {"instance.json": task.model_dump_json()}
    texts = {ORIGINAL_VARIANT: instance.problem_statement, **variants}
    for variant_id, text in sorted(texts.items()):
        data[prompt_key(variant_id)] = text
    if source in ("gold", "file"):
        data["patch.diff"] = patch_for(source, instance, dict(predictions or {}))
    return data


def _check_size(data: Mapping[str, str], what: str) -> None:
    size = sum(len(key.encode()) + len(value.encode()) for key, value in data.items())
    if size > CONFIGMAP_MAX_BYTES:
        raise TaskTooLarge(
            f"{what} holds {size} bytes, over the {CONFIGMAP_MAX_BYTES} a ConfigMap can hold; "
            f"leave the task out (dataset.instanceIds) or use fewer prompt variations")


def immutable_configmap(evaluation: Evaluation, name: str, labels: Mapping[str, str],
                        data: Mapping[str, str]) -> dict[str, Any]:
    """A ConfigMap the Evaluation owns, named by its content: it never changes, so it is
    immutable, and the kubelet need not watch it (thousands of pods would each keep a
    watch open)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": evaluation.namespace,
                         "labels": {**owner_labels(evaluation), **labels}},
            "immutable": True, "data": dict(data)}


def task_configmap(evaluation: Evaluation, instance: Instance, variants: Mapping[str, str],
                   predictions: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ConfigMap of one task's data, named by its content (see ``task_data``)."""
    data = task_data(evaluation, instance, variants, predictions)
    _check_size(data, f"the task data of {instance.instance_id}")
    return immutable_configmap(
        evaluation, configmap_name(evaluation.name, "task", _digest(data)),
        {COMPONENT: "task", LABEL_INSTANCE: label_value(instance.instance_id)}, data)


def check_task_sizes(evaluation: Evaluation, instances: Iterable[Instance],
                     variants: Mapping[str, Mapping[str, str]]) -> None:
    """Raise TaskTooLarge, naming the task, if any task's ConfigMap (with its variants)
    would be over the size a ConfigMap can hold: checked before any item starts, rather
    than when the task's first Job is created."""
    for instance in instances:
        _check_size(task_data(evaluation, instance, variants.get(instance.instance_id, {})),
                    f"the task data of {instance.instance_id}")


def patch_configmap(evaluation: Evaluation, item: WorkItem, patch: str) -> dict[str, Any]:
    """The patch an earlier attempt got from the agent, for a retry not to ask again."""
    data = {"patch.diff": patch}
    _check_size(data, f"the kept patch of {item.key}")
    name = configmap_name(evaluation.name, "patch", _digest({"item": item.id, **data}))
    return immutable_configmap(evaluation, name, {COMPONENT: "kept-patch", LABEL_ITEM: item.id},
                               data)


# --- The pod's steps ------------------------------------------------------------------------


def solve_command(evaluation: Evaluation, agent: AgentUnderTest | None,
                  kept_patch: Mapping[str, Any] | None = None,
                  resume_task: str | None = None) -> list[str]:
    """``proctor runner solve`` with the flags of this evaluation and attempt;
    ``resume_task``: the id of the agent's task an earlier attempt sent, to follow instead
    of sending the item again (that attempt was preempted before the answer came)."""
    spec = evaluation.spec
    command = ["proctor", "runner", "solve", "--work-dir", WORK_DIR, "--task-dir", TASK_DIR,
               "--time-limit", str(spec.timeouts.test_seconds)]
    if not spec.dataset.include_hints:
        command.append("--no-hints")
    if asks_agent(evaluation, kept_patch):
        if agent is None:
            raise ValueError(f"Evaluation {evaluation.name!r} asks an agent: pass its "
                             f"AgentUnderTest")
        command += ["--endpoint", agent_endpoint(agent),
                    "--timeout", str(agent.spec.request_timeout_seconds)]
        if agent.spec.sidecar:  # its port is open (startupProbe); its card is waited for
            command += ["--repo-dir", REPO_DIR, "--card-wait", str(AGENT_STARTUP_SECONDS)]
        if agent.spec.task_data:
            command.append("--task-data")
        if resume_task:
            command.append(f"--resume-task={resume_task}")
    elif kept_patch is not None or spec.predictions.source in ("gold", "file"):
        command += ["--patch-file", f"{TASK_DIR}/patch.diff"]
    else:  # empty predictions: no patch, and the tests run anyway (validation)
        command += ["--patch-file", "", "--without-patch"]
    return command


def job_asks_agent(job: Mapping[str, Any]) -> bool:
    """Whether a Job's solve step asks the agent (``solve_command`` gave it an endpoint),
    rather than taking a given or kept patch."""
    pod = job.get("spec", {}).get("template", {}).get("spec", {})
    return any(c.get("name") == "solve" and "--endpoint" in (c.get("command") or [])
               for c in pod.get("initContainers") or [])


def _token_env(agent: AgentUnderTest | None) -> list[dict[str, Any]]:
    """The agent's token from its Secret, for the solve step only."""
    auth = agent.spec.auth if agent else None
    if auth is None:
        return []
    ref = {"name": auth.secret_ref.name, "key": auth.secret_ref.key}
    # `proctor runner solve` sends `<header>: <scheme> <token>` with every request (the
    # token alone when the scheme is empty), in every mode; the value never passes through
    # the operator, which names only the Secret's key.
    return [{"name": "PROCTOR_AGENT_TOKEN", "valueFrom": {"secretKeyRef": ref}},
            {"name": "PROCTOR_AGENT_AUTH_HEADER", "value": auth.header},
            {"name": "PROCTOR_AGENT_AUTH_SCHEME", "value": auth.scheme}]


def _step(name: str, image: str, command: Sequence[str], resources: Mapping[str, Any],
          mounts: Sequence[dict[str, Any]], env: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name, "image": image, "command": list(command),
        # SWE-bench images are tagged :latest, which would mean a registry round trip per pod
        # (and Docker Hub's rate limit); the digest that ran is read back from the pod.
        "imagePullPolicy": "IfNotPresent",
        "resources": copy.deepcopy(dict(resources)),
        # A step that fails without writing a message gets its log's tail in the pod's
        # status, so the failure can be explained without fetching logs.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if PROFILES[name].read_only_root:
        mounts = [*mounts, TMP_MOUNT]
    if mounts:
        container["volumeMounts"] = [dict(mount) for mount in mounts]
    if env:
        container["env"] = list(env)
    container["securityContext"] = container_security_context(name)
    return container


def _sidecar_steps(agent: AgentUnderTest, instance: Instance, task_image: str,
                   resources: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The workspace copy and the agent itself, run as a native sidecar (1.29+)."""
    sidecar = agent.spec.sidecar
    assert sidecar is not None
    workspace = _step("workspace", task_image, ["bash", "-c", WORKSPACE_SCRIPT], resources,
                      [WORKSPACE_MOUNT],
                      [{"name": "TESTBED", "value": TESTBED},
                       {"name": "BASE_COMMIT", "value": instance.base_commit},
                       {"name": "REPO_DIR", "value": REPO_DIR}])
    port = sidecar.port
    env = [env_var(e) for e in sidecar.env if e.name != "REPO_DIR"]
    agent_container: dict[str, Any] = {
        "name": "agent", "image": sidecar.image, "restartPolicy": "Always",
        **({"command": list(sidecar.command)} if sidecar.command else {}),
        # Started as Agentbeats starts agents; the card names loopback, where solve calls.
        "args": agent_args(sidecar, f"http://127.0.0.1:{port}/"),
        "env": [*env, {"name": "REPO_DIR", "value": REPO_DIR}],
        "ports": [{"name": "a2a", "containerPort": port}],
        # solve starts only once the agent listens; asking too early would be an agent error.
        "startupProbe": {"tcpSocket": {"port": port}, "periodSeconds": 2,
                         "failureThreshold": AGENT_STARTUP_SECONDS // 2},
        "resources": copy.deepcopy(sidecar.resources or {}),
        "volumeMounts": [dict(WORKSPACE_MOUNT)],
        "securityContext": container_security_context("agent"),
    }
    return [workspace, agent_container]


def _mount(volume: str, path: str, read_only: bool = False) -> dict[str, Any]:
    return {"name": volume, "mountPath": path, **({"readOnly": True} if read_only else {})}


def _test_steps(runner: str, task_image: str,
                resources: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The test-log step (a native sidecar that keeps the log) and the test step."""
    keeper = _step("test-log", runner, ["proctor", "runner", "keep-log", "--fifo",
                                        TEST_LOG_PIPE, "--out", TEST_LOG_FILE],
                   TEST_LOG_RESOURCES,
                   [_mount("test", TEST_DIR), _mount("test-log", TEST_LOG_DIR)])
    keeper |= {"restartPolicy": "Always",
               # The test step starts once the pipe exists.
               "startupProbe": {"exec": {"command": ["test", "-p", TEST_LOG_PIPE]},
                                "periodSeconds": 1, "failureThreshold": 120}}
    test = _step("test", task_image,
                 ["bash", "-c", TEST_SCRIPT, "test", WORK_DIR, *TEST_STEP_INPUTS], resources,
                 [{**WORK_MOUNT, "readOnly": True}, _mount("test", TEST_DIR)],
                 [{"name": "TESTBED", "value": TESTBED}, {"name": "TEST_DIR", "value": TEST_DIR},
                  {"name": "PROCTOR_TEST_LOG", "value": TEST_LOG_PIPE}])
    return [keeper, test]


def _task_volume(task: Mapping[str, Any], item: WorkItem, source: str,
                 kept_patch: Mapping[str, Any] | None) -> dict[str, Any]:
    """/task: the task's ConfigMap (this item's prompt as prompt.txt), item.json, a patch."""
    keys = set(task.get("data", {}))
    prompt = prompt_key(item.variant_id)
    if prompt not in keys or "instance.json" not in keys:
        raise ValueError(f"ConfigMap {task['metadata']['name']} lacks instance.json or "
                         f"{prompt} for item {item.key}")
    items = [{"key": "instance.json", "path": "instance.json"},
             {"key": prompt, "path": "prompt.txt"}]
    if kept_patch is None and source in ("gold", "file"):
        items.append({"key": "patch.diff", "path": "patch.diff"})
    field = f"metadata.annotations['{ANNOTATION_ITEM}']"
    sources: list[dict[str, Any]] = [
        {"configMap": {"name": task["metadata"]["name"], "items": items}},
        {"downwardAPI": {"items": [{"path": "item.json", "fieldRef": {"fieldPath": field}}]}},
    ]
    if kept_patch is not None:
        sources.append({"configMap": {"name": kept_patch["metadata"]["name"],
                                      "items": [{"key": "patch.diff", "path": "patch.diff"}]}})
    return {"name": "task", "projected": {"sources": sources}}


# --- The Job --------------------------------------------------------------------------------


def _pod_spec(evaluation: Evaluation, agent: AgentUnderTest | None, item: WorkItem,
              instance: Instance, task: Mapping[str, Any], runner: str,
              kept_patch: Mapping[str, Any] | None, preferred_node: str | None,
              defaults: JobDefaults, resume_task: str | None = None) -> dict[str, Any]:
    spec = evaluation.spec
    task_image = instance_image(instance, spec.runner.instance_image_registry)
    resources = runner_resources(spec.runner.resources)
    sidecar = asks_agent(evaluation, kept_patch) and bool(agent and agent.spec.sidecar)
    token = _token_env(agent) if asks_agent(evaluation, kept_patch) else []
    init = [_step("pull", task_image, ["true"], PULL_RESOURCES, [])]
    if sidecar and agent is not None:
        init += _sidecar_steps(agent, instance, task_image, resources)
    init += [
        _step("solve", runner, solve_command(evaluation, agent, kept_patch, resume_task),
              resources,
              [WORK_MOUNT, {"name": "task", "mountPath": TASK_DIR, "readOnly": True}], token),
        *_test_steps(runner, task_image, resources),
    ]
    grade = _step("grade", runner, ["proctor", "runner", "grade", "--work-dir", WORK_DIR,
                                    "--test-dir", TEST_DIR, "--test-log", TEST_LOG_FILE,
                                    "--termination-log", "/dev/termination-log", "--artifacts"],
                  resources, [WORK_MOUNT, _mount("test", TEST_DIR, read_only=True),
                              _mount("test-log", TEST_LOG_DIR, read_only=True)])
    grade |= {"terminationMessagePath": "/dev/termination-log",
              "terminationMessagePolicy": "File"}
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        # Thousands of pods in a namespace: no Service environment variables for each.
        "enableServiceLinks": False,
        "nodeSelector": {"kubernetes.io/arch": DEFAULT_ARCH, **(spec.runner.node_selector or {})},
        "initContainers": init,
        "containers": [grade],
        "securityContext": pod_security_context(),
        "volumes": [{"name": "work", "emptyDir": {"sizeLimit": WORK_VOLUME_LIMIT}},
                    {"name": "test", "emptyDir": {"sizeLimit": WORK_VOLUME_LIMIT}},
                    {"name": "test-log", "emptyDir": {"sizeLimit": WORK_VOLUME_LIMIT}},
                    {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": TMP_VOLUME_LIMIT}},
                    _task_volume(task, item, spec.predictions.source, kept_patch)],
    }
    if sidecar:
        pod["volumes"].append({"name": "workspace",
                               "emptyDir": {"sizeLimit": WORKSPACE_VOLUME_LIMIT}})
    runtime_class = spec.runner.runtime_class_name or defaults.runtime_class_name
    if runtime_class:
        pod["runtimeClassName"] = runtime_class
    priority_class = spec.runner.priority_class_name or defaults.priority_class_name
    if priority_class:
        pod["priorityClassName"] = priority_class
    if spec.runner.tolerations:
        pod["tolerations"] = [dict(t) for t in spec.runner.tolerations]
    if spec.runner.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s.name} for s in spec.runner.image_pull_secrets]
    if preferred_node:  # the node that ran this task before has its big image already
        term = {"matchFields": [{"key": "metadata.name", "operator": "In",
                                 "values": [preferred_node]}]}
        pod["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": term}]}}
    return pod


def desired_job(evaluation: Evaluation, agent: AgentUnderTest | None, item: WorkItem,
                instance: Instance, task: Mapping[str, Any], *, runner_version: str,
                runner_image_default: str | None = None, preferred_node: str | None = None,
                kept_patch: Mapping[str, Any] | None = None, attempt: int = 0,
                defaults: JobDefaults = NO_JOB_DEFAULTS, resume_task: str | None = None
                ) -> dict[str, Any]:
    """The Job of one attempt at one work item.

    ``task`` is the task's ConfigMap (``task_configmap``); ``kept_patch`` the ConfigMap of
    a patch an earlier attempt got (``patch_configmap``), so a retry never asks the agent
    twice; ``preferred_node`` a node that ran this task before; ``defaults`` what the
    operator's settings add; ``resume_task`` the agent's task an earlier attempt sent
    (`solve_command`). The owner reference is left to ``kopf.adopt``.
    """
    if kept_patch is not None and evaluation.spec.predictions.source != "agent":
        raise ValueError("a kept patch replaces the agent's answer; predictions.source is "
                         f"{evaluation.spec.predictions.source!r}, whose patch is in the task")
    labels = item_labels(evaluation, item, attempt)
    queue = queue_name(evaluation, defaults)
    runner = runner_image(evaluation, runner_version, runner_image_default)
    pod = _pod_spec(evaluation, agent, item, instance, task, runner, kept_patch,
                    preferred_node, defaults, resume_task)
    annotations = {ANNOTATION_ITEM_KEY: item.key, ANNOTATION_RUNNER_VERSION: runner_version}
    timeouts = evaluation.spec.timeouts  # the deadline: podSeconds, else agent + tests + margin
    agent_seconds = agent.spec.request_timeout_seconds if agent and asks_agent(
        evaluation, kept_patch) else 0
    job_spec: dict[str, Any] = {
        "backoffLimit": 0,
        "activeDeadlineSeconds": timeouts.pod_seconds or (
            agent_seconds + timeouts.test_seconds + POD_DEADLINE_MARGIN_SECONDS),
    }
    if queue:
        # Kueue admits it by quota: it unsuspends the Job (it may add node selectors), and on
        # preemption suspends it again (the Job controller then deletes its pods).
        job_spec["suspend"] = True
    if defaults.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = defaults.ttl_seconds_after_finished
    job_spec["template"] = {"metadata": {"labels": dict(labels),
                                         "annotations": {ANNOTATION_ITEM: item.model_dump_json()}},
                            "spec": pod}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(evaluation.name, item.id, attempt),
                     "namespace": evaluation.namespace,
                     "labels": {**labels, KUEUE_QUEUE_NAME: queue} if queue else labels,
                     "annotations": annotations},
        "spec": job_spec,
    }


def desired_objects(evaluation: Evaluation, agent: AgentUnderTest | None,
                    items: Iterable[WorkItem], instances: Mapping[str, Instance],
                    variants: Mapping[str, Mapping[str, str]] | None = None, *,
                    runner_version: str, runner_image_default: str | None = None,
                    defaults: JobDefaults = NO_JOB_DEFAULTS
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The task ConfigMaps (one per task) and first-attempt Jobs (one per item) of ``items``;
    ``variants`` maps instance ids to their variants' texts."""
    configmaps: dict[str, dict[str, Any]] = {}
    jobs: list[dict[str, Any]] = []
    for item in items:
        instance = instances[item.instance_id]
        if item.instance_id not in configmaps:
            configmaps[item.instance_id] = task_configmap(
                evaluation, instance, (variants or {}).get(item.instance_id, {}))
        jobs.append(desired_job(evaluation, agent, item, instance, configmaps[item.instance_id],
                                runner_version=runner_version,
                                runner_image_default=runner_image_default,
                                defaults=defaults))
    return list(configmaps.values()), jobs

