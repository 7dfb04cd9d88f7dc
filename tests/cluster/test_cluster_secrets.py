"""An agent's token from a Secret on the real cluster (issue 31, auth and secrets).

The agent (a reference agent on the node's address) answers 401 to every request without
`Authorization: Bearer <token>`, its card included. The operator, in this process, reads
the token from the Secret that spec.auth names for its card fetch (Ready stays False,
AuthSecretUnreadable, while the Secret is missing); each solve step gets it from the Secret
as an environment variable. Then the Secret's value is looked for everywhere it must not
be: the Evaluation's and the AgentUnderTest's status, the namespace's events, the
operator's log, the logs of every step of every pod, every ConfigMap (the kept results),
and the folder `proctor results pull` writes.
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
import secrets
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from proctor.agents.server import start_reference_agent
from proctor.k8s.machinery.api import Kube
from proctor.k8s.pull import pull
from support.leaks import files_holding
from support.real_cluster_fixtures import in_process_operator, wait_for

pytest_plugins = ["support.real_cluster_fixtures"]
pytestmark = [pytest.mark.cluster, pytest.mark.slow]

GROUP = ("proctor.dev", "v1alpha1")
ROWS = 2
RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "768Mi"}}


class Lines(logging.Handler):
    """Every record the operator's loggers emit, formatted with its arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def bodies(namespace: str, endpoint: str, instance_registry: str) -> tuple[dict, dict]:
    agent = {"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
             "metadata": {"name": "locked", "namespace": namespace},
             "spec": {"endpoint": endpoint, "requestTimeoutSeconds": 60,
                      "auth": {"secretRef": {"name": "agent-token", "key": "token"}}}}
    evaluation = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                  "metadata": {"name": "demo", "namespace": namespace},
                  "spec": {"agentRef": {"name": "locked"},
                           "dataset": {"name": "proctor-demo", "maxRows": ROWS},
                           "maxConcurrentRows": 2,
                           "runner": {"instanceImageRegistry": instance_registry,
                                      "resources": RESOURCES}}}
    return agent, evaluation


def _text(obj: Any) -> str:
    return json.dumps(obj, default=str)


def configmap_text(configmap: Any) -> str:
    """A ConfigMap's data and its binaryData decoded (the kept logs and patch, gzipped)."""
    parts = [_text(configmap.to_dict())]
    for value in (configmap.binary_data or {}).values():
        data = base64.b64decode(value)
        parts.append((gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
                     .decode("utf-8", "replace"))
    return "\n".join(parts)


def test_a_secrets_value_appears_nowhere(real_cluster, cluster_images, cluster_namespace,
                                         cluster_api_client, monkeypatch, tmp_path: Path):
    ns, token = cluster_namespace, f"proctor-{secrets.token_hex(16)}"
    core = kubernetes.client.CoreV1Api(cluster_api_client)
    custom = kubernetes.client.CustomObjectsApi(cluster_api_client)
    monkeypatch.setenv("PROCTOR_JOB_TTL_SECONDS", "600")  # the pods stay, logs and all
    lines = Lines()
    for name in ("proctor", "kopf", "httpx"):
        logging.getLogger(name).addHandler(lines)
    agent_body, eval_body = bodies(ns, "", cluster_images.instance_registry)

    def ready() -> dict:
        status = custom.get_namespaced_custom_object(*GROUP, ns, "agentundertests",
                                                     "locked").get("status") or {}
        return next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})

    def condition(type_: str) -> dict:
        status = custom.get_namespaced_custom_object(*GROUP, ns, "evaluations",
                                                     "demo").get("status") or {}
        return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})

    try:
        with start_reference_agent("oracle", token=token, host=real_cluster.node_ip) as agent, \
                in_process_operator(real_cluster, ns, cluster_images.runner) as runner:
            agent_body["spec"]["endpoint"] = agent.url
            for body in (agent_body, eval_body):
                custom.create_namespaced_custom_object(*GROUP, ns, body["kind"].lower() + "s",
                                                       body)
            # No Secret yet: not ready, naming the Secret; the Evaluation waits.
            wait_for(lambda: ready().get("reason") == "AuthSecretUnreadable", 60)
            assert "agent-token" in ready()["message"]
            core.create_namespaced_secret(ns, {"metadata": {"name": "agent-token"},
                                               "stringData": {"token": token}})
            # The card is fetched with the token (the agent refuses it otherwise).
            wait_for(lambda: ready().get("reason") == "CardFetched", 60)
            wait_for(lambda: condition("Succeeded").get("status") == "True", 420,
                     1, lambda: f"the Evaluation never succeeded: {condition('Running')}")
        operator_log = runner.output  # kopf's runner has its output once it stopped
        evaluation = custom.get_namespaced_custom_object(*GROUP, ns, "evaluations", "demo")
        assert evaluation["status"]["results"]["resolvedPct"] == 1.0  # the oracle answered
        agent_status = custom.get_namespaced_custom_object(*GROUP, ns, "agentundertests",
                                                           "locked")["status"]
        events = [e.to_dict() for e in core.list_namespaced_event(ns).items]
        configmaps = core.list_namespaced_config_map(ns).items
        pods = core.list_namespaced_pod(ns).items
        steps = {(p.metadata.name, c.name): core.read_namespaced_pod_log(
                     p.metadata.name, ns, container=c.name)
                 for p in pods for c in [*(p.spec.init_containers or []), *p.spec.containers]}
        pulled = tmp_path / "pulled"
        assert pull(Kube(cluster_api_client), ns, "demo", pulled) == ROWS
    finally:
        for name in ("proctor", "kopf", "httpx"):
            logging.getLogger(name).removeHandler(lines)

    # The guards: each place looked at holds what it should, so a miss is not for want of it.
    assert len(pods) == ROWS and any("Proctor Patch Begin" in log for log in steps.values())
    assert any((c.metadata.labels or {}).get("app.kubernetes.io/component") == "result"
               and c.binary_data for c in configmaps)
    assert lines.lines and events and (pulled / "summary.json").exists()
    assert token not in _text(evaluation["status"])
    assert token not in _text(agent_status)
    assert token not in _text(events)
    assert token not in operator_log + "\n".join(lines.lines)
    assert [key for key, log in steps.items() if token in log] == []
    assert [c.metadata.name for c in configmaps if token in configmap_text(c)] == []
    assert files_holding(pulled, token) == []
