"""LLM prompt variants on a real Kubernetes (scripts/cluster.sh): the Evaluation's variants
Job calls the scripted OpenAI-compatible server (tests/support/llm_servers.py) on the node's
address with the key from a Secret the Evaluation names; the operator (in this process, as
tests/cluster/test_operator.py runs it) reads the variants from the Job's log and runs 2 tasks x
(original + 1 llm variant) x 1 repeat with the oracle agent, to Succeeded. The key appears
nowhere in the status, the Events, the operator's log, the pods' logs or the kept results.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from proctor.agents.kinds import Tasks, solver_for
from proctor.agents.server import SolverExecutor, agent_card, build_app, start_in_thread
from proctor.k8s.features.llm_variants import CONDITION
from proctor.variants.template import reword
from support.llm_servers import ScriptedModel
from support.real_cluster_fixtures import RealCluster, in_process_operator, wait_for

pytest_plugins = ["support.real_cluster_fixtures"]
pytestmark = [pytest.mark.cluster, pytest.mark.slow]

GROUP = ("proctor.dev", "v1alpha1")
KEY = "sk-cluster-variants-key-7d1e9b"
TASKS = 2
ITEMS = TASKS * (1 + 1) * 1
RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "768Mi"}}


def _rewordings(prompt: str) -> str:
    report = prompt.split("variations of this report:\n\n", 1)[1]
    return json.dumps({"variant_1": reword(report, "formal")})


@pytest.fixture
def model(real_cluster: RealCluster) -> Iterator[ScriptedModel]:
    """The scripted model on the node's address, where the variants Job's pod reaches it."""
    srv = ScriptedModel("openai", host=real_cluster.node_ip)
    srv.script = [_rewordings] * TASKS
    yield srv
    srv.close()


@pytest.fixture
def oracle(real_cluster: RealCluster) -> Iterator[str]:
    server = start_in_thread(lambda url: build_app(
        SolverExecutor(solver_for("oracle", Tasks.load())), agent_card("oracle", url)),
        real_cluster.node_ip)
    yield server.url
    server.stop()


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


def manifests(namespace: str, agent_url: str, model_base: str, registry: str
              ) -> tuple[dict, dict, dict]:
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "llm-key", "namespace": namespace},
              "stringData": {"token": KEY}}
    agent = {"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
             "metadata": {"name": "oracle", "namespace": namespace},
             "spec": {"endpoint": agent_url, "requestTimeoutSeconds": 60, "taskData": True}}
    evaluation = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                  "metadata": {"name": "llm", "namespace": namespace},
                  "spec": {"agentRef": {"name": "oracle"},
                           "dataset": {"name": "proctor-demo", "maxRows": TASKS},
                           "maxConcurrentRows": 4,
                           "promptSensitivity": {
                               "enabled": True, "strategy": "llm", "numVariations": 1,
                               "model": "openai/test-model", "apiBase": f"{model_base}/v1",
                               "apiKeySecretRef": {"name": "llm-key", "key": "token"}},
                           "timeouts": {"testSeconds": 300},
                           "runner": {"instanceImageRegistry": registry,
                                      "resources": RESOURCES}}}
    return secret, agent, evaluation


def test_llm_variants_run_with_the_key_from_a_secret_that_shows_nowhere(
        real_cluster, cluster_images, cluster_namespace, cluster_api_client, model, oracle
) -> None:
    ns = cluster_namespace
    core = kubernetes.client.CoreV1Api(cluster_api_client)
    custom = kubernetes.client.CustomObjectsApi(cluster_api_client)
    secret, agent, evaluation = manifests(ns, oracle, model.base,
                                          cluster_images.instance_registry)
    core.create_namespaced_secret(ns, secret)
    custom.create_namespaced_custom_object(*GROUP, ns, "agentundertests", agent)
    custom.create_namespaced_custom_object(*GROUP, ns, "evaluations", evaluation)

    def status() -> dict:
        return custom.get_namespaced_custom_object(*GROUP, ns, "evaluations",
                                                   "llm").get("status") or {}

    def condition(type_: str) -> dict:
        return next((c for c in status().get("conditions") or [] if c["type"] == type_), {})

    with in_process_operator(real_cluster, ns, runner_image=cluster_images.runner) as runner:
        wait_for(lambda: condition("Succeeded").get("status") == "True", 420, 1,
                 lambda: f"not Succeeded: {status()}")

    st = status()
    assert st["items"]["done"] == st["items"]["total"] == ITEMS
    assert st["variantsFailed"] == 0
    assert (condition(CONDITION)["status"], condition(CONDITION)["reason"]) == ("True",
                                                                                 "Generated")
    assert len(model.calls) == TASKS, "one model call per task, by the variants Job only"
    assert {c["authorization"] for c in model.calls} == {f"Bearer {KEY}"}

    # The key, nowhere: status, Events, the operator's log, every pod's log, kept results.
    pods = core.list_namespaced_pod(ns).items
    assert any(p.metadata.name.startswith("llm-variants") for p in pods)
    logs, kept = _pod_logs(core, ns), _configmaps(core, ns)
    assert any("proctorVariants" in text for text in logs), "the variants Job's log is read"
    assert len(kept) >= ITEMS, "each item's kept result is read"
    assert "Read the llm variants evaluation=llm" in runner.output  # kopf's, once stopped
    events = [e.message or "" for e in core.list_namespaced_event(ns).items]
    for where, text in (("status", json.dumps(st)), ("events", "\n".join(events)),
                        ("operator log", runner.output), ("pod logs", "\n".join(logs)),
                        ("configmaps", "\n".join(kept))):
        assert KEY not in text, f"the key is in the {where}"
