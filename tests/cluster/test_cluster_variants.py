"""Prompt variants on a real Kubernetes (scripts/cluster.sh), both strategies, run by the real
operator in this process (`in_process_operator`, as tests/cluster/test_operator.py runs it)
against reference agents served by this process on the node's address.

Template variants: the reduced reliability demo. 3 demo tasks x (original + 2 template
variants) x 2 repeats, for the oracle and the `sensitive` reference agent (36 Jobs). Both
Evaluations end Succeeded; their results, pulled (`proctor results pull`), give the same
analysis (`proctor analyze`'s figures) as `proctor run` of the same manifests, figure for
figure, and the status's reliability figures equal those of the engine's results. The full
reliability demo (`proctor demo reliability`'s manifests on a cluster) is the manual check.

LLM variants: the Evaluation's variants Job calls the scripted OpenAI-compatible server
(tests/support/llm_servers.py) on the node's address with the key from a Secret the
Evaluation names; the operator reads the variants from the Job's log and runs 2 tasks x
(original + 1 llm variant) x 1 repeat with the oracle agent, to Succeeded. The key appears
nowhere in the status, the Events, the operator's log, the pods' logs or the kept results.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import gzip
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
from proctor.k8s.features.llm_variants import CONDITION
from proctor.k8s.machinery.api import Kube
from proctor.k8s.pull import pull
from proctor.local.engine import run_evaluation
from proctor.results import ResultsFolder
from proctor.variants.template import reword
from support.llm_servers import ScriptedModel
from support.real_cluster_fixtures import RealCluster, in_process_operator, wait_for

pytest_plugins = ["support.real_cluster_fixtures"]
pytestmark = [pytest.mark.cluster, pytest.mark.slow]

GROUP = ("proctor.dev", "v1alpha1")
RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "768Mi"}}
KINDS = ("oracle", "sensitive")
TASKS, VARIANTS, REPEATS = 3, 2, 2
ITEMS = TASKS * (1 + VARIANTS) * REPEATS
"""The template variants' run: its tasks, variants per task, repeats, and items."""
KEY = "sk-cluster-variants-key-7d1e9b"
LLM_TASKS = 2
LLM_ITEMS = LLM_TASKS * (1 + 1) * 1
"""The llm variants' run: one variant per task, one repeat."""


@pytest.fixture
def agents(real_cluster: RealCluster) -> Iterator[dict[str, str]]:
    """Each reference agent of KINDS on the node's address (the pods reach this host
    there); the sensitive one unseeded: its answer depends on the wording only, so the
    cluster and the engine get the same answers whatever order they ask in."""
    tasks = Tasks.load()
    servers = {kind: start_in_thread(
        lambda url, k=kind: build_app(SolverExecutor(solver_for(k, tasks)), agent_card(k, url)),
        real_cluster.node_ip) for kind in KINDS}
    yield {kind: server.url for kind, server in servers.items()}
    for server in servers.values():
        server.stop()


def agent_manifest(namespace: str, name: str, url: str) -> dict:
    return {"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"endpoint": url, "requestTimeoutSeconds": 60, "taskData": True}}


def evaluation_manifest(namespace: str, name: str, agent: str, rows: int,
                        sensitivity: dict[str, Any], registry: str, **spec: Any) -> dict:
    return {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"agentRef": {"name": agent},
                     "dataset": {"name": "proctor-demo", "maxRows": rows},
                     **spec, "maxConcurrentRows": 4,
                     "promptSensitivity": {"enabled": True, **sensitivity},
                     "timeouts": {"testSeconds": 300},
                     "runner": {"instanceImageRegistry": registry, "resources": RESOURCES}}}


def evaluation_status(custom: Any, namespace: str, name: str) -> dict:
    return custom.get_namespaced_custom_object(*GROUP, namespace, "evaluations",
                                               name).get("status") or {}


def condition_of(status: dict, type_: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


# --- Template variants: the engine's figures -------------------------------------------------


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
    template = {"strategy": "template", "numVariations": VARIANTS}
    bodies = {kind: (agent_manifest(ns, kind, url),
                     evaluation_manifest(ns, kind, kind, TASKS, template,
                                         cluster_images.instance_registry, repeats=REPEATS))
              for kind, url in agents.items()}
    for agent_body, eval_body in bodies.values():
        custom.create_namespaced_custom_object(*GROUP, ns, "agentundertests", agent_body)
        custom.create_namespaced_custom_object(*GROUP, ns, "evaluations", eval_body)

    def status(kind: str) -> dict:
        return evaluation_status(custom, ns, kind)

    def succeeded(kind: str) -> bool:
        return condition_of(status(kind), "Succeeded").get("status") == "True"

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


# --- LLM variants: the key from a Secret, shown nowhere --------------------------------------


def _rewordings(prompt: str) -> str:
    report = prompt.split("variations of this report:\n\n", 1)[1]
    return json.dumps({"variant_1": reword(report, "formal")})


@pytest.fixture
def model(real_cluster: RealCluster) -> Iterator[ScriptedModel]:
    """The scripted model on the node's address, where the variants Job's pod reaches it."""
    srv = ScriptedModel("openai", host=real_cluster.node_ip)
    srv.script = [_rewordings] * LLM_TASKS
    yield srv
    srv.close()


def _pod_logs(core: Any, namespace: str) -> list[str]:
    """Every container's log of every pod left in the namespace."""
    logs = []
    for pod in core.list_namespaced_pod(namespace).items:
        for container in [*(pod.spec.init_containers or []), *pod.spec.containers]:
            with contextlib.suppress(kubernetes.client.ApiException):  # not started
                logs.append(core.read_namespaced_pod_log(pod.metadata.name, namespace,
                                                         container=container.name))
    return logs


def _configmaps(core: Any, namespace: str) -> list[str]:
    """Every ConfigMap's text: its data, and its binaryData unzipped (a kept result's
    patch and logs)."""
    texts = []
    for cm in core.list_namespaced_config_map(namespace).items:
        texts.append(json.dumps(cm.data or {}))
        for value in (cm.binary_data or {}).values():
            raw = base64.b64decode(value)
            texts.append((gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
                          ).decode("utf-8", "replace"))
    return texts


def test_llm_variants_run_with_the_key_from_a_secret_that_shows_nowhere(
        real_cluster, cluster_images, cluster_namespace, cluster_api_client, model, agents
) -> None:
    ns = cluster_namespace
    core = kubernetes.client.CoreV1Api(cluster_api_client)
    custom = kubernetes.client.CustomObjectsApi(cluster_api_client)
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "llm-key", "namespace": ns}, "stringData": {"token": KEY}}
    llm = {"strategy": "llm", "numVariations": 1, "model": "openai/test-model",
           "apiBase": f"{model.base}/v1",
           "apiKeySecretRef": {"name": "llm-key", "key": "token"}}
    core.create_namespaced_secret(ns, secret)
    custom.create_namespaced_custom_object(*GROUP, ns, "agentundertests",
                                           agent_manifest(ns, "oracle", agents["oracle"]))
    custom.create_namespaced_custom_object(*GROUP, ns, "evaluations", evaluation_manifest(
        ns, "llm", "oracle", LLM_TASKS, llm, cluster_images.instance_registry))

    def status() -> dict:
        return evaluation_status(custom, ns, "llm")

    def condition(type_: str) -> dict:
        return condition_of(status(), type_)

    with in_process_operator(real_cluster, ns, runner_image=cluster_images.runner) as runner:
        wait_for(lambda: condition("Succeeded").get("status") == "True", 420, 1,
                 lambda: f"not Succeeded: {status()}")

    st = status()
    assert st["items"]["done"] == st["items"]["total"] == LLM_ITEMS
    assert st["variantsFailed"] == 0
    assert (condition(CONDITION)["status"], condition(CONDITION)["reason"]) == ("True",
                                                                                 "Generated")
    assert len(model.calls) == LLM_TASKS, "one model call per task, by the variants Job only"
    assert {c["authorization"] for c in model.calls} == {f"Bearer {KEY}"}

    # The key, nowhere: status, Events, the operator's log, every pod's log, kept results.
    pods = core.list_namespaced_pod(ns).items
    assert any(p.metadata.name.startswith("llm-variants") for p in pods)
    logs, kept = _pod_logs(core, ns), _configmaps(core, ns)
    assert any("proctorVariants" in text for text in logs), "the variants Job's log is read"
    assert len(kept) >= LLM_ITEMS, "each item's kept result is read"
    assert "Read the llm variants evaluation=llm" in runner.output  # kopf's, once stopped
    events = [e.message or "" for e in core.list_namespaced_event(ns).items]
    for where, text in (("status", json.dumps(st)), ("events", "\n".join(events)),
                        ("operator log", runner.output), ("pod logs", "\n".join(logs)),
                        ("configmaps", "\n".join(kept))):
        assert KEY not in text, f"the key is in the {where}"
