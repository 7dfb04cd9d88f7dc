"""`proctor render`: the objects the operator would create, checked against what it creates.

The pure part is checked on the demo dataset (names, owner labels, counts, each object valid
for Kubernetes 1.29 and 1.35); then the real operator runs on the real Kubernetes of
scripts/cluster.sh, in a namespace whose ResourceQuota admits no pod, so that its Jobs stay
as it created them, and what it created is compared with what `proctor render` printed, as
the same API server keeps it (a server-side dry run of each printed object).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes_validate
import pytest
import yaml

from proctor.cli.main import main as cli_main
from proctor.core.labels import LABEL_EVALUATION, MANAGED_BY
from proctor.datasets import demo
from proctor.formats.manifest import parse_manifests
from proctor.k8s.children.manifests import item_labels
from proctor.k8s.machinery.names import is_dns_label, job_name
from proctor.k8s.render import agent_of, render, to_yaml
from proctor.prepare import Refusal, load_selection, plan_items
from support.real_cluster_fixtures import RealCluster, in_process_operator, wait_for

pytest_plugins = ["support.real_cluster_fixtures"]

TASKS = len(demo.load_rows())
VERSIONS = ("1.29", "1.35")
AGENT = """\
apiVersion: proctor.dev/v1alpha1
kind: AgentUnderTest
metadata: {name: mixed, namespace: evals}
spec: {endpoint: "http://mixed.agents:9009/"}
"""


def evaluation_yaml(namespace: str = "evals", **spec: Any) -> str:
    body = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
            "metadata": {"name": "demo", "namespace": namespace},
            "spec": {"agentRef": {"name": "mixed"},
                     "dataset": {"name": "proctor-demo", "maxRows": -1}, **spec}}
    return yaml.safe_dump(body)


def prepared(text: str) -> tuple[Any, Any, Any, list]:
    evaluation, *agents = parse_manifests(text)
    selection = load_selection(evaluation)
    return evaluation, agent_of(evaluation, agents), selection, plan_items(evaluation,
                                                                           selection)


def kinds(objects: list[dict]) -> list[str]:
    return [obj["kind"] for obj in objects]


# --- The objects ----------------------------------------------------------------------------


def test_the_first_n_items_jobs_after_their_task_configmaps() -> None:
    evaluation, agent, selection, items = prepared(evaluation_yaml(repeats=2) + "---\n" + AGENT)
    objects = render(evaluation, agent, selection, items, 3)
    # Repeats share their task's ConfigMap: three items of two tasks.
    assert kinds(objects) == ["ConfigMap"] * 2 + ["Job"] * 3
    configmaps, jobs = objects[:2], objects[2:]
    assert [j["metadata"]["name"] for j in jobs] == [job_name("demo", i.id, 0) for i in items[:3]]
    assert [j["metadata"]["labels"] for j in jobs] == [item_labels(evaluation, i)
                                                      for i in items[:3]]
    used = {s["configMap"]["name"] for j in jobs for v in j["spec"]["template"]["spec"]["volumes"]
            if v["name"] == "task" for s in v["projected"]["sources"] if "configMap" in s}
    assert used == {c["metadata"]["name"] for c in configmaps}
    for obj in objects:
        assert obj["metadata"]["namespace"] == "evals" and is_dns_label(obj["metadata"]["name"])
        assert obj["metadata"]["labels"][MANAGED_BY] == "proctor"
        assert obj["metadata"]["labels"][LABEL_EVALUATION] == "demo"
        for version in VERSIONS:
            assert kubernetes_validate.validate(obj, version, strict=True) == version


def test_every_item_by_default_and_none_for_zero() -> None:
    evaluation, agent, selection, items = prepared(evaluation_yaml() + "---\n" + AGENT)
    assert kinds(render(evaluation, agent, selection, items)) == \
        ["ConfigMap"] * TASKS + ["Job"] * TASKS
    assert render(evaluation, agent, selection, items, 0) == []


def test_the_runner_image_is_the_operators_default_unless_the_spec_names_one() -> None:
    def images(text: str, default: str | None) -> set[str]:
        evaluation, agent, selection, items = prepared(text)
        (job,) = render(evaluation, agent, selection, items, 1, runner_image_default=default)[1:]
        spec = job["spec"]["template"]["spec"]
        return {c["image"] for c in spec["initContainers"] + spec["containers"]
                if c["name"] in ("solve", "grade")}

    gold = evaluation_yaml(predictions={"source": "gold"}, agentRef=None)
    assert images(gold, "registry.example/proctor-runner:9") == \
        {"registry.example/proctor-runner:9"}
    named = evaluation_yaml(predictions={"source": "gold"}, agentRef=None,
                            runner={"image": "mine:1"})
    assert images(named, "registry.example/proctor-runner:9") == {"mine:1"}


@pytest.mark.parametrize(("agents", "reason"), [
    ("", "AgentNotFound"),
    (AGENT.replace("namespace: evals", "namespace: other"), "AgentNotFound"),
    (AGENT.replace('endpoint: "http://mixed.agents:9009/"', 'endpoint: "http://127.0.0.1:1/"'),
     "LocalEndpoint"),
])
def test_the_agent_is_refused_as_the_operator_refuses_it(agents: str, reason: str) -> None:
    evaluation, *found = parse_manifests(evaluation_yaml() + "---\n" + agents
                                         if agents else evaluation_yaml())
    with pytest.raises(Refusal) as refused:
        agent_of(evaluation, found)
    assert refused.value.reason == reason


def test_a_task_too_large_for_a_configmap_is_refused() -> None:
    evaluation, agent, selection, items = prepared(evaluation_yaml() + "---\n" + AGENT)
    huge = selection.instances[0].model_copy(update={"problem_statement": "x" * 1_100_000})
    selection = replace(selection, instances=(huge, *selection.instances[1:]))
    assert len(render(evaluation, agent, selection, items[1:])) == 2 * (TASKS - 1)
    with pytest.raises(Refusal, match="over the 1048576 a ConfigMap can hold") as refused:
        render(evaluation, agent, selection, items)
    assert refused.value.reason == "TaskTooLarge"


def test_multi_line_text_reads_as_written() -> None:
    text = to_yaml([{"data": {"prompt.txt": "line one\nline two\n", "one": "x"}}])
    assert "prompt.txt: |\n    line one\n    line two\n" in text
    assert list(yaml.safe_load_all(text)) == [{"data": {"prompt.txt": "line one\nline two\n",
                                                        "one": "x"}}]


# --- The command ----------------------------------------------------------------------------


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_command_prints_what_render_gives(tmp_path: Path, capsys) -> None:
    files = ["-f", write(tmp_path, "ev.yaml", evaluation_yaml(repeats=2)),
             "-f", write(tmp_path, "agent.yaml", AGENT)]
    assert cli_main(["render", *files, "--items", "3"]) == 0
    printed = list(yaml.safe_load_all(capsys.readouterr().out))
    evaluation, agent, selection, items = prepared(evaluation_yaml(repeats=2) + "---\n" + AGENT)
    assert printed == render(evaluation, agent, selection, items, 3)


@pytest.mark.parametrize(("text", "says"), [
    (evaluation_yaml(), "pass its manifest too"),
    (evaluation_yaml(predictions={"source": "file", "path": "preds.jsonl"}, agentRef=None),
     "predictions.source file reads a local file"),
    (evaluation_yaml(maxConcurrentRows=0), "maxConcurrentRows"),
    (evaluation_yaml(dataset={"name": "no-such-file.jsonl"}, agentRef=None,
                     predictions={"source": "gold"}), "no-such-file.jsonl"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys, text: str, says: str) -> None:
    assert cli_main(["render", "-f", write(tmp_path, "ev.yaml", text)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("proctor: error: ") and says in line, line


@pytest.mark.parametrize(("count", "says"), [("-1", "-1 is below 0"),
                                            ("two", "'two' is not a whole number")])
def test_an_item_count_not_a_whole_number_is_a_usage_error(tmp_path: Path, capsys,
                                                           count: str, says: str) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main(["render", "-f", write(tmp_path, "ev.yaml", evaluation_yaml()), "--items", count])
    assert exited.value.code == 2 and says in capsys.readouterr().err


# --- Against the operator, on the real cluster ------------------------------------------------


RUNNER = "proctor-test.local/proctor-runner:render"
"""The operator's default runner image and render's: never pulled, as no pod runs."""


@pytest.fixture
def still_namespace(cluster_namespace: str, cluster_api_client: Any) -> str:
    """The test's namespace with a ResourceQuota of no pods: the Job controller's pods are
    refused (FailedCreate), so every Job stays as the operator created it."""
    core = kubernetes.client.CoreV1Api(cluster_api_client)
    core.create_namespaced_resource_quota(cluster_namespace, {
        "metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}})
    # The quota admits anything until the quota controller has written its status.
    wait_for(lambda: (core.read_namespaced_resource_quota("no-pods", cluster_namespace)
                      .status.hard or {}).get("pods") == "0", 60,
             message="the quota controller never took in the ResourceQuota")
    return cluster_namespace


def stored(client: Any, namespace: str, kind: str) -> list[dict]:
    """The Evaluation's objects as the API server keeps them (raw JSON, camelCase keys)."""
    if kind == "Job":
        response = kubernetes.client.BatchV1Api(client).list_namespaced_job(
            namespace, label_selector=f"{LABEL_EVALUATION}=demo", _preload_content=False)
    else:
        response = kubernetes.client.CoreV1Api(client).list_namespaced_config_map(
            namespace, label_selector="app.kubernetes.io/component=task",
            _preload_content=False)
    listed = json.loads(response.data)
    # The API server leaves kind and apiVersion out of a list's items.
    head = {"apiVersion": listed["apiVersion"], "kind": listed["kind"].removesuffix("List")}
    return [head | item for item in listed["items"]]


def dry_run(client: Any, obj: dict) -> dict:
    """``obj`` as the API server would keep it (its defaults, its admission), kept nowhere."""
    namespace = obj["metadata"]["namespace"]
    if obj["kind"] == "Job":
        response = kubernetes.client.BatchV1Api(client).create_namespaced_job(
            namespace, obj, dry_run="All", _preload_content=False)
    else:
        response = kubernetes.client.CoreV1Api(client).create_namespaced_config_map(
            namespace, obj, dry_run="All", _preload_content=False)
    return json.loads(response.data)


def comparable(obj: dict) -> dict:
    """``obj`` less what the API server and its controllers set on their own, differently
    for each object however it was created."""
    uid = obj["metadata"]["uid"]
    # The Job's own uid, wherever the API server wrote it (its selector, its pod template's
    # controller-uid labels), stands for any: the dry run's copy was given another uid.
    obj = json.loads(json.dumps(obj).replace(uid, "<own uid>"))
    meta = obj["metadata"]
    for key in ("uid", "creationTimestamp", "resourceVersion", "managedFields"):
        # The object's identity and the time it was made; the etcd revision of the write
        # (a dry run writes nothing); the managedFields name the client that wrote it (the
        # operator's, or this test's) and when.
        meta.pop(key, None)
    # What render leaves to the cluster, checked apart: the owner reference, which names
    # the Evaluation's uid.
    meta.pop("ownerReferences", None)
    # The Job controller's account of the Job's pods (here: none admitted).
    obj.pop("status", None)
    return obj


def differences(want: Any, have: Any, path: str = "") -> list[str]:
    """Where ``have`` differs from ``want``: each path, and both values."""
    if isinstance(want, dict) and isinstance(have, dict):
        return [p for key in sorted(want.keys() | have.keys())
                for p in differences(want.get(key), have.get(key), f"{path}.{key}")]
    if isinstance(want, list) and isinstance(have, list) and len(want) == len(have):
        return [p for i, (w, h) in enumerate(zip(want, have, strict=True))
                for p in differences(w, h, f"{path}[{i}]")]
    return [] if want == have else [f"{path}: {want!r} != {have!r}"]


@pytest.mark.cluster
def test_what_render_prints_is_what_the_operator_creates(
        real_cluster: RealCluster, still_namespace: str, cluster_api_client: Any,
        tmp_path: Path, capsys) -> None:
    ns, client = still_namespace, cluster_api_client
    text = evaluation_yaml(ns, predictions={"source": "gold"}, agentRef=None,
                           maxConcurrentRows=2)
    assert cli_main(["render", "-f", write(tmp_path, "ev.yaml", text),
                     "--runner-image", RUNNER]) == 0
    rendered = list(yaml.safe_load_all(capsys.readouterr().out))
    # Before the operator makes them: a dry run of a create is refused (409) once it has.
    expected = {obj["metadata"]["name"]: dry_run(client, obj) for obj in rendered}
    custom = kubernetes.client.CustomObjectsApi(client)
    custom.create_namespaced_custom_object("proctor.dev", "v1alpha1", ns, "evaluations",
                                           yaml.safe_load(text))
    with in_process_operator(real_cluster, ns, runner_image=RUNNER):
        # maxConcurrentRows 2: the two Jobs it starts are the first two that render prints.
        first = wait_for(lambda: len(found := stored(client, ns, "Job")) >= 2 and found, 60)
        custom.patch_namespaced_custom_object("proctor.dev", "v1alpha1", ns, "evaluations",
                                              "demo", {"spec": {"maxConcurrentRows": TASKS}})
        jobs = wait_for(lambda: len(found := stored(client, ns, "Job")) == TASKS and found, 60,
                        message=lambda: f"{len(stored(client, ns, 'Job'))} Jobs, not {TASKS}")
    evaluation = custom.get_namespaced_custom_object("proctor.dev", "v1alpha1", ns,
                                                     "evaluations", "demo")
    rendered_jobs = [o for o in rendered if o["kind"] == "Job"]
    assert sorted(j["metadata"]["name"] for j in first) == \
        sorted(j["metadata"]["name"] for j in rendered_jobs[:2])
    by_name = {o["metadata"]["name"]: o for o in [*jobs, *stored(client, ns, "ConfigMap")]}
    assert sorted(by_name) == sorted(o["metadata"]["name"] for o in rendered)
    owner = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation", "name": "demo",
             "uid": evaluation["metadata"]["uid"], "controller": True,
             "blockOwnerDeletion": True}
    for obj in rendered:
        made = by_name[obj["metadata"]["name"]]
        assert differences(comparable(expected[obj["metadata"]["name"]]),
                           comparable(made)) == [], obj["metadata"]["name"]
        assert made["metadata"]["ownerReferences"] == [owner]
