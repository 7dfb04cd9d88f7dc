"""`proctor render`: the objects the operator would create, checked against what it creates.

The pure part is checked on the demo dataset (names, owner labels, counts, each object valid
for Kubernetes 1.29 and 1.35); then the real operator runs on the test cluster, with no
kubelet so that its Jobs stay as it created them, and what it created is compared with
what `proctor render` printed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes_validate
import pytest
import yaml
from kopf.testing import KopfRunner

from cluster.emulator import Cluster, running_cluster
from proctor.cli.main import main as cli_main
from proctor.datasets import demo
from proctor.formats.manifest import parse_manifests
from proctor.k8s.manifests import LABEL_EVALUATION, MANAGED_BY, item_labels
from proctor.k8s.names import is_dns_label, job_name
from proctor.k8s.render import agent_of, render, to_yaml
from proctor.prepare import Refusal, load_selection, plan_items

TASKS = len(demo.load_rows())
VERSIONS = ("1.29", "1.35")
AGENT = """\
apiVersion: proctor.dev/v1alpha1
kind: AgentUnderTest
metadata: {name: mixed, namespace: evals}
spec: {endpoint: "http://mixed.agents:9009/"}
"""



@contextmanager
def operator(cluster: Cluster, namespace: str) -> Iterator[KopfRunner]:
    """The real operator in this process against the test cluster (whose agents would be on
    loopback: as `proctor operator --allow-local-endpoints`)."""
    args = ["run", "--standalone", "--namespace", namespace, "-m", "proctor.k8s.controller"]
    before = os.environ.get("PROCTOR_ALLOW_LOCAL_ENDPOINTS")
    os.environ["PROCTOR_ALLOW_LOCAL_ENDPOINTS"] = "1"
    try:
        with cluster.kubeconfig_env(), KopfRunner(args, timeout=60) as runner:
            yield runner
    finally:
        os.environ.pop("PROCTOR_ALLOW_LOCAL_ENDPOINTS", None)
        if before is not None:
            os.environ["PROCTOR_ALLOW_LOCAL_ENDPOINTS"] = before
    assert runner.exception is None, runner.output[-3000:]


def evaluation_yaml(**spec: Any) -> str:
    body = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
            "metadata": {"name": "demo", "namespace": "evals"},
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
    (AGENT.replace('endpoint: "http://mixed.agents:9009/"', "service: {image: agent:1}"),
     "AgentModeUnsupported"),
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


# --- Against the operator -------------------------------------------------------------------


@pytest.fixture(scope="module")
def still_cluster() -> Iterator[Cluster]:
    """A test cluster with no kubelet: no pod runs, so every Job stays as it was created."""
    with running_cluster(kubelet=False) as cluster:
        cluster.store.ensure_namespace("evals")
        yield cluster


def stored(client: Any, kind: str) -> list[dict]:
    """The Evaluation's objects as the API server keeps them (raw JSON, camelCase keys)."""
    if kind == "Job":
        response = kubernetes.client.BatchV1Api(client).list_namespaced_job(
            "evals", label_selector=f"{LABEL_EVALUATION}=demo", _preload_content=False)
    else:
        response = kubernetes.client.CoreV1Api(client).list_namespaced_config_map(
            "evals", label_selector="app.kubernetes.io/component=task",
            _preload_content=False)
    listed = json.loads(response.data)
    # The API server leaves kind and apiVersion out of a list's items.
    head = {"apiVersion": listed["apiVersion"], "kind": listed["kind"].removesuffix("List")}
    return [head | item for item in listed["items"]]


def missing(want: Any, have: Any, path: str = "") -> list[str]:
    """Where ``have`` lacks or differs from what ``want`` says (fields the API server adds,
    such as defaults and the uid, are not compared)."""
    if isinstance(want, dict) and isinstance(have, dict):
        return [p for key, value in want.items()
                for p in missing(value, have.get(key), f"{path}.{key}")]
    if isinstance(want, list) and isinstance(have, list) and len(want) == len(have):
        return [p for i, (w, h) in enumerate(zip(want, have, strict=True))
                for p in missing(w, h, f"{path}[{i}]")]
    return [] if want == have else [f"{path}: {want!r} != {have!r}"]


def test_what_render_prints_is_what_the_operator_creates(still_cluster: Cluster,
                                                         tmp_path: Path, capsys) -> None:
    text = evaluation_yaml(predictions={"source": "gold"}, agentRef=None, maxConcurrentRows=2)
    assert cli_main(["render", "-f", write(tmp_path, "ev.yaml", text)]) == 0
    rendered = list(yaml.safe_load_all(capsys.readouterr().out))
    client = still_cluster.api_client()
    custom = kubernetes.client.CustomObjectsApi(client)
    custom.create_namespaced_custom_object("proctor.dev", "v1alpha1", "evals", "evaluations",
                                           yaml.safe_load(text))
    with operator(still_cluster, "evals"):
        # maxConcurrentRows 2: the two Jobs it starts are the first two that render prints.
        first = still_cluster.wait_for(lambda: len(stored(client, "Job")) >= 2 and
                                       stored(client, "Job"), 60)
        custom.patch_namespaced_custom_object("proctor.dev", "v1alpha1", "evals", "evaluations",
                                              "demo", {"spec": {"maxConcurrentRows": TASKS}})
        jobs = still_cluster.wait_for(lambda: len(stored(client, "Job")) == TASKS and
                                      stored(client, "Job"), 60)
    uid = custom.get_namespaced_custom_object("proctor.dev", "v1alpha1", "evals", "evaluations",
                                              "demo")["metadata"]["uid"]
    configmaps = stored(client, "ConfigMap")
    rendered_jobs = [o for o in rendered if o["kind"] == "Job"]
    assert sorted(j["metadata"]["name"] for j in first) == \
        sorted(j["metadata"]["name"] for j in rendered_jobs[:2])
    by_name = {o["metadata"]["name"]: o for o in [*jobs, *configmaps]}
    assert sorted(by_name) == sorted(o["metadata"]["name"] for o in rendered)
    for obj in rendered:
        made = by_name[obj["metadata"]["name"]]
        assert missing(obj, made) == [], obj["metadata"]["name"]
        # What render leaves to the cluster: the owner reference, to the Evaluation's uid.
        assert [o["uid"] for o in made["metadata"]["ownerReferences"]] == [uid]
