"""The Jobs and ConfigMaps of work items as the tests build and read them: an Evaluation
and its agent, an item's Job and task ConfigMap (`job_for`) in every shape the specs make
(`SHAPES`), each object validated for Kubernetes 1.29 and 1.35 (`validate`), and what a
pod finds in /task (`task_files`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import kubernetes_validate

from proctor.core.model import Instance, WorkItem
from proctor.core.plan import PlanInputs, Variant, plan
from proctor.core.spec import AgentUnderTest, AgentUnderTestSpec, Evaluation, EvaluationSpec
from proctor.k8s.children import manifests as m
from proctor.k8s.machinery.names import is_dns_label, is_label_value

VERSIONS = ("1.29", "1.35")


def evaluation(name: str = "demo", **spec: Any) -> Evaluation:
    spec.setdefault("agentRef", {"name": "agent"})
    return Evaluation(name=name, namespace="evals", spec=EvaluationSpec.model_validate(spec))


def agent(**spec: Any) -> AgentUnderTest:
    return AgentUnderTest(name="agent", namespace="evals",
                          spec=AgentUnderTestSpec.model_validate(spec or {"endpoint":
                                                                         "http://a:9009/"}))


def item_of(instance: Instance, variant: str = "original", repeat: int = 0) -> WorkItem:
    inputs = PlanInputs(dataset="d", revision="r", agent="agent", repeats=repeat + 1)
    variants = {instance.instance_id: [Variant(variant, "reworded")]}
    return next(i for i in plan(inputs, [instance], variants)
                if i.variant_id == variant and i.repeat == repeat)


def job_for(ev: Evaluation, aut: AgentUnderTest | None, instance: Instance,
            **kwargs: Any) -> tuple[dict, dict]:
    item = item_of(instance)
    cm = m.task_configmap(ev, instance, {}, kwargs.pop("predictions", None))
    return cm, m.desired_job(ev, aut, item, instance, cm, runner_version="0.1.0", **kwargs)


def containers(job: dict) -> dict[str, dict]:
    spec = job["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec["initContainers"] + spec["containers"]}


def valid_versions(obj: dict) -> tuple[str, ...]:
    """The Kubernetes versions of VERSIONS whose schemas take ``obj`` (strict): all of them,
    or kubernetes-validate's error naming what the first refused."""
    return tuple(kubernetes_validate.validate(obj, version, strict=True) for version in VERSIONS)


def validate(*objects: dict) -> None:
    for obj in objects:
        assert valid_versions(obj) == VERSIONS
        check_names_and_labels(obj)


def task_configmaps(job: dict) -> list[str]:
    """The ConfigMaps a Job's pod reads its /task from."""
    (volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "task"]
    return [s["configMap"]["name"] for s in volume["projected"]["sources"] if "configMap" in s]


def check_names_and_labels(obj: dict) -> None:
    """What kubernetes-validate leaves to the apiserver: names and label values."""
    assert is_dns_label(obj["metadata"]["name"])
    labels = dict(obj["metadata"].get("labels", {}))
    labels |= obj.get("spec", {}).get("template", {}).get("metadata", {}).get("labels", {})
    assert all(is_label_value(value) for value in labels.values()), labels


SHAPES: dict[str, tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any]]] = {
    "endpoint": ({}, {"endpoint": "http://agent.example:9009/"}, {}),
    "service": ({}, {"service": {"image": "agent:1", "port": 8080}}, {}),
    "sidecar+auth": ({"dataset": {"includeHints": False}},
                     {"sidecar": {"image": "agent:1", "args": ["--model", "m"],
                                  "env": [{"name": "MODEL", "value": "m"},
                                          {"name": "KEY", "valueFrom": {"secretKeyRef": {
                                              "name": "agent-env", "key": "KEY"}}},
                                          {"name": "REPO_DIR", "value": "/elsewhere"}],
                                  "resources": {"limits": {"memory": "4Gi"}}},
                      "auth": {"secretRef": {"name": "tok", "key": "token"}}}, {}),
    "gold": ({"predictions": {"source": "gold"}}, None, {}),
    "empty": ({"predictions": {"source": "empty"}}, None, {}),
    "file": ({"predictions": {"source": "file", "path": "preds.jsonl"}}, None,
             {"predictions": {}}),
    "runner-options": ({"runner": {"image": "registry.example/proctor-runner:9",
                                   "instanceImageRegistry": "mirror.example:5000",
                                   "resources": {"requests": {"cpu": "4", "memory": "16Gi"}},
                                   "nodeSelector": {"pool": "swe"},
                                   "tolerations": [{"key": "swe", "operator": "Exists",
                                                    "effect": "NoSchedule"}],
                                   "imagePullSecrets": [{"name": "hub"}]},
                        "timeouts": {"testSeconds": 600, "podSeconds": 4000}},
                       {"endpoint": "http://a:9009/"}, {"preferred_node": "node-7"}),
}

STEPS = ["pull", "solve", "test-log", "test", "grade"]
"""A work item's pod, step by step (init containers and containers)."""
SIDECAR_STEPS = ["pull", "workspace", "agent", "solve", "test-log", "test", "grade"]
"""With a sidecar agent: its copy of the repository made, then the agent beside the task."""


def task_files(job: Mapping[str, Any], configmaps: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """What /task holds in the pod of ``job``: path -> text, as a kubelet projects it from
    the ConfigMaps given and the pod template's annotations (written apart from the
    manifests, from Kubernetes' projected volumes; on the real cluster of
    tests/cluster/test_operator.py the runner steps read what a kubelet projects)."""
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
