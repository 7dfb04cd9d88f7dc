"""What a cluster admin and a user see on a real Kubernetes (scripts/cluster.sh): the demo's
pods admitted under Pod Security `baseline`, the server's `restricted` warnings only for the
test step's documented exceptions, refusals at `kubectl apply`, Events from proctor, logs
of a finished item's steps, a finished Evaluation that outlives its agent, and an agent's
maxConcurrentTasks held across two Evaluations (with a control run that exceeds it), a
service agent run by the operator, and an Evaluation that waits for an unreachable agent.

It runs where the other real-cluster tests run (tests/support/real_cluster.py: skipped, saying why,
where no cluster can start; a failure then with PROCTOR_REQUIRE_CLUSTER=1). It installs
the chart as its own release (`part2`, in part2-system) serving only its own namespaces, so
it can share a cluster; it applies crds/ first (the CRDs are cluster-wide). The runner image
is built and imported under its own tag (PROCTOR_TEST_RUNNER_IMAGE, default
proctor-runner:cluster-part2).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from proctor.core.spec import VARIANTS_FILE_ON_CLUSTER
from proctor.k8s.agents.status import LOCAL_ENDPOINT
from proctor.k8s.children import security
from support.cluster_admin import (
    Cluster,
    build_and_import,
    install_release,
    namespace,
    sh,
    wait,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
RELEASE, SYSTEM = "part2", "part2-system"
DEMO, SLOTS = "part2-demo", "part2-slots"
IMAGE = os.environ.get("PROCTOR_TEST_RUNNER_IMAGE", "proctor-runner:cluster-part2")
SMALL = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}}
"""The Job pods' resources: the one node runs several at once."""


def agent_objects(ns: str, name: str, max_tasks: int) -> list[dict]:
    """The mixed reference agent behind a Service, and its AgentUnderTest, as
    scripts/demo-agent.sh writes them for every in-cluster demo."""
    manifest = sh("bash", "scripts/demo-agent.sh", ns, IMAGE, "9009", "Never", str(max_tasks),
                  name).stdout
    return list(yaml.safe_load_all(manifest))


def aut(ns: str, name: str, max_tasks: int) -> dict:
    return {"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"endpoint": f"http://demo-agent.{ns}.svc:9009/",
                     # the pods' range, for the chart's NetworkPolicy (as demo-agent.sh)
                     "endpointCidrs": ["10.244.0.0/16"],
                     "maxConcurrentTasks": max_tasks}}


def evaluation(ns: str, name: str, agent: str, rows: int, max_rows: int = -1) -> dict:
    return {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"agentRef": {"name": agent},
                     "dataset": {"name": "proctor-demo", "maxRows": max_rows},
                     "maxConcurrentRows": rows, "runner": {"resources": SMALL}}}


@pytest.fixture(scope="module")
def cluster(cluster_kubeconfig: Path) -> Iterator[Cluster]:
    """The session's cluster (tests/support/real_cluster.py) with this release installed, its images
    imported."""
    c = Cluster(str(cluster_kubeconfig))
    build_and_import(IMAGE)
    c.apply(namespace(DEMO, **{"pod-security.kubernetes.io/enforce": "baseline",
                               "pod-security.kubernetes.io/warn": "restricted"}),
            namespace(SLOTS, **{"pod-security.kubernetes.io/enforce": "baseline"}))
    install_release(c, RELEASE, SYSTEM, [DEMO, SLOTS], IMAGE)
    for ns in (DEMO, SLOTS):  # foreground: their ConfigMaps too, before the same names return
        c.kubectl("delete", "evaluations", "--all", "-n", ns, "--cascade=foreground",
                  "--wait=true")
    yield c


@pytest.fixture(scope="module")
def demo(cluster: Cluster) -> Cluster:
    """The demo Evaluation (10 items) run to Succeeded in a namespace enforcing baseline."""
    cluster.apply(*agent_objects(DEMO, "local-agent", 2))
    cluster.rollout(DEMO, "demo-agent")
    cluster.apply(evaluation(DEMO, "demo", "local-agent", rows=2))
    wait("Succeeded", lambda: cluster.condition(DEMO, "demo", "Succeeded").get(
        "status") == "True", 900, 2)
    return cluster


def operator_log(c: Cluster, since: str) -> str:
    """The operator's log from ``since`` (an RFC 3339 time) on: an earlier run's lines out."""
    return c.kubectl("-n", SYSTEM, "logs", f"deployment/{RELEASE}-proctor",
                     f"--since-time={since}").stdout


def test_the_demo_is_admitted_under_baseline(demo: Cluster) -> None:
    status = demo.get("evaluation", "demo", "-n", DEMO)["status"]
    assert status["items"]["done"] == status["items"]["total"] == 10
    refused = [e for e in demo.get("events", "-n", DEMO)["items"]
               if e["reason"] == "FailedCreate"]
    assert refused == []
    assert status["errorKinds"] == {}


def test_restricted_warns_only_of_the_test_steps_documented_exceptions(demo: Cluster,
                                                                        tmp_path: Path) -> None:
    manifest = tmp_path / "demo.yaml"
    manifest.write_text(yaml.safe_dump_all([evaluation(DEMO, "render", "local-agent", 2),
                                            aut(DEMO, "local-agent", 2)]))
    rendered = sh(str(Path(sys.executable).parent / "proctor"), "render", "-f",
                  str(manifest), "--items", "1", "--runner-image", IMAGE).stdout
    (job,) = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] == "Job"]
    done = demo.kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(job))
    (warning,) = [line for line in done.stderr.splitlines()
                  if 'would violate PodSecurity "restricted' in line]
    assert set(re.findall(r'container "([a-z-]+)"', warning)) == {"test"}
    checks = {"runAsNonRoot != true": "runAsNonRoot", "runAsUser=0": "runAsUser",
              "unrestricted capabilities": "capabilities"}
    violated = {field for text, field in checks.items() if text in warning}
    assert violated == set(security.TEST_EXCEPTIONS), warning
    for capability in security.TEST_CAPABILITIES:
        assert f'"{capability}"' in warning
    assert warning.count("container") == len(security.TEST_EXCEPTIONS)


def test_kubectl_logs_of_a_finished_items_test_step(demo: Cluster) -> None:
    jobs = demo.get("jobs", "-n", DEMO, "-l", "proctor.dev/evaluation=demo")["items"]
    assert len(jobs) >= 10 and all(j["spec"]["ttlSecondsAfterFinished"] == 1800 for j in jobs)
    done = [j for j in jobs if j.get("status", {}).get("succeeded")]
    log = demo.kubectl("-n", DEMO, "logs", f"job/{done[0]['metadata']['name']}", "-c", "test")
    assert log.stdout.strip()
    results = demo.get("configmaps", "-n", DEMO, "-l",
                       "proctor.dev/evaluation=demo,app.kubernetes.io/component=result")
    assert len(results["items"]) == 10


def events_of(c: Cluster, name: str) -> list[dict]:
    """The Events about this Evaluation (not an earlier one of the same name)."""
    uid = c.get("evaluation", name, "-n", DEMO)["metadata"]["uid"]
    return [e for e in c.get("events", "-n", DEMO)["items"]
            if e["involvedObject"].get("uid") == uid]


def test_success_is_a_proctor_event_and_the_log_has_decisions_only(demo: Cluster) -> None:
    events = events_of(demo, "demo")
    succeeded = [e for e in events if e["reason"] == "Succeeded"]
    assert len(succeeded) == 1 and succeeded[0]["type"] == "Normal"
    assert "10 of 10 items done" in succeeded[0]["message"]
    assert {e["source"].get("component") for e in events} == {"proctor"}
    assert {e.get("reportingComponent") for e in events} == {"proctor"}
    created_at = demo.get("evaluation", "demo", "-n", DEMO)["metadata"]["creationTimestamp"]
    log = operator_log(demo, created_at)
    assert "Handler '_child_event" not in log and "Handler '_evaluation_event" not in log
    created = [line for line in log.splitlines() if "Created Job demo-" in line]
    assert len(created) == 10


def test_a_finished_evaluation_stays_succeeded_when_its_agent_goes(demo: Cluster) -> None:
    demo.kubectl("delete", "agentundertest", "local-agent", "-n", DEMO)
    # A positive sign that the operator has taken the agent's going in (the demo's pass for
    # it was queued first): an Evaluation made now for that agent is told it is not found.
    demo.apply(evaluation(DEMO, "after-agent", "local-agent", 1, 1))
    try:
        wait("after-agent to say AgentNotFound", lambda: demo.condition(
            DEMO, "after-agent", "Degraded").get("reason") == "AgentNotFound", 120, 1)
    finally:
        demo.kubectl("delete", "evaluation", "after-agent", "-n", DEMO, "--wait=true")
    assert demo.condition(DEMO, "demo", "Succeeded")["status"] == "True"
    assert demo.condition(DEMO, "demo", "Degraded").get("status") != "True"
    assert demo.get("evaluation", "demo", "-n", DEMO)["status"]["reason"] == "AllItemsDone"
    assert [e for e in events_of(demo, "demo") if e["type"] == "Warning"] == []


@pytest.mark.parametrize(("obj", "message"), [
    ({**evaluation(DEMO, "refused", "local-agent", 1),
      "spec": {"agentRef": {"name": "local-agent"},
               "promptSensitivity": {"enabled": True, "strategy": "template",
                                     "variantsFile": "variants.jsonl"}}},
     VARIANTS_FILE_ON_CLUSTER),
    ({**aut(DEMO, "refused", 1), "spec": {"endpoint": "agent.example:9009"}},
     "endpoint must be an http:// or https:// URL with a host"),
    ({**aut(DEMO, "refused", 1), "spec": {"endpoint": "http://127.0.0.1:9009/"}},
     LOCAL_ENDPOINT.format(url="http://127.0.0.1:9009/")),
], ids=["variants-file", "endpoint-not-a-url", "local-endpoint"])
def test_what_the_operator_cannot_serve_is_refused_at_apply(cluster: Cluster, obj: dict,
                                                            message: str) -> None:
    done = cluster.apply(obj, check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_template_variants_pass_admission(cluster: Cluster) -> None:
    """The operator runs template variants: the policy lets them through (a server-side dry
    run: every admission check, nothing stored)."""
    obj = {**evaluation(DEMO, "templated", "local-agent", 1),
           "spec": {"agentRef": {"name": "local-agent"},
                    "promptSensitivity": {"enabled": True, "strategy": "template",
                                          "numVariations": 2}}}
    done = cluster.kubectl("apply", "--dry-run=server", "-f", "-",
                           stdin=yaml.safe_dump(obj), check=False)
    assert done.returncode == 0, done.stderr


def agent_tasks_in_flight(pods: list[dict]) -> int:
    """Pods that hold one of the agent's slots: not ended, and their solve step not ended
    (from the pods' own status, not from the operator's code)."""
    held = 0
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            continue
        solve = next((s for s in status.get("initContainerStatuses") or []
                      if s["name"] == "solve"), {})
        held += "terminated" not in (solve.get("state") or {})
    return held


def most_in_flight(c: Cluster, names: list[str], agent: str) -> tuple[int, int]:
    """The most agent tasks in flight while the Evaluations ran: as their pods show them, and
    as the AgentUnderTest's status counts them."""
    selector = f"proctor.dev/evaluation in ({','.join(names)})"
    most = counted = 0

    def sample() -> bool:
        nonlocal most, counted
        pods = c.get("pods", "-n", SLOTS, "-l", selector)["items"]
        most = max(most, agent_tasks_in_flight(pods))
        status = c.get("agentundertest", agent, "-n", SLOTS).get("status") or {}
        counted = max(counted, status.get("tasksInFlight", 0))
        return all(c.condition(SLOTS, n, "Succeeded").get("status") == "True" for n in names)
    wait("both Evaluations Succeeded", sample, 900, 0.3)
    return most, counted


def test_max_concurrent_tasks_holds_across_evaluations(cluster: Cluster) -> None:
    cluster.apply(*agent_objects(SLOTS, "limited", 2), aut(SLOTS, "unlimited", 8))
    cluster.rollout(SLOTS, "demo-agent")
    cluster.apply(evaluation(SLOTS, "a", "limited", 3, 4), evaluation(SLOTS, "b", "limited", 3, 4))
    limited, counted = most_in_flight(cluster, ["a", "b"], "limited")
    cluster.apply(evaluation(SLOTS, "c", "unlimited", 3, 4),
                  evaluation(SLOTS, "d", "unlimited", 3, 4))
    control, _ = most_in_flight(cluster, ["c", "d"], "unlimited")
    print(f"most agent tasks in flight: limit 2 -> {limited} (its status: {counted}); "
          f"limit 8 (control) -> {control}")
    assert 0 < limited <= 2 < control
    # The status counts the tasks the agent holds, not the items running (6 at most here:
    # two Evaluations of 3 rows, each item's test step long after its solve step).
    assert 0 < counted <= 2


# --- Agents the operator runs, and agents it waits for ------------------------------------------


def agent_ready(c: Cluster, ns: str, name: str) -> dict:
    status = c.get("agentundertest", name, "-n", ns).get("status") or {}
    return next((x for x in status.get("conditions") or [] if x["type"] == "Ready"), {})


def test_a_service_agent_gets_a_deployment_and_service_and_its_evaluation_succeeds(
        cluster: Cluster) -> None:
    """The reference agent's image in service mode: the operator runs it (owned by the
    AgentUnderTest, so deleting the agent deletes them) and tasks reach it through the
    Service."""
    served = {"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
              "metadata": {"name": "served", "namespace": DEMO},
              "spec": {"maxConcurrentTasks": 2, "service": {
                  "image": IMAGE,
                  "command": ["/usr/bin/tini", "--", "proctor", "agent", "serve", "--kind",
                              "mixed"],
                  "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}}}}}
    cluster.apply(served)
    uid = cluster.get("agentundertest", "served", "-n", DEMO)["metadata"]["uid"]
    for kind in ("deployment", "service"):
        obj = wait(f"{kind} agent-served", lambda k=kind: json.loads(cluster.kubectl(
            "get", k, "agent-served", "-n", DEMO, "-o", "json", check=False).stdout or "{}"),
            60)
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("AgentUnderTest", "served", uid)
    ready = wait("the served agent Ready", lambda: agent_ready(cluster, DEMO, "served").get(
        "status") == "True" and agent_ready(cluster, DEMO, "served"), 300, 2)
    assert ready["reason"] == "CardFetched"
    status = cluster.get("agentundertest", "served", "-n", DEMO)["status"]
    assert status["endpoint"] == f"http://agent-served.{DEMO}.svc:9009/"
    assert status["card"]["name"] == "proctor-mixed" and status["card"]["skills"]
    cluster.apply(evaluation(DEMO, "via-service", "served", rows=2, max_rows=3))
    wait("via-service Succeeded", lambda: cluster.condition(DEMO, "via-service", "Succeeded").get(
        "status") == "True", 600, 2)
    done = cluster.get("evaluation", "via-service", "-n", DEMO)["status"]
    assert done["items"]["done"] == 3 and done["errorKinds"] == {}
    # The chart's network boundary (on by default): the API server took the Evaluation's
    # NetworkPolicy, owned by it, over its task pods, with the agent's pods as a peer. (The
    # bridge CNI does not enforce it: docs/kubernetes.md, "Network boundary".)
    policy = cluster.get("networkpolicy", "proctor-via-service", "-n", DEMO)
    (owner,) = policy["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Evaluation", "via-service")
    assert policy["spec"]["podSelector"]["matchLabels"]["proctor.dev/evaluation"] == "via-service"
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    peers = [peer for rule in policy["spec"]["egress"] for peer in rule["to"]]
    assert {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "agent",
                                            "proctor.dev/agent": "served"}}} in peers
    cluster.kubectl("delete", "agentundertest", "served", "-n", DEMO)
    wait("the agent's Deployment collected", lambda: cluster.kubectl(
        "get", "deployment", "agent-served", "-n", DEMO, check=False).returncode != 0, 120)


def test_an_evaluation_waits_for_an_unreachable_agent_then_completes(demo: Cluster) -> None:
    """An endpoint nothing answers at: the Evaluation starts no item and says why (never
    Succeeded with every item in error); once an agent answers there, it completes."""
    # Names of this run's own: a run of this test before on a kept cluster leaves a Service
    # that answers for a while after it is deleted.
    run = os.urandom(3).hex()
    name, waits, service = f"late-{run}", f"waits-{run}", f"late-agent-{run}"
    late = aut(DEMO, name, 2)
    late["spec"]["endpoint"] = f"http://{service}.{DEMO}.svc:9009/"
    demo.apply(late, evaluation(DEMO, waits, name, rows=2, max_rows=2))
    wait("waits to say AgentNotReady", lambda: demo.condition(DEMO, waits, "Ready").get(
        "reason") == "AgentNotReady", 120, 1)
    wait("late to say Unreachable", lambda: agent_ready(demo, DEMO, name).get(
        "reason") == "Unreachable", 60, 1)
    # The operator's decision is published (AgentNotReady): it starts nothing.
    assert demo.get("jobs", "-n", DEMO, "-l", f"proctor.dev/evaluation={waits}")["items"] == []
    assert demo.condition(DEMO, waits, "Succeeded").get("status") != "True"
    # The demo's agent (still running: only its AgentUnderTest was deleted) at that address.
    demo.apply({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": service, "namespace": DEMO},
                "spec": {"selector": {"app": "demo-agent"},
                         "ports": [{"port": 9009, "targetPort": 9009}]}})
    wait("waits Succeeded", lambda: demo.condition(DEMO, waits, "Succeeded").get(
        "status") == "True", 600, 2)
    status = demo.get("evaluation", waits, "-n", DEMO)["status"]
    assert status["items"]["done"] == 2 and status["errorKinds"] == {}
    assert agent_ready(demo, DEMO, name)["reason"] == "CardFetched"
