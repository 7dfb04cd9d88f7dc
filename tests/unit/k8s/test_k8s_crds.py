"""The CRDs' Kubernetes parts: immutability (transition rules), status schema, printer columns.

Transition rules are evaluated here with cel-python as the apiserver does on an update:
``self`` the new value and ``oldSelf`` the stored one, at every schema location where both
exist, after both objects are defaulted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import celpy
import pytest

from proctor.formats.manifest import (
    apply_defaults,
    crd,
    is_transition_rule,
    openapi_schema,
    parse_manifests,
    spec_schema,
)
from support.paths import ROOT

MUTABLE = {"suspend", "maxConcurrentRows", "budget"}
BASE: dict[str, Any] = {"agentRef": {"name": "agent"}, "dataset": {"maxRows": 3}}


def _rules_broken(schema: Mapping[str, Any], old: Any, new: Any, path: str) -> Iterator[str]:
    for rule in schema.get("x-kubernetes-validations", []):
        if not is_transition_rule(rule["rule"]):
            continue
        environment = celpy.Environment()
        program = environment.program(environment.compile(rule["rule"]))
        held = program.evaluate({"self": celpy.json_to_cel(new),
                                 "oldSelf": celpy.json_to_cel(old)})
        if not held:
            yield f"{path}: {' '.join(rule['message'].split())}"
    if isinstance(old, dict) and isinstance(new, dict):
        for name, prop in schema.get("properties", {}).items():
            if name in old and name in new:
                yield from _rules_broken(prop, old[name], new[name], f"{path}.{name}")


def update_problems(old: dict[str, Any], new: dict[str, Any],
                    kind: str = "Evaluation") -> list[str]:
    """What the apiserver's transition rules say about changing spec ``old`` to ``new``."""
    schema = spec_schema(kind)
    return list(_rules_broken(schema, apply_defaults(old, schema), apply_defaults(new, schema),
                              "spec"))


def changed(**fields: Any) -> dict[str, Any]:
    return {**BASE, **fields}


# --- Immutability ---------------------------------------------------------------------------


@pytest.mark.parametrize("new", [
    BASE, changed(suspend=True), changed(maxConcurrentRows=20),
    changed(suspend=True, maxConcurrentRows=2),
    # A default written out is no change.
    changed(repeats=1, dataset={"maxRows": 3, "split": "test"}, runner={"infraRetries": 2}),
], ids=["same", "suspend", "maxConcurrentRows", "both", "explicit-defaults"])
def test_suspend_and_max_concurrent_rows_may_change(new: dict[str, Any]) -> None:
    assert update_problems(BASE, new) == []


@pytest.mark.parametrize(("new", "field"), [
    (changed(dataset={"maxRows": 10}), "dataset"),
    (changed(dataset={"maxRows": 3, "name": "SWE-bench/SWE-bench_Lite"}), "dataset"),
    (changed(dataset={"maxRows": 3, "instanceIds": ["django__django-11099"]}), "dataset"),
    (changed(repeats=3), "repeats"),
    (changed(agentRef={"name": "other"}), "agentRef"),
    (changed(greenAgentModel="openai/gpt-4o"), "greenAgentModel"),
    (changed(promptSensitivity={"enabled": True}), "promptSensitivity"),
    (changed(timeouts={"testSeconds": 60}), "timeouts"),
    (changed(timeouts={"podSeconds": 9000}), "timeouts"),
    (changed(runner={"image": "mine:2"}), "runner"),
    (changed(runner={"tolerations": [{"key": "k", "operator": "Exists"}]}), "runner"),
    (changed(results={"store": {"url": "s3://proctor-results/x"}}), "results"),
    (changed(images={"prePull": True}), "images"),
    (changed(images={"prePullParallelism": 8}), "images"),
])
def test_every_other_field_is_immutable(new: dict[str, Any], field: str) -> None:
    assert update_problems(BASE, new) == [
        f"spec.{field}: {field} cannot change after creation; create a new Evaluation"]


def test_agent_ref_cannot_be_added_or_removed() -> None:
    gold = {"predictions": {"source": "gold"}}
    assert update_problems(BASE, {**BASE, **gold} | {"agentRef": None}) == [
        "spec: agentRef cannot be added or removed after creation; create a new Evaluation",
        "spec.predictions: predictions cannot change after creation; create a new Evaluation"]
    assert update_problems(gold, {**gold, "agentRef": {"name": "a"}})[0].startswith(
        "spec: agentRef cannot be added or removed")


def test_every_spec_field_but_the_mutable_ones_has_an_immutability_rule() -> None:
    # A field added later must choose: immutable (a rule), or listed in MUTABLE here.
    properties = spec_schema("Evaluation")["properties"]
    guarded = {name for name, prop in properties.items()
               if any(rule["rule"] == "self == oldSelf"
                      for rule in prop.get("x-kubernetes-validations", []))}
    assert guarded == set(properties) - MUTABLE
    assert not any(is_transition_rule(rule["rule"]) for name in MUTABLE
                   for rule in properties[name].get("x-kubernetes-validations", []))


def test_the_agent_crd_has_no_transition_rules() -> None:
    assert update_problems({"endpoint": "http://a/"}, {"endpoint": "http://b/"},
                           kind="AgentUnderTest") == []


def test_transition_rules_are_told_by_their_identifiers() -> None:
    assert is_transition_rule("self == oldSelf")
    assert is_transition_rule("has(self.a) == has(oldSelf.a)")
    assert not is_transition_rule("self.name != 'oldSelf'")
    assert not is_transition_rule("self.oldSelfish == 1")


def test_a_new_manifest_skips_the_transition_rules() -> None:
    text = ("apiVersion: proctor.dev/v1alpha1\nkind: Evaluation\nmetadata: {name: demo}\n"
            "spec: {agentRef: {name: agent}, suspend: true}\n")
    (evaluation,) = parse_manifests(text, "test.yaml")
    assert evaluation.spec.suspend is True


# --- Status schema and printer columns ------------------------------------------------------


@pytest.mark.parametrize("kind", ["Evaluation", "AgentUnderTest"])
def test_conditions_are_a_list_map_keyed_by_type(kind: str) -> None:
    status = openapi_schema(kind)["properties"]["status"]
    # kopf keeps its own progress under status.kopf: unknown status fields must survive.
    assert status["x-kubernetes-preserve-unknown-fields"] is True
    conditions = status["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    assert set(item["required"]) >= {"type", "status", "reason", "lastTransitionTime"}
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert status["properties"]["observedGeneration"]["type"] == "integer"


def _schema_at(schema: Mapping[str, Any], json_path: str) -> Mapping[str, Any] | None:
    """The schema node a printer column's jsonPath reads (filters read list items)."""
    node: Mapping[str, Any] | None = schema
    for part in re.sub(r"\[\?\(.*?\)\]", ".[]", json_path).strip(".").split("."):
        if node is None:
            return None
        node = node.get("items") if part == "[]" else node.get("properties", {}).get(part)
    return node


@pytest.mark.parametrize("kind", ["Evaluation", "AgentUnderTest"])
def test_printer_columns_read_fields_the_schema_has(kind: str) -> None:
    (version,) = crd(kind)["spec"]["versions"]
    columns = version["additionalPrinterColumns"]
    assert columns[-1] == {"name": "Age", "type": "date",
                           "jsonPath": ".metadata.creationTimestamp"}
    root = dict(version["schema"]["openAPIV3Schema"])
    for column in columns[:-1]:
        node = _schema_at(root, column["jsonPath"])
        assert node is not None, column["jsonPath"]
        assert node["type"] == column["type"], column["name"]
        assert column.get("description")


def test_the_evaluation_columns() -> None:
    (version,) = crd("Evaluation")["spec"]["versions"]
    columns = version["additionalPrinterColumns"]
    shown = [c["name"] for c in columns if not c.get("priority")]
    assert shown == ["Agent", "Resolved", "Done", "Succeeded", "Reason", "Age"]
    # The operator's status.reason (a default column: Degraded, AgentNotFound and
    # LocalEndpoint must be seen without -o wide), in the status schema.
    (reason,) = [c for c in columns if c["name"] == "Reason"]
    assert reason["jsonPath"] == ".status.reason"
    assert "reason" in version["schema"]["openAPIV3Schema"]["properties"]["status"][
        "properties"]



# --- Names ----------------------------------------------------------------------------------

# The built-in resources of the groups a Proctor user works with beside it, as Kubernetes' own
# discovery serves them (GET /api/v1, /apis/apps/v1, /apis/batch/v1, /apis/networking.k8s.io/v1
# and /apis/events.k8s.io/v1 of 1.33+; the kubernetes repository keeps these documents under
# api/discovery/): name, singularName, then shortNames. kubectl resolves a short name to a
# built-in resource before a custom one, so a CRD that claims one too is never reached by it.
BUILT_IN: dict[str, list[tuple[str, ...]]] = {
    "": [
        ("bindings", "binding"), ("componentstatuses", "componentstatus", "cs"),
        ("configmaps", "configmap", "cm"), ("endpoints", "endpoints", "ep"),
        ("events", "event", "ev"), ("limitranges", "limitrange", "limits"),
        ("namespaces", "namespace", "ns"), ("nodes", "node", "no"),
        ("persistentvolumeclaims", "persistentvolumeclaim", "pvc"),
        ("persistentvolumes", "persistentvolume", "pv"), ("pods", "pod", "po"),
        ("podtemplates", "podtemplate"), ("replicationcontrollers", "replicationcontroller", "rc"),
        ("resourcequotas", "resourcequota", "quota"), ("secrets", "secret"),
        ("serviceaccounts", "serviceaccount", "sa"), ("services", "service", "svc"),
    ],
    "apps": [
        ("controllerrevisions", "controllerrevision"), ("daemonsets", "daemonset", "ds"),
        ("deployments", "deployment", "deploy"), ("replicasets", "replicaset", "rs"),
        ("statefulsets", "statefulset", "sts"),
    ],
    "batch": [("cronjobs", "cronjob", "cj"), ("jobs", "job")],
    "networking.k8s.io": [
        ("ingressclasses", "ingressclass"), ("ingresses", "ingress", "ing"),
        ("ipaddresses", "ipaddress", "ip"), ("networkpolicies", "networkpolicy", "netpol"),
        ("servicecidrs", "servicecidr"),
    ],
    "events.k8s.io": [("events", "event", "ev")],  # Events again: `ev` is claimed twice
}
BUILT_IN_NAMES = {name for resources in BUILT_IN.values() for names in resources
                  for name in names}

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "charts" / "proctor" / "templates" / "NOTES.txt",
        *sorted((ROOT / "examples").glob("*.yaml"))]


@pytest.mark.parametrize("kind", ["Evaluation", "AgentUnderTest"])
def test_no_name_of_a_crd_clashes_with_a_built_in_resource(kind: str) -> None:
    names = crd(kind)["spec"]["names"]
    ours = {names["plural"], names["singular"], *names.get("shortNames", [])}
    assert names.get("shortNames"), f"{kind} has no short name"
    assert ours.isdisjoint(BUILT_IN_NAMES), ours & BUILT_IN_NAMES


def _kubectl_resources(text: str) -> set[str]:
    """The resource words of the kubectl commands in a text (`kubectl get evals -w`)."""
    verbs = "get|describe|patch|edit|delete|wait|explain"
    return set(re.findall(rf"kubectl(?: -n \S+)? (?:{verbs}) ([a-z]+)\b", text))


def test_the_docs_use_the_crds_short_names_and_no_built_in_one() -> None:
    used = set().union(*(_kubectl_resources(doc.read_text()) for doc in DOCS))
    short = {name for kind in ("Evaluation", "AgentUnderTest")
             for name in crd(kind)["spec"]["names"]["shortNames"]}
    assert short <= used, f"the docs never show {short - used}"
    # Only the resources the docs mean to show: Jobs (and their pods), an Evaluation's
    # NetworkPolicy, never Events by `ev`.
    assert used & BUILT_IN_NAMES <= {"jobs", "pods", "networkpolicy"}, used & BUILT_IN_NAMES
