"""The real kopf operator against a real Kubernetes (scripts/cluster.sh, v1.35+ built here).

Each scenario applies manifests through the official client, runs `proctor.k8s.controller`
in this process with kopf's KopfRunner and the cluster's admin kubeconfig, and watches
what a user would: the status, Jobs, pods, Events, the results kept, the metrics. Job pods
run in real containers from the runner image and the demo task images
(`real_cluster_fixtures`), and ask a reference agent served by this process on the node's
address, which pods reach. Pods request 50m of CPU, so that the one node runs several.

Real mechanisms do what test hooks would: Jobs created and pods run are counted from
watches; status writes and Job creations are refused by an admission webhook served by the
test (with 500, as when etcd times out), which also counts them; faults are real (an image
missing from the node, pulled with pullPolicy Never; the Eviction API; a kernel OOM kill
under the Evaluation's memory limit; the Job controller's activeDeadlineSeconds), set on
the chosen attempts' pods and Jobs by a mutating webhook; Pod Security admission refuses
pods (FailedCreate); slow runs come from a slow agent.
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import timedelta
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kopf.testing import KopfRunner
from prometheus_client import REGISTRY, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from proctor.agents.answers import Answer as AgentAnswer
from proctor.agents.answers import TaskRequest
from proctor.agents.kinds import Tasks, solver_for
from proctor.agents.server import SolverExecutor, agent_card, build_app, start_in_thread
from proctor.core.integrity import START_MARK
from proctor.datasets import demo, to_instance
from proctor.datasets.hostile import CREDITED, SUITE
from proctor.formats.manifest import parse_resource
from proctor.k8s.children.store import RESULT_KEY, result_labels
from proctor.k8s.machinery.api import Kube
from proctor.k8s.machinery.names import label_value
from proctor.k8s.pull import pull
from proctor.local.engine import run_evaluation
from proctor.results import ResultsFolder
from proctor.sandboxes import process
from proctor.store import s3
from support.cluster_watch import Watch
from support.paths import ROOT
from support.ports import free_port
from support.real_cluster_fixtures import (
    IMAGE_PREFIX,
    AdmissionWebhook,
    Answer,
    ClusterImages,
    RealCluster,
    agent_image,
    in_process_operator,
    wait_for,
)

pytest_plugins = ["support.real_cluster_fixtures"]
pytestmark = [pytest.mark.cluster, pytest.mark.slow]  # every test here runs on the cluster

GROUP = ("proctor.dev", "v1alpha1")
TASKS = len(demo.load_rows())
MEMORY_LIMIT = "768Mi"
RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": MEMORY_LIMIT}}
"""Each step's resources: a little CPU, so the one node runs several pods at once, and a
real memory limit (the OOM scenario goes past it)."""


class CountingAgent:
    """A reference agent that counts the messages it is sent, per task; `delay` seconds
    before each answer make a slow agent."""

    def __init__(self, kind: str, host: str, delay: float = 0.0):
        self.calls: collections.Counter[str] = collections.Counter()
        self.delay = delay
        tasks = Tasks.load()
        solve = solver_for(kind, tasks)
        lock = threading.Lock()

        def counted(request: TaskRequest):
            # The message names no instance (no taskData): the task is found by its text.
            row = tasks.find(request)
            with lock:
                self.calls[str(row["instance_id"]) if row else "?"] += 1
            time.sleep(self.delay)
            return solve(request)

        self._app = lambda url: build_app(SolverExecutor(counted), agent_card(kind, url))
        self.host = host
        self.server = start_in_thread(self._app, host)
        self.url = self.server.url

    def start_again(self) -> None:
        """Serve again at the same address, after `server.stop()`: the agent is back."""
        port = int(self.url.rstrip("/").rsplit(":", 1)[1])
        self.server = start_in_thread(self._app, self.host, port)


@pytest.fixture
def agent(real_cluster: RealCluster) -> Iterator[CountingAgent]:
    """The `mixed` agent on the node's address: the operator refuses a loopback one, and
    the pods reach this host there."""
    counting = CountingAgent("mixed", real_cluster.node_ip)
    yield counting
    counting.server.stop()


@pytest.fixture
def api(cluster_api_client: Any, cluster_namespace: str) -> Api:
    return Api(cluster_api_client, cluster_namespace)


def operator(cluster: RealCluster, images: ClusterImages, namespace: str,
             probe_port: int | None = None, allow_local: bool = False
             ) -> AbstractContextManager[KopfRunner]:
    """The operator in this process (`in_process_operator`), with the runner image built
    for this session."""
    return in_process_operator(cluster, namespace, runner_image=images.runner,
                               probe_port=probe_port, allow_local=allow_local)


def manifests(namespace: str, endpoint: str, images: ClusterImages, **spec: Any
              ) -> tuple[dict, dict]:
    agent = {"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
             "metadata": {"name": "mixed", "namespace": namespace},
             "spec": {"endpoint": endpoint, "requestTimeoutSeconds": 60}}
    evaluation = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                  "metadata": {"name": "demo", "namespace": namespace},
                  "spec": {"agentRef": {"name": "mixed"},
                           "dataset": {"name": "proctor-demo", "maxRows": -1},
                           "maxConcurrentRows": 2,
                           "runner": {"instanceImageRegistry": images.instance_registry,
                                      "resources": RESOURCES, **spec.pop("runner", {})},
                           **spec}}
    return agent, evaluation


def gold_evaluation(namespace: str, images: ClusterImages, **spec: Any) -> dict:
    _, body = manifests(namespace, "", images, predictions={"source": "gold"}, **spec)
    del body["spec"]["agentRef"]
    return body


class Api:
    def __init__(self, client: Any, namespace: str):
        self.client = client
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.batch = kubernetes.client.BatchV1Api(client)
        self.core = kubernetes.client.CoreV1Api(client)
        self.ns = namespace

    def apply(self, *bodies: dict) -> None:
        for body in bodies:
            plural = body["kind"].lower() + "s"
            self.custom.create_namespaced_custom_object(*GROUP, self.ns, plural, body)

    def evaluation(self, name: str = "demo") -> dict:
        return self.custom.get_namespaced_custom_object(*GROUP, self.ns, "evaluations", name)

    def condition(self, type_: str, name: str = "demo") -> dict:
        conditions = (self.evaluation(name).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == type_), {})

    def done(self) -> int:
        return (self.evaluation().get("status") or {}).get("items", {}).get("done", 0)

    def jobs(self) -> list[dict]:
        return [j.to_dict() for j in self.batch.list_namespaced_job(self.ns).items]

    def running_pods(self) -> int:
        return sum(p.status.phase not in ("Succeeded", "Failed")
                   for p in self.core.list_namespaced_pod(self.ns).items)

    def configmaps(self) -> list[Any]:
        return self.core.list_namespaced_config_map(self.ns).items

    def events(self) -> list[Any]:
        return self.core.list_namespaced_event(self.ns).items


@pytest.fixture
def watch(real_cluster: RealCluster, cluster_namespace: str
          ) -> Iterator[Callable[[str], Watch]]:
    started: list[Watch] = []

    def start(kind: str) -> Watch:
        started.append(Watch(real_cluster, cluster_namespace, kind))
        return started[-1]
    yield start
    for one in started:
        one.close()


def wait_succeeded(api: Api, timeout: float = 300, sample: Callable[[], Any] | None = None
                   ) -> dict:
    """Wait for Succeeded=True, calling `sample` on each poll."""
    def done() -> bool:
        if sample is not None:
            sample()
        return api.condition("Succeeded").get("status") == "True"
    wait_for(done, timeout, 0.3,
             lambda: f"the Evaluation never succeeded; status {api.evaluation().get('status')}")
    return api.evaluation()


def results(api: Api) -> list[Any]:
    """The result ConfigMaps kept so far."""
    return [c for c in api.configmaps()
            if (c.metadata.labels or {}).get("app.kubernetes.io/component") == "result"]


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def test_the_cluster_is_a_real_kubernetes_built_here(real_cluster):
    # The session fixture refuses any other server; this says which one ran the tests.
    assert real_cluster.version["gitVersion"] >= "v1.35"
    node = real_cluster.kubectl("get", "node", "proctor-node", "-o",
                                "jsonpath={.status.nodeInfo.containerRuntimeVersion}")
    assert node.startswith("containerd://")


def test_demo_evaluation_end_to_end(real_cluster, cluster_images, cluster_namespace,
                                    cluster_api_client, api, agent, watch, tmp_path):
    ns = cluster_namespace
    agent_body, eval_body = manifests(ns, agent.url, cluster_images, maxConcurrentRows=3)
    pods, jobs = watch("pods"), watch("jobs")
    api.apply(agent_body, eval_body)
    metrics, _ = start_http_server(0, addr="127.0.0.1")
    metrics_port, probe_port = metrics.server_port, free_port()
    busy: list[int] = []

    def agent_in_flight() -> None:
        status = api.custom.get_namespaced_custom_object(
            *GROUP, ns, "agentundertests", "mixed").get("status") or {}
        busy.append(status.get("tasksInFlight", 0))

    with operator(real_cluster, cluster_images, ns, probe_port):
        body = wait_succeeded(api, sample=agent_in_flight)
        health = urllib.request.urlopen(f"http://127.0.0.1:{probe_port}/healthz", timeout=5)
        assert health.status == 200
        samples = scrape(metrics_port)
    metrics.shutdown()
    status = body["status"]
    assert status["items"]["done"] == status["items"]["total"] == TASKS
    assert len(jobs.created()) == TASKS
    running = pods.running()
    assert max(running) <= 3, "more pods ran at once than maxConcurrentRows"
    assert status["reason"] == "AllItemsDone"
    assert not body["metadata"].get("finalizers"), "the Evaluation needs no finalizer"
    # The AgentUnderTest says how it is reached, that it is usable, and had tasks in
    # flight while the Evaluation ran (none once it is done).
    assert max(busy) > 0, "the agent's status never showed a task in flight"
    aut = api.custom.get_namespaced_custom_object(*GROUP, ns, "agentundertests",
                                                  "mixed")["status"]
    assert (aut["mode"], aut["endpoint"], aut["tasksInFlight"]) == ("endpoint", agent.url, 0)
    assert [(c["type"], c["status"]) for c in aut["conditions"]] == [("Ready", "True")]
    assert sum(agent.calls.values()) == TASKS and set(agent.calls.values()) == {1}

    # The same inputs through `proctor run` give the same figures.
    local = run_evaluation(parse_resource(eval_body), tmp_path / "local", progress=False,
                           agents=[parse_resource(agent_body)])
    figures = local.results.model_dump()
    assert status["results"] == {_camel(k): v for k, v in figures.items()}

    # `proctor results pull` writes the folder `proctor run` writes.
    pulled = tmp_path / "pulled"
    assert pull(Kube(cluster_api_client), ns, "demo", pulled) == TASKS
    summary = json.loads((pulled / "summary.json").read_text())
    assert summary["results"] == json.loads((tmp_path / "local" / "summary.json").read_text()
                                            )["results"]
    by_item = {r.item_id: r for r in ResultsFolder(pulled).load()}
    for mine in ResultsFolder(tmp_path / "local").load():
        theirs = by_item[mine.item_id]
        assert (theirs.outcome, theirs.FAIL_TO_PASS, theirs.PASS_TO_PASS) == \
            (mine.outcome, mine.FAIL_TO_PASS, mine.PASS_TO_PASS)
        assert theirs.images, "image digests are recorded with each result"
        assert all("sha256:" in image for image in theirs.images.values())
        item_dir = Path(pulled, "items", mine.instance_id, mine.variant_id, str(mine.repeat))
        assert (item_dir / "result.json").exists() and (item_dir / "report.json").exists()
        if mine.tests_ran:
            assert ">>>>> Start Test Output" in (item_dir / "test_output.txt").read_text()
    # The mixed agent gives more than one outcome: the comparison is not all-resolved.
    assert len({r.outcome for r in by_item.values()}) > 1

    # Everything it made is owned by the Evaluation.
    uid = body["metadata"]["uid"]
    owned = [*api.jobs(), *[c.to_dict() for c in api.configmaps()
                            if (c.metadata.labels or {}).get("app.kubernetes.io/managed-by")]]
    assert owned and all(any(o["uid"] == uid for o in (x["metadata"]["owner_references"] or []))
                         for x in owned)

    # Metrics scraped from the operator's port equal summary.json.
    labels = frozenset({"namespace": ns, "evaluation": "demo", "agent": "mixed"}.items())
    assert samples[("proctor_resolved_ratio", labels)] == summary["results"]["resolved_pct"]
    assert samples[("proctor_instances", labels)] == TASKS
    assert samples[("proctor_no_op_ratio", labels)] == summary["results"]["no_op_pct"]


def test_restart_mid_run_creates_no_duplicate_and_loses_nothing(
        real_cluster, cluster_images, cluster_namespace, api, agent, watch):
    jobs = watch("jobs")
    rows = 6
    agent_body, eval_body = manifests(cluster_namespace, agent.url, cluster_images,
                                      maxConcurrentRows=3)
    eval_body["spec"]["dataset"]["maxRows"] = rows
    api.apply(agent_body, eval_body)
    with operator(real_cluster, cluster_images, cluster_namespace):
        wait_for(lambda: api.done() >= 2, 180)
    with operator(real_cluster, cluster_images, cluster_namespace):
        body = wait_succeeded(api)
    assert body["status"]["items"]["done"] == rows
    created = [obj for kind, obj in jobs.events if kind == "ADDED"]
    assert len(created) == rows, "a Job was created twice"
    assert len({j.metadata.labels["proctor.dev/item"] for j in created}) == rows
    assert sum(agent.calls.values()) == rows, "the agent was asked twice"
    assert len(results(api)) == rows


LEASE = "proctor-leader"
ELECTION = ["--lease-duration", "6", "--renew-deadline", "4", "--retry-period", "1"]
"""Shorter than the defaults (15s, 10s, 2s), in the same order, so the takeover is quick."""


def elected_operator(cluster: RealCluster, images: ClusterImages, namespace: str,
                     name: str, log: Path) -> subprocess.Popen:
    """`proctor operator --leader-election` as its own process (so that it can be killed
    with SIGKILL), as pod `name` of the chart's Deployment would run it."""
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "POD_NAME": name,
           "PROCTOR_RUNNER_IMAGE": images.runner, "PROCTOR_ALLOW_LOCAL_ENDPOINTS": ""}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "proctor.cli.main", "operator", "--namespace", namespace,
             "--metrics-port", str(free_port()), "--probe-port", str(free_port()),
             "--leader-election", "--lease-namespace", namespace, "--lease-name", LEASE,
             *ELECTION], stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)


def test_two_operators_one_leads_and_the_other_takes_over_when_it_is_killed(
        real_cluster, cluster_images, cluster_namespace, api, agent, watch, tmp_path):
    ns, rows = cluster_namespace, 6
    jobs = watch("jobs")
    leases = kubernetes.client.CoordinationV1Api(api.client)
    agent_body, eval_body = manifests(ns, agent.url, cluster_images, maxConcurrentRows=2)
    eval_body["spec"]["dataset"]["maxRows"] = rows
    logs = {name: tmp_path / f"{name}.log" for name in ("op-a", "op-b")}

    def lease() -> Any:
        try:
            return leases.read_namespaced_lease(LEASE, ns).spec
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def holder() -> str | None:
        spec = lease()
        return spec.holder_identity if spec is not None else None

    started: list[subprocess.Popen] = []
    try:
        started.append(elected_operator(real_cluster, cluster_images, ns, "op-a",
                                        logs["op-a"]))
        wait_for(lambda: holder() == "op-a", 90, message=lambda: logs["op-a"].read_text())
        started.append(elected_operator(real_cluster, cluster_images, ns, "op-b",
                                        logs["op-b"]))
        wait_for(lambda: "Waiting for the Lease" in logs["op-b"].read_text(), 90,
                 message=lambda: logs["op-b"].read_text())
        api.apply(agent_body, eval_body)
        wait_for(lambda: len(results(api)) >= 1, 180)
        assert "Created Job" not in logs["op-b"].read_text(), "the standby acted"
        held = lease()
        assert held.holder_identity == "op-a"
        os.killpg(started[0].pid, signal.SIGKILL)
        started[0].wait()
        kept_before = len(results(api))
        wait_for(lambda: holder() == "op-b", 30, 0.2, lambda: logs["op-b"].read_text())
        taken = lease()
        body = wait_succeeded(api)
    finally:
        for process in started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    assert kept_before < rows, "the kill should land mid-run"
    # The standby took over a Lease its killed holder could not release, once its record
    # had not changed for a lease duration: after op-a's last renewal by that much, in one
    # transition. (How soon: benchmarks/operator_response.py.)
    assert "Acquired the Lease" in logs["op-b"].read_text()
    assert taken.lease_transitions == (held.lease_transitions or 0) + 1
    assert taken.acquire_time >= held.renew_time + timedelta(
        seconds=held.lease_duration_seconds), (held, taken)
    assert "Kept result" in logs["op-b"].read_text(), "the new leader finished nothing"
    assert body["status"]["items"]["done"] == rows
    created = [obj for kind, obj in jobs.events if kind == "ADDED"]
    assert len(created) == rows, "a Job was created twice"
    assert len({j.metadata.labels["proctor.dev/item"] for j in created}) == rows
    assert sum(agent.calls.values()) == rows and set(agent.calls.values()) == {1}, \
        "the agent was asked twice"
    assert len(results(api)) == rows


def test_suspend_starts_nothing_until_resumed_and_max_concurrent_rows_scales(
        real_cluster, cluster_images, cluster_namespace, api, agent, watch):
    """Suspended, nothing starts; resumed with maxConcurrentRows 1, one pod runs at a time;
    raised to 3, more run at once, never more than 3. The same run, the same slow agent:
    only the limit changed, so the limit is what held it to one."""
    agent.delay = 2.0
    pods = watch("pods")
    agent_body, eval_body = manifests(cluster_namespace, agent.url, cluster_images,
                                      suspend=True, maxConcurrentRows=1)
    eval_body["spec"]["dataset"]["maxRows"] = 6
    api.apply(agent_body, eval_body)

    def patch(spec: dict) -> None:
        api.custom.patch_namespaced_custom_object(*GROUP, cluster_namespace, "evaluations",
                                                  "demo", {"spec": spec})
    with operator(real_cluster, cluster_images, cluster_namespace):
        wait_for(lambda: api.condition("Ready").get("status") == "True", 90)
        # The operator's decision, published: suspended, so nothing is started.
        wait_for(lambda: api.condition("Running").get("reason") == "Suspended", 90)
        assert api.jobs() == []
        assert api.evaluation()["status"]["reason"] == "Suspended"
        patch({"suspend": False})
        wait_for(lambda: api.done() >= 2, 120)
        at_one = len(pods.events)
        patch({"maxConcurrentRows": 3})
        body = wait_succeeded(api)
    assert body["status"]["items"]["done"] == 6
    assert body["status"]["reason"] == "AllItemsDone"
    running = pods.running()
    assert max(running[:at_one]) == 1
    assert 1 < max(running[at_one:]) <= 3


def test_a_slot_is_refilled_when_the_pod_ends_not_when_the_job_is_complete(
        real_cluster, cluster_images, cluster_namespace, api, watch):
    """A real Job controller marks a Job Complete a while after its pod ends (it batches
    pod updates for a second): the operator keeps each result when the pod ends, and starts
    the next item in its slot then, not once the Job is Complete."""
    pods, jobs = watch("pods"), watch("jobs")
    body = gold_evaluation(cluster_namespace, cluster_images, maxConcurrentRows=1)
    body["spec"]["dataset"]["maxRows"] = 4
    api.apply(body)
    with operator(real_cluster, cluster_images, cluster_namespace):
        wait_succeeded(api)
    assert max(pods.running()) == 1
    created = jobs.first(lambda kind, _: kind == "ADDED")
    complete = jobs.first(lambda _, job: any(
        c.type == "Complete" and c.status == "True" for c in job.status.conditions or []))
    order = sorted(created, key=created.__getitem__)
    assert len(order) == 4
    # With one slot, each Job after the first took its predecessor's slot: in how many
    # cases was it created before its predecessor was seen Complete?
    early = [b for a, b in itertools.pairwise(order)
             if created[b] < complete.get(a, float("inf"))]
    assert early, "every slot waited for its Job to be Complete"


def test_a_sidecar_agent_edits_its_own_copy_of_the_repository(
        real_cluster, cluster_images, cluster_namespace, api):
    """Sidecar mode: the agent runs in the item's pod as a native sidecar, on the copy of
    the repository the workspace step made (REPO_DIR); the editor agent applies its fix
    there, and what it changed is the patch that the test step grades."""
    image = agent_image(real_cluster, cluster_images)
    _, eval_body = manifests(cluster_namespace, "", cluster_images,
                             agentRef={"name": "editor"})
    eval_body["spec"]["dataset"]["maxRows"] = 1
    editor = {"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
              "metadata": {"name": "editor", "namespace": cluster_namespace},
              "spec": {"sidecar": {"image": image, "port": 9009, "args": ["--kind", "editor"],
                                   "resources": RESOURCES}}}
    api.apply(editor, eval_body)
    with operator(real_cluster, cluster_images, cluster_namespace):
        body = wait_succeeded(api)
    assert body["status"]["items"]["done"] == 1
    (kept,) = [json.loads(c.data[RESULT_KEY]) for c in results(api)]
    assert kept["outcome"] == "resolved", kept


class HostileAgent:
    """An agent that answers each task with hostile patches from the threat model's suite
    (those that act without a build step), the next one each time it is asked, and
    remembers which class it sent for which task."""

    def __init__(self, host: str, repos: Path):
        tasks = Tasks.load()
        suite = [h for h in SUITE if not h.needs_build_step]
        instances = {i.instance_id: i for i in (to_instance(r, n) for n, r in
                                                    enumerate(demo.load_rows()))}
        self.sent: collections.defaultdict[str, list[str]] = collections.defaultdict(list)
        order = sorted(instances)
        lock = threading.Lock()

        def solve(request: TaskRequest) -> AgentAnswer:
            row = tasks.find(request)
            assert row is not None
            instance = instances[str(row["instance_id"])]
            repo = repos / instance.instance_id
            with lock:
                if not repo.exists():
                    process.checkout(instance, repo)
                turn = order.index(instance.instance_id) + \
                    len(order) * len(self.sent[instance.instance_id])
                hostile = suite[turn % len(suite)]
                self.sent[instance.instance_id].append(hostile.kind.value)
            patch = hostile.build(instance, lambda path: (repo / path).read_text()
                                  if (repo / path).is_file() else "")
            return AgentAnswer(text="Fixed.", patch=patch)

        self.server = start_in_thread(
            lambda url: build_app(SolverExecutor(solve), agent_card("hostile", url)), host)
        self.url = self.server.url


def test_no_hostile_patch_is_credited_on_the_cluster(real_cluster, cluster_images,
                                                     cluster_namespace, api, tmp_path):
    """The threat model's hostile patches, sent by an agent, run in the cluster's pods as
    in the sandboxes on one machine: none earns credit, and each result names the class of
    what was undone. Two repeats of the ten demo tasks cover every class that acts without
    a build step (the demo's eval scripts install nothing)."""
    hostile = HostileAgent(real_cluster.node_ip, tmp_path / "repos")
    agent_body, eval_body = manifests(cluster_namespace, hostile.url, cluster_images,
                                      repeats=2, maxConcurrentRows=4)
    api.apply(agent_body, eval_body)
    try:
        with operator(real_cluster, cluster_images, cluster_namespace):
            wait_succeeded(api, timeout=600)
    finally:
        hostile.server.stop()
    kept = [json.loads(c.data[RESULT_KEY]) for c in results(api)]
    assert len(kept) == 2 * TASKS
    assert {k for kinds in hostile.sent.values() for k in kinds} == \
        {h.kind.value for h in SUITE if not h.needs_build_step}
    named: collections.defaultdict[str, list[str]] = collections.defaultdict(list)
    for result in kept:
        assert result["outcome"] not in CREDITED, result
        assert result["tampered"], result
        kinds = {t["kind"] for t in result["tampering"]}
        named[result["instance_id"]].append(next(k for k in hostile.sent[result["instance_id"]]
                                                 if k in kinds))
    assert {i: sorted(k) for i, k in named.items()} == \
        {i: sorted(k) for i, k in hostile.sent.items()}


def reconcile_errors() -> float:
    """proctor_reconcile_errors_total of this process's operator (0 before it ever ran), as
    its metrics endpoint serves it (the default registry)."""
    return REGISTRY.get_sample_value("proctor_reconcile_errors_total") or 0.0


def refused(hook: Any) -> int:
    return sum(not seen["answer"]["allowed"] for seen in hook.seen)


def _refuse_first(times: int, applies: Callable[[dict], bool] = lambda _: True
                  ) -> Callable[[dict], Answer | None]:
    """A webhook handler that refuses the first `times` requests `applies` to with 500."""
    left = [times]

    def handler(request: dict) -> Answer | None:
        if left[0] > 0 and applies(request):
            left[0] -= 1
            return Answer(refuse="etcdserver: request timed out", code=500)
        return None
    return handler


def _operator_status_write(request: dict) -> bool:
    """A status write that changes more than kopf's own bookkeeping (status.kopf)."""
    def status(obj: dict | None) -> dict:
        return {k: v for k, v in ((obj or {}).get("status") or {}).items() if k != "kopf"}
    return status(request.get("object")) != status(request.get("oldObject"))


def test_status_writes_refused_for_a_while_lose_nothing(
        real_cluster, cluster_images, cluster_namespace, api, agent, admission_webhook):
    """The API server refuses the Evaluation's status writes for a while (etcd timing out):
    the items go on meanwhile, the refusals are counted as reconcile errors, and the status
    is written, complete, once the server takes it."""
    hook = admission_webhook.register(
        [{"apiGroups": ["proctor.dev"], "apiVersions": ["v1alpha1"], "operations": ["UPDATE"],
          "resources": ["evaluations/status"], "scope": "Namespaced"}],
        _refuse_first(3, _operator_status_write))
    agent_body, eval_body = manifests(cluster_namespace, agent.url, cluster_images,
                                      maxConcurrentRows=3)
    eval_body["spec"]["dataset"]["maxRows"] = 3
    before = reconcile_errors()
    api.apply(agent_body, eval_body)
    with operator(real_cluster, cluster_images, cluster_namespace):
        body = wait_succeeded(api)
    assert refused(hook) == 3
    assert reconcile_errors() - before == 3
    assert body["status"]["items"]["done"] == 3
    assert len(results(api)) == 3


JOBS_CREATE = [{"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["jobs"], "scope": "Namespaced"}]
PODS_CREATE = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["pods"], "scope": "Namespaced"}]


def test_job_creations_refused_are_tried_again(real_cluster, cluster_images,
                                               cluster_namespace, api, agent,
                                               admission_webhook, watch):
    """The API server refuses the first Job creations (etcd timing out): their slots are
    not lost; a later pass creates each Job, once."""
    hook = admission_webhook.register(JOBS_CREATE, _refuse_first(2))
    jobs = watch("jobs")
    agent_body, eval_body = manifests(cluster_namespace, agent.url, cluster_images,
                                      maxConcurrentRows=3)
    eval_body["spec"]["dataset"]["maxRows"] = 3
    api.apply(agent_body, eval_body)
    with operator(real_cluster, cluster_images, cluster_namespace):
        body = wait_succeeded(api)
    assert refused(hook) == 2
    assert len(jobs.created()) == 3 and len(hook.seen) - refused(hook) == 3
    assert body["status"]["items"]["done"] == 3
    assert len(results(api)) == 3


@pytest.mark.parametrize(("change", "reason", "words"), [
    ({"dataset": {"name": "proctor-demo", "instanceIds": ["nope__nope-1"]}},
     "DatasetUnusable", "nope__nope-1"),
    ({"agentRef": {"name": "no-such-agent"}}, "AgentNotFound", "no-such-agent"),
    ({"promptSensitivity": {"enabled": True, "strategy": "template",
                            "variantsFile": "variants.jsonl"}},
     "PromptSensitivityUnsupported", "variantsFile reads a local file"),
])
def test_an_unusable_spec_is_degraded_and_creates_nothing(real_cluster, cluster_images,
                                                          cluster_namespace, api, agent,
                                                          change, reason, words):
    # (A spec the CRD's schema refuses never gets this far: the API server answers 422.)
    agent_body, eval_body = manifests(cluster_namespace, agent.url, cluster_images)
    eval_body["spec"].update(change)
    api.apply(agent_body, eval_body)
    with operator(real_cluster, cluster_images, cluster_namespace):
        degraded = wait_for(
            lambda: (c := api.condition("Degraded")).get("status") == "True" and c, 90)
    assert degraded["reason"] == reason and words in degraded["message"]
    assert api.condition("Ready")["status"] == "False"
    assert api.evaluation()["status"]["reason"] == reason  # a default column of kubectl get
    wait_for(lambda: degraded_events(api), 60)
    assert f"{reason}: " in degraded_events(api)[0]
    assert api.jobs() == [] and not [c for c in api.configmaps()
                                     if (c.metadata.labels or {}).get("proctor.dev/evaluation")]


def test_an_agent_deleted_mid_run_degrades_and_starts_nothing_more(
        real_cluster, cluster_images, cluster_namespace, api, agent, watch):
    # Nor do the Jobs that were running give their slots to new items when they end; what
    # they get is kept all the same.
    agent.delay = 3.0
    jobs = watch("jobs")
    api.apply(*manifests(cluster_namespace, agent.url, cluster_images))
    with operator(real_cluster, cluster_images, cluster_namespace):
        wait_for(lambda: len(jobs.created()) >= 2, 120)
        api.custom.delete_namespaced_custom_object(*GROUP, cluster_namespace,
                                                   "agentundertests", "mixed")
        wait_for(lambda: api.condition("Degraded").get("reason") == "AgentNotFound", 60)
        made = len(jobs.created())
        # The Jobs that were running still have their results kept (and are cleaned up).
        wait_for(lambda: len(results(api)) == made and not api.jobs(), 120)
    assert len(jobs.created()) == made < TASKS


def test_the_api_server_refuses_a_spec_its_schema_refuses(real_cluster, cluster_images,
                                                          cluster_namespace, api):
    _, eval_body = manifests(cluster_namespace, "http://192.0.2.1:9/", cluster_images)
    eval_body["spec"]["dataset"]["maxRows"] = 0
    with pytest.raises(kubernetes.client.ApiException) as refusal:
        api.apply(eval_body)
    assert refusal.value.status == 422 and "maxRows" in refusal.value.body


# --- Infrastructure failures, real ones -----------------------------------------------------

HOG = "b = b'x' * 2**31"
"""Python that takes 2 GiB, far past the steps' memory limit."""


def _step(pod: dict, name: str) -> int:
    return next(i for i, c in enumerate(pod["spec"]["initContainers"]) if c["name"] == name)


EXIT_SAYS = "test step: no repository at /testbed"


def fault_patch(fault: str, pod: dict) -> list[dict]:
    """JSON patch operations that make a work item's pod meet ``fault``.

    image_pull: its first step's image is one the node lacks, never pulled; deadline: its
    first step hangs (the Job's deadline, shortened, strikes before the agent is asked);
    oom: its test step takes more memory than its limit; evict: its test step waits to be
    evicted (see ``Evictor``); exit: its test step says EXIT_SAYS and exits 3, writing no
    termination message. A short grace period ends the hanging steps' pods at once.
    """
    pull, test = _step(pod, "pull"), _step(pod, "test")
    ops: list[dict] = [
        {"op": "add", "path": "/spec/terminationGracePeriodSeconds", "value": 1},
        {"op": "add", "path": "/metadata/annotations/proctor.test~1fault", "value": fault}]
    if fault == "image_pull":
        ops += [{"op": "replace", "path": f"/spec/initContainers/{pull}/image",
                 "value": f"{IMAGE_PREFIX}/absent:{secrets.token_hex(4)}"},
                {"op": "replace", "path": f"/spec/initContainers/{pull}/imagePullPolicy",
                 "value": "Never"}]
    elif fault == "deadline":
        ops.append({"op": "replace", "path": f"/spec/initContainers/{pull}/command",
                    "value": ["sleep", "600"]})
    elif fault == "oom":
        ops.append({"op": "replace", "path": f"/spec/initContainers/{test}/command",
                    "value": ["python3", "-c", HOG]})
    elif fault == "evict":
        ops.append({"op": "replace", "path": f"/spec/initContainers/{test}/command",
                    "value": ["sleep", "600"]})
    elif fault == "exit":
        ops.append({"op": "replace", "path": f"/spec/initContainers/{test}/command",
                    "value": ["sh", "-c", f"echo '{EXIT_SAYS}'; exit 3"]})
    return ops


class Faults:
    """Strikes chosen attempts of chosen tasks with a real fault: `plan` maps an instance
    id to how many of its attempts to strike (None: all)."""

    def __init__(self, webhook: AdmissionWebhook, api: Api, fault: str,
                 plan: dict[str, int | None]):
        self.fault, self.api = fault, api
        self.left = {label_value(k): v for k, v in plan.items()}
        self.struck: set[str] = set()  # the Jobs whose pods were struck
        self.evicted: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        webhook.register(PODS_CREATE, self._pod, mutating=True)
        if fault == "deadline":
            webhook.register(JOBS_CREATE, self._job, mutating=True)
        if fault == "evict":
            threading.Thread(target=self._evict, daemon=True, name="evictor").start()

    def _strikes(self, labels: dict[str, str], job: str) -> bool:
        instance = labels.get("proctor.dev/instance", "")
        with self._lock:
            if job in self.struck:
                return True
            if instance not in self.left or self.left[instance] == 0:
                return False
            if self.left[instance] is not None:
                self.left[instance] -= 1
            self.struck.add(job)
            return True

    def _job(self, request: dict) -> Answer | None:
        job = request["object"]
        if not self._strikes(job["metadata"].get("labels") or {}, job["metadata"]["name"]):
            return None
        return Answer(patch=[{"op": "replace", "path": "/spec/activeDeadlineSeconds",
                              "value": 2}])

    def _pod(self, request: dict) -> Answer | None:
        pod = request["object"]
        labels = pod["metadata"].get("labels") or {}
        job = labels.get("batch.kubernetes.io/job-name", "")
        if self.fault == "deadline":  # the Job's webhook chose; its pod hangs
            with self._lock:
                if job not in self.struck:
                    return None
        elif not self._strikes(labels, job):
            return None
        return Answer(patch=fault_patch(self.fault, pod))  # (a Job's pods are annotated)

    def _evict(self) -> None:
        """Evicts each struck pod through the Eviction API once its test step runs."""
        while not self._stop.wait(0.2):
            for pod in self.api.core.list_namespaced_pod(self.api.ns).items:
                if (pod.metadata.annotations or {}).get("proctor.test/fault") != "evict" or \
                        pod.metadata.name in self.evicted:
                    continue
                steps = {s.name: s for s in pod.status.init_container_statuses or []}
                if "test" in steps and steps["test"].state.running:
                    self.api.core.create_namespaced_pod_eviction(
                        pod.metadata.name, self.api.ns,
                        {"metadata": {"name": pod.metadata.name, "namespace": self.api.ns}})
                    self.evicted.add(pod.metadata.name)

    def close(self) -> None:
        self._stop.set()


@pytest.mark.parametrize("fault", ["image_pull", "evict", "oom", "deadline"])
def test_infra_failures_are_retried_without_asking_again_then_recorded(
        real_cluster, cluster_images, cluster_namespace, cluster_api_client, api, agent,
        admission_webhook, fault, monkeypatch):
    monkeypatch.setenv("PROCTOR_IMAGE_PULL_TIMEOUT_SECONDS", "2")
    rows = demo.load_rows()
    flaky, broken = rows[0]["instance_id"], rows[1]["instance_id"]
    faults = Faults(admission_webhook, api, fault, {flaky: 1, broken: None})
    agent_body, eval_body = manifests(cluster_namespace, agent.url, cluster_images,
                                      runner={"infraRetries": 1})
    eval_body["spec"]["dataset"]["instanceIds"] = [flaky, broken]
    api.apply(agent_body, eval_body)
    try:
        with operator(real_cluster, cluster_images, cluster_namespace):
            body = wait_succeeded(api, timeout=240)
    finally:
        faults.close()
    kept = {r.instance_id: r for r in _results(cluster_api_client, cluster_namespace)}
    assert kept[flaky].outcome.value != "error" and kept[flaky].attempts == 2
    assert kept[broken].outcome.value == "error" and kept[broken].error_kind.value == "infra"
    assert kept[broken].attempts == 2
    assert len(faults.struck) == 3
    # a pod stopped before its solve step never reached the agent; else it was asked once,
    # and its retry reused the patch
    expected = 0 if fault in ("image_pull", "deadline") else 1
    assert agent.calls[broken] == expected and agent.calls[flaky] == 1
    assert body["status"]["items"]["retries"] == 2
    reasons = {e.reason for e in api.events()}
    assert "Retrying" in reasons and "ItemFailed" in reasons
    if fault == "oom":  # the kernel's OOM killer, under the Evaluation's memory limit
        assert "OOMKilled" in (kept[broken].error_message or "")


def test_a_gold_run_is_retried_after_an_infra_failure_with_the_given_patch(
        real_cluster, cluster_images, cluster_namespace, cluster_api_client, api,
        admission_webhook, watch):
    """The solve step prints a given patch as it prints an agent's: the retry of a gold
    run runs the task's patch again, and keeps no patch of its own."""
    flaky = demo.load_rows()[0]["instance_id"]
    faults = Faults(admission_webhook, api, "oom", {flaky: 1})
    jobs = watch("jobs")
    body = gold_evaluation(cluster_namespace, cluster_images, runner={"infraRetries": 1})
    body["spec"]["dataset"]["instanceIds"] = [flaky]
    api.apply(body)
    with operator(real_cluster, cluster_images, cluster_namespace):
        wait_succeeded(api, timeout=120)
    (result,) = _results(cluster_api_client, cluster_namespace)
    assert (result.outcome.value, result.attempts) == ("resolved", 2)
    assert len(faults.struck) == 1
    # The retry prefers the node that ran the first attempt: its task image is there.
    first, retry = sorted({obj.metadata.name: obj for kind, obj in jobs.events
                           if kind == "ADDED"}.values(), key=lambda j: j.metadata.name)
    assert first.spec.template.spec.affinity is None
    (preferred,) = retry.spec.template.spec.affinity.node_affinity \
        .preferred_during_scheduling_ignored_during_execution
    (term,) = preferred.preference.match_fields
    assert (term.key, term.operator, term.values) == ("metadata.name", "In", ["proctor-node"])


def test_a_step_that_fails_saying_why_is_an_error_naming_its_logs_last_words(
        real_cluster, cluster_images, cluster_namespace, cluster_api_client, api,
        admission_webhook):
    """terminationMessagePolicy FallbackToLogsOnError: a step that fails without writing a
    termination message has its log's tail as the message, and the result says it; a failed
    step is no infrastructure failure, so it is not retried."""
    broken = demo.load_rows()[0]["instance_id"]
    faults = Faults(admission_webhook, api, "exit", {broken: None})
    body = gold_evaluation(cluster_namespace, cluster_images, runner={"infraRetries": 1})
    body["spec"]["dataset"]["instanceIds"] = [broken]
    api.apply(body)
    with operator(real_cluster, cluster_images, cluster_namespace):
        wait_succeeded(api, timeout=120)
    (result,) = _results(cluster_api_client, cluster_namespace)
    assert (result.outcome.value, result.error_kind.value, result.attempts) == (
        "error", "sandbox", 1)
    assert result.error_message == f"StepFailed: step test exited 3: {EXIT_SAYS}"
    assert len(faults.struck) == 1


def test_an_item_no_node_can_take_says_so_in_the_running_condition(
        real_cluster, cluster_images, cluster_namespace, api, agent):
    agent_body, eval_body = manifests(cluster_namespace, agent.url, cluster_images,
                                      runner={"nodeSelector": {"proctor.test/nowhere": "yes"}})
    eval_body["spec"]["dataset"]["maxRows"] = 1
    api.apply(agent_body, eval_body)
    with operator(real_cluster, cluster_images, cluster_namespace):
        running = wait_for(lambda: "Unschedulable" in (c := api.condition("Running")).get(
            "message", "") and c, 90)
    assert running["status"] == "True"
    assert running["message"].startswith("0 running, 1 pending (1 Unschedulable: 0/1 nodes "
                                         "are available: 1 node(s) didn't match Pod's node "
                                         "affinity/selector")
    assert agent.calls == {}


def _results(client: Any, namespace: str) -> list[Any]:
    from proctor.k8s.children.store import read_result

    kube = Kube(client)
    return [read_result(c) for c in kube.list_configmaps(
        namespace, {"app.kubernetes.io/component": "result"})["items"]]


def test_failed_create_degrades_naming_the_cause(real_cluster, cluster_images,
                                                 cluster_namespace, api, agent):
    # Pod Security admission, "restricted": the Job controller's pods (their steps run as
    # root) are refused, and no pod ever appears.
    api.core.patch_namespace(cluster_namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}})
    agent_body, eval_body = manifests(cluster_namespace, agent.url, cluster_images)
    eval_body["spec"]["dataset"]["maxRows"] = 1
    api.apply(agent_body, eval_body)
    with operator(real_cluster, cluster_images, cluster_namespace):
        degraded = wait_for(
            lambda: (c := api.condition("Degraded")).get("status") == "True" and c, 90)
    assert degraded["reason"] == "FailedCreate"
    assert "forbidden" in degraded["message"] and "PodSecurity" in degraded["message"]
    assert api.evaluation()["status"]["reason"] == "FailedCreate"
    wait_for(lambda: degraded_events(api), 60)
    assert degraded_events(api)[0].startswith("FailedCreate: ")
    assert api.core.list_namespaced_pod(cluster_namespace).items == []


def degraded_events(api: Api) -> list[str]:
    """The messages of the Events that say the Evaluation became Degraded."""
    return [e.message for e in api.events()
            if e.reason == "Degraded" and e.involved_object.kind == "Evaluation"]


def children(api: Api) -> list[dict]:
    """What the operator made for the Evaluation that still exists."""
    selector = "proctor.dev/evaluation=demo"
    return [o.to_dict() for o in (
        *api.batch.list_namespaced_job(api.ns, label_selector=selector).items,
        *api.core.list_namespaced_pod(api.ns, label_selector=selector).items,
        *api.core.list_namespaced_config_map(api.ns, label_selector=selector).items)]


def test_deleting_an_evaluation_mid_run_creates_no_job_after_and_leaves_nothing_behind(
        real_cluster, cluster_images, cluster_namespace, api, agent, watch):
    # Both slots busy with a slow agent: no Job is due when the Evaluation is deleted, but
    # the garbage collector then removes its Jobs, and their slots look free.
    agent.delay = 30.0
    jobs = watch("jobs")
    api.apply(*manifests(cluster_namespace, agent.url, cluster_images))
    with operator(real_cluster, cluster_images, cluster_namespace):
        wait_for(lambda: api.running_pods() == 2, 120)
        api.custom.delete_namespaced_custom_object(*GROUP, cluster_namespace, "evaluations",
                                                   "demo")
        made = len(jobs.created())
        wait_for(lambda: not children(api), 90,
                 message="the deleted Evaluation's children are still there")
        # The operator has forgotten the Evaluation once it gives the agent's slots back
        # (it writes the agent's status then): no pass of it comes after that.
        wait_for(lambda: (api.custom.get_namespaced_custom_object(
            *GROUP, cluster_namespace, "agentundertests", "mixed").get("status") or {}).get(
            "tasksInFlight") == 0, 90, message="the agent's slots were not given back")
        assert len(jobs.created()) == made, "a Job was created after its Evaluation was deleted"
        assert not children(api)


def test_an_evaluation_deleted_while_the_operator_is_stopped_is_gone_and_stays_gone(
        real_cluster, cluster_images, cluster_namespace, api, agent, watch):
    agent.delay = 30.0
    jobs = watch("jobs")
    api.apply(*manifests(cluster_namespace, agent.url, cluster_images))
    with operator(real_cluster, cluster_images, cluster_namespace):
        wait_for(lambda: len(jobs.created()) >= 2, 120)
        assert not api.evaluation()["metadata"].get("finalizers")
    api.custom.delete_namespaced_custom_object(*GROUP, cluster_namespace, "evaluations", "demo")
    with pytest.raises(kubernetes.client.ApiException) as gone:  # no finalizer holds it
        api.evaluation()
    assert gone.value.status == 404
    made = jobs.created()
    wait_for(lambda: not children(api), 90)
    with operator(real_cluster, cluster_images, cluster_namespace):
        # A new Evaluation of the same name starts afresh; the restarted operator's Jobs
        # are all its own (none for the deleted one, before or beside them).
        new = gold_evaluation(cluster_namespace, cluster_images, maxConcurrentRows=3)
        new["spec"]["dataset"]["maxRows"] = 3
        api.apply(new)
        uid = api.evaluation()["metadata"]["uid"]
        body = wait_succeeded(api, timeout=180)
        since = {job: owner for job, owner in jobs.owners().items() if job not in made}
        assert since and set(since.values()) == {uid}, since
    assert body["status"]["items"]["done"] == 3


def test_an_evaluation_made_again_under_its_name_waits_for_what_its_predecessor_owned(
        real_cluster, cluster_images, cluster_namespace, api, caplog):
    """Deleted and created again at once, an Evaluation finds its predecessor's objects
    still there: the garbage collector removes them in its own time (here one kept result
    is held by a finalizer). Its items have the same names, so a kept result of the
    predecessor must not count as its own, nor its Jobs take their names: it waits."""
    def owned_by(uid: str) -> list[str]:
        return [o.metadata.name for o in (*api.batch.list_namespaced_job(api.ns).items,
                                          *api.configmaps())
                if any(ref.uid == uid for ref in o.metadata.owner_references or [])]

    body = gold_evaluation(cluster_namespace, cluster_images)
    body["spec"]["dataset"]["maxRows"] = 2
    api.apply(body)
    with operator(real_cluster, cluster_images, cluster_namespace):
        wait_succeeded(api, timeout=180)
        held = _result_configmaps(api)[0].metadata.name
        api.core.patch_namespaced_config_map(held, api.ns, {"metadata": {
            "finalizers": ["proctor.dev/test-hold"]}})
        api.custom.delete_namespaced_custom_object(*GROUP, api.ns, "evaluations", "demo")
        wait_for(lambda: [c.metadata.name for c in _result_configmaps(api)] == [held], 60)
        api.apply(body)
        uid = api.evaluation()["metadata"]["uid"]
        # The operator says, pass after pass, that it waits: two such passes seen, it has
        # made nothing of the new Evaluation.
        with caplog.at_level(logging.INFO, logger="proctor.controller"):
            caplog.clear()
            wait_for(lambda: sum("objects of an earlier Evaluation" in r.message
                                 for r in caplog.records) >= 2, 60)
        assert owned_by(uid) == [], "made objects beside an earlier Evaluation's"
        assert (api.evaluation().get("status") or {}).get("items", {}).get("done", 0) == 0
        api.core.patch_namespaced_config_map(held, api.ns, {"metadata": {"finalizers": None}})
        done = wait_succeeded(api, timeout=180)
    assert done["status"]["items"]["done"] == 2
    kept = _result_configmaps(api)
    assert len(kept) == 2
    assert all(ref.uid == uid for c in kept for ref in c.metadata.owner_references)


def _result_configmaps(api: Api) -> list[Any]:
    return [c for c in api.configmaps()
            if (c.metadata.labels or {}).get("app.kubernetes.io/component") == "result"]


def test_a_loopback_endpoint_is_refused_unless_the_operator_allows_it(
        real_cluster, cluster_images, cluster_namespace, api):
    local = CountingAgent("mixed", "127.0.0.1")
    try:
        api.apply(*manifests(cluster_namespace, local.url, cluster_images))
        with operator(real_cluster, cluster_images, cluster_namespace):
            ready = wait_for(
                lambda: (c := api.condition("Ready")).get("reason") == "LocalEndpoint" and c,
                90, message=lambda: f"no LocalEndpoint; status {api.evaluation().get('status')}")
            aut = wait_for(lambda: (api.custom.get_namespaced_custom_object(
                *GROUP, cluster_namespace, "agentundertests", "mixed").get("status") or {}).get(
                "conditions"), 90)
    finally:
        local.server.stop()
    assert ready["status"] == "False" and local.url in ready["message"]
    assert api.evaluation()["status"]["reason"] == "LocalEndpoint"
    assert (aut[0]["status"], aut[0]["reason"]) == ("False", "LocalEndpoint")
    assert api.jobs() == [] and sum(local.calls.values()) == 0


# --- Results in an object store --------------------------------------------------------------

S3_SERVER = ROOT / "scripts" / "s3-server.sh"


@pytest.fixture
def object_store(real_cluster: RealCluster, tmp_path: Path, monkeypatch
                 ) -> Iterator[Callable[[str], None]]:
    """The S3 server of scripts/s3-server.sh on the node's address, with bucket
    proctor-results; the operator of this process gets its keys (the chart's
    resultsStore.secretName). Yields `control("stop" | "start")`."""
    env = {**os.environ, "PROCTOR_S3_DIR": str(tmp_path / "s3"),
           "PROCTOR_S3_HOST": real_cluster.node_ip}
    up = subprocess.run(["bash", str(S3_SERVER), "up"], env=env, capture_output=True,
                        text=True, timeout=900)
    assert up.returncode == 0, up.stderr
    for line in up.stdout.split():
        monkeypatch.setenv(*line.split("=", 1))

    def control(action: str) -> None:
        done = subprocess.run(["bash", str(S3_SERVER), action], env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    try:
        yield control
    finally:
        control("down")


def test_a_store_keeps_etcd_small_pulls_the_same_files_and_loses_nothing_when_it_stops(
        real_cluster, cluster_images, cluster_namespace, cluster_api_client, api,
        object_store, tmp_path):
    ns, endpoint = cluster_namespace, os.environ["AWS_ENDPOINT_URL"]
    stored = gold_evaluation(ns, cluster_images, maxConcurrentRows=2, results={
        "store": {"url": "s3://proctor-results/cluster", "endpoint": endpoint}})
    plain = gold_evaluation(ns, cluster_images, maxConcurrentRows=3)
    plain["metadata"]["name"] = "plain"
    api.apply(stored, plain)
    with operator(real_cluster, cluster_images, ns):
        wait_for(lambda: api.done() >= 2, 300)
        object_store("stop")  # mid-run: the next uploads fail
        down = wait_for(lambda: api.condition("StoreUnavailable").get("status") == "True"
                        and api.condition("StoreUnavailable"), 300)
        object_store("start")
        body = wait_succeeded(api)
        # Once the store answers, the items kept in full while it was down move to it.
        wait_for(lambda: api.condition("StoreUnavailable").get("reason") == "Available", 300)
        wait_for(lambda: api.condition("Succeeded", "plain").get("status") == "True", 300)
    assert down["reason"] == "UploadFailed" and "object store" in down["message"]
    assert body["status"]["items"]["done"] == TASKS

    # etcd: a record per item, those kept in full while the store was down moved to it
    # (a record ConfigMap of their own, the full one deleted).
    kept = Kube(cluster_api_client).list_configmaps(
        ns, result_labels(parse_resource(stored)))["items"]
    records = [cm for cm in kept if "record.json" in cm["data"]]
    in_full = [cm for cm in kept if RESULT_KEY in cm["data"]]
    moved = [cm for cm in records if "-record-" in cm["metadata"]["name"]]
    sizes = sorted(len(json.dumps({**cm, "metadata": {
        k: v for k, v in cm["metadata"].items() if k != "managedFields"}})) for cm in records)
    whole = max(len(json.dumps(cm)) for cm in records)
    print(f"record ConfigMaps: {len(records)}, bytes {sizes[0]} to {sizes[-1]} "
          f"({whole} with managedFields); kept in full while the store was down, then "
          f"moved to it: {len(moved)}")
    assert len(records) == TASKS and moved and not in_full
    assert sizes[-1] <= 2048

    # `results pull` gives the same folder as the ConfigMap mode: outcomes and test logs.
    pull(Kube(cluster_api_client), ns, "demo", tmp_path / "stored")
    pull(Kube(cluster_api_client), ns, "plain", tmp_path / "plain")
    mine = {r.item_id: r for r in ResultsFolder(tmp_path / "stored").load()}
    theirs = {r.item_id: r for r in ResultsFolder(tmp_path / "plain").load()}
    assert len(mine) == TASKS and mine.keys() == theirs.keys()
    for key, r in mine.items():
        assert (r.outcome, r.FAIL_TO_PASS, r.PASS_TO_PASS) == \
            (theirs[key].outcome, theirs[key].FAIL_TO_PASS, theirs[key].PASS_TO_PASS)
        item = Path("items", r.instance_id, r.variant_id, str(r.repeat))
        ours, plain_dir = tmp_path / "stored" / item, tmp_path / "plain" / item
        assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in plain_dir.iterdir())
        assert (ours / "patch.diff").read_bytes() == (plain_dir / "patch.diff").read_bytes()
        if r.tests_ran:  # the same test output, but for times and numbers
            assert _tests_part(ours / "test_output.txt") == \
                _tests_part(plain_dir / "test_output.txt")

    # Deleting the Evaluation leaves its stored artefacts.
    api.custom.delete_namespaced_custom_object(*GROUP, ns, "evaluations", "demo")
    left = s3.client(endpoint).list_objects_v2(Bucket="proctor-results",
                                               Prefix=f"cluster/{ns}/demo/items/")
    assert left.get("KeyCount", 0) >= len(records) * 4


def _tests_part(path: Path) -> str:
    """The test command's output in a log (between swebench's markers), its numbers (times,
    temporary names) masked. What comes before differs from run to run: the eval script's
    `set -x` trace of the guard's pipeline interleaves as its processes run."""
    text = path.read_text(errors="replace")
    start = text.index(START_MARK)
    return re.sub(r"\d+", "N", text[start:])


def test_an_agent_that_goes_away_mid_run_is_waited_for_and_asked_again(
        real_cluster, cluster_images, cluster_namespace, api):
    """The agent stops once the first result is kept (the next item's pod is starting:
    its request meets no agent): the items it never answered are not kept as errors; the
    Evaluation waits (Ready=False) until it is back on the same address, asks it again,
    and ends Succeeded with every item answered."""
    agent = CountingAgent("mixed", real_cluster.node_ip, delay=3)  # requests in flight
    agent_body, eval_body = manifests(cluster_namespace, agent.url, cluster_images,
                                      dataset={"name": "proctor-demo", "maxRows": 4})
    api.apply(agent_body, eval_body)
    try:
        with operator(real_cluster, cluster_images, cluster_namespace):
            wait_for(lambda: results(api), 240, 0.3, "no result was kept")
            agent.server.stop()
            waiting = wait_for(
                lambda: api.condition("Ready").get("reason") in (
                    "AgentNotReady", "AgentNotAnswering") and api.condition("Ready"),
                120, 0.3, lambda: f"the Evaluation never waited: {api.evaluation()}")
            assert waiting["status"] == "False"
            # What was in flight ends (no new item starts): then no request of the old
            # server's can meet the new one.
            wait_for(lambda: api.running_pods() == 0, 180, 0.5, "pods still run")
            assert api.condition("Succeeded").get("status") != "True"
            assert api.condition("Ready").get("status") == "False"
            agent.start_again()
            body = wait_succeeded(api, timeout=300)
    finally:
        agent.server.stop()
    status = body["status"]
    assert status["items"]["done"] == status["items"]["total"] == 4
    kept = [json.loads(c.data[RESULT_KEY]) for c in results(api)]
    assert not [r for r in kept if r.get("agent_unanswered")], "an unanswered item was kept"
    # Every item's result is an answer the agent gave: it was asked for each.
    assert all(agent.calls[r["instance_id"]] >= 1 for r in kept), agent.calls
    # The item started as the agent stopped was asked again (the next attempt).
    assert "AskingAgain" in {e.reason for e in api.events()}
    assert status["items"]["retries"] >= 1
