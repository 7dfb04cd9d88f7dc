"""Prompt variants on a real Kubernetes (scripts/cluster.sh): the reduced reliability demo.

3 demo tasks x (original + 2 template variants) x 2 repeats, for the oracle and the
`sensitive` reference agent (36 Jobs), run by the real operator in this process
(`in_process_operator`, as tests/cluster/test_operator.py runs it) against agents served by this
process on the node's address. Both Evaluations end Succeeded; their results, pulled
(`proctor results pull`), give the same analysis (`proctor analyze`'s figures) as
`proctor run` of the same manifests, figure for figure, and the status's reliability
figures equal those of the engine's results. The full reliability demo (`proctor demo
reliability`'s manifests on a cluster) is the manual check.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from proctor.agents.kinds import Tasks, solver_for
from proctor.agents.server import SolverExecutor, agent_card, build_app, start_in_thread
from proctor.analysis.load import load_agents
from proctor.analysis.run import compute
from proctor.datasets import demo
from proctor.formats.manifest import parse_resource
from proctor.k8s.evaluation import figures
from proctor.k8s.machinery.api import Kube
from proctor.k8s.pull import pull
from proctor.local.engine import run_evaluation
from proctor.results import ResultsFolder
from support.real_cluster_fixtures import RealCluster, in_process_operator, wait_for

pytest_plugins = ["support.real_cluster_fixtures"]
pytestmark = [pytest.mark.cluster, pytest.mark.slow]

GROUP = ("proctor.dev", "v1alpha1")
KINDS = ("oracle", "sensitive")
TASKS, VARIANTS, REPEATS = 3, 2, 2
ITEMS = TASKS * (1 + VARIANTS) * REPEATS
RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "768Mi"}}


@pytest.fixture
def agents(real_cluster: RealCluster) -> Iterator[dict[str, str]]:
    """Each reference agent on the node's address (the pods reach this host there); the
    sensitive one unseeded: its answer depends on the wording only, so the cluster and
    the engine get the same answers whatever order they ask in."""
    tasks = Tasks.load()
    servers = {kind: start_in_thread(
        lambda url, k=kind: build_app(SolverExecutor(solver_for(k, tasks)), agent_card(k, url)),
        real_cluster.node_ip) for kind in KINDS}
    yield {kind: server.url for kind, server in servers.items()}
    for server in servers.values():
        server.stop()


def manifests(namespace: str, kind: str, url: str, registry: str) -> tuple[dict, dict]:
    agent = {"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
             "metadata": {"name": kind, "namespace": namespace},
             "spec": {"endpoint": url, "requestTimeoutSeconds": 60, "taskData": True}}
    evaluation = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                  "metadata": {"name": kind, "namespace": namespace},
                  "spec": {"agentRef": {"name": kind},
                           "dataset": {"name": "proctor-demo", "maxRows": TASKS},
                           "repeats": REPEATS, "maxConcurrentRows": 4,
                           "promptSensitivity": {"enabled": True, "strategy": "template",
                                                 "numVariations": VARIANTS},
                           "timeouts": {"testSeconds": 300},
                           "runner": {"instanceImageRegistry": registry,
                                      "resources": RESOURCES}}}
    return agent, evaluation


def comparable(fig: Any) -> str:
    """An agent's analysis figures, less those of measured time (C_res of latency: a pod
    and a local sandbox take different times); NaN reads as nan on both sides."""
    figs = dataclasses.asdict(fig)
    figs["C_res"] = {k: v for k, v in figs["C_res"].items() if k != "latency"}
    figs["intervals"] = {k: v for k, v in figs["intervals"].items() if k != "C_res_latency"}
    return repr(figs)


def test_the_reduced_reliability_demo_gives_the_engines_figures(
        real_cluster, cluster_images, cluster_namespace, cluster_api_client, agents,
        tmp_path: Path) -> None:
    assert len(demo.load_rows()) >= TASKS
    ns = cluster_namespace
    custom = kubernetes.client.CustomObjectsApi(cluster_api_client)
    bodies = {kind: manifests(ns, kind, url, cluster_images.instance_registry)
              for kind, url in agents.items()}
    for agent_body, eval_body in bodies.values():
        custom.create_namespaced_custom_object(*GROUP, ns, "agentundertests", agent_body)
        custom.create_namespaced_custom_object(*GROUP, ns, "evaluations", eval_body)

    def status(kind: str) -> dict:
        return custom.get_namespaced_custom_object(*GROUP, ns, "evaluations",
                                                   kind).get("status") or {}

    def succeeded(kind: str) -> bool:
        return any(c["type"] == "Succeeded" and c["status"] == "True"
                   for c in status(kind).get("conditions") or [])

    with in_process_operator(real_cluster, ns, runner_image=cluster_images.runner):
        wait_for(lambda: all(succeeded(k) for k in KINDS), 900, 1,
                 lambda: f"not all Succeeded: {[status(k) for k in KINDS]}")

    for kind in KINDS:
        agent_body, eval_body = bodies[kind]
        st = status(kind)
        assert st["items"]["done"] == st["items"]["total"] == ITEMS
        assert st["variantsFailed"] == 0
        local = tmp_path / "local" / kind
        run_evaluation(parse_resource(eval_body), local, progress=False,
                       agents=[parse_resource(agent_body)])
        pulled = tmp_path / "pulled" / kind
        assert pull(Kube(cluster_api_client), ns, kind, pulled) == ITEMS
        engine_results = ResultsFolder(local).load()
        assert {r.item_id for r in ResultsFolder(pulled).load()} == \
            {r.item_id for r in engine_results}, "the cluster's items are the engine's"
        assert (pulled / "variants.jsonl").read_text().splitlines() == \
            (local / "variants.jsonl").read_text().splitlines()
        # The status's reliability figures are those of the engine's results.
        mine = figures.reliability(st["agent"], engine_results)
        assert mine is not None and st["reliability"] == figures.status_of(mine)
        summary = json.loads((pulled / "summary.json").read_text())
        assert summary["results"] == json.loads((local / "summary.json").read_text())["results"]

    # `proctor analyze` of the pulled folders equals that of the engine's, figure for figure.
    engine = compute(load_agents([tmp_path / "local" / k for k in KINDS]))
    cluster = compute(load_agents([tmp_path / "pulled" / k for k in KINDS]))
    assert [comparable(f) for f in cluster.figures] == [comparable(f) for f in engine.figures]
    assert repr(cluster.task_rows) == repr(engine.task_rows)
    sensitive = next(f for f in engine.figures if f.agent == "sensitive")
    assert sensitive.variants == 1 + VARIANTS and sensitive.repeats == REPEATS
