"""The real kopf operator against the test cluster (kmock + a kubelet playing the pods).

Each scenario applies manifests through the official client, runs `proctor.k8s.controller`
with kopf's KopfRunner, and watches what a user would: the status, Jobs, Events, the
results kept, the metrics. The reference agents listen on loopback, so the operator runs
as `proctor operator --allow-local-endpoints` would, except in the test of that refusal.
"""

from __future__ import annotations

import collections
import json
import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kopf.testing import KopfRunner
from prometheus_client import REGISTRY, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from cluster import Simulation
from ports import free_port
from proctor.agents.answers import TaskRequest
from proctor.agents.kinds import Tasks, solver_for
from proctor.agents.server import SolverExecutor, agent_card, build_app, start_in_thread
from proctor.datasets import demo
from proctor.formats.manifest import parse_resource
from proctor.k8s.api import Kube
from proctor.k8s.pull import pull
from proctor.local.engine import run_evaluation
from proctor.results import ResultsFolder

pytest_plugins = ["cluster.fixtures"]

GROUP = ("proctor.dev", "v1alpha1")
TASKS = len(demo.load_rows())


class CountingAgent:
    """A reference agent on loopback that counts the messages it is sent, per task."""

    def __init__(self, kind: str):
        self.calls: collections.Counter[str] = collections.Counter()
        tasks = Tasks.load()
        solve = solver_for(kind, tasks)
        lock = threading.Lock()

        def counted(request: TaskRequest):
            # The message names no instance (no taskData): the task is found by its text.
            row = tasks.find(request)
            with lock:
                self.calls[str(row["instance_id"]) if row else "?"] += 1
            return solve(request)

        self.server = start_in_thread(
            lambda url: build_app(SolverExecutor(counted), agent_card(kind, url)))
        self.url = self.server.url


@pytest.fixture
def agent() -> Iterator[CountingAgent]:
    counting = CountingAgent("mixed")
    yield counting
    counting.server.stop()


@contextmanager
def operator(cluster, namespace: str, probe_port: int | None = None,
             allow_local: bool = True) -> Iterator[KopfRunner]:
    args = ["run", "--standalone", "--namespace", namespace, "-m", "proctor.k8s.controller"]
    if probe_port:
        args += ["--liveness", f"http://127.0.0.1:{probe_port}/healthz"]
    before = os.environ.pop("PROCTOR_ALLOW_LOCAL_ENDPOINTS", None)
    if allow_local:  # what `proctor operator --allow-local-endpoints` sets
        os.environ["PROCTOR_ALLOW_LOCAL_ENDPOINTS"] = "1"
    try:
        with cluster.kubeconfig_env(), KopfRunner(args, timeout=60) as runner:
            yield runner
    finally:
        os.environ.pop("PROCTOR_ALLOW_LOCAL_ENDPOINTS", None)
        if before is not None:
            os.environ["PROCTOR_ALLOW_LOCAL_ENDPOINTS"] = before
    assert runner.exception is None, runner.output[-3000:]


def manifests(namespace: str, endpoint: str, **spec: Any) -> tuple[dict, dict]:
    agent = {"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
             "metadata": {"name": "mixed", "namespace": namespace},
             "spec": {"endpoint": endpoint, "requestTimeoutSeconds": 60}}
    evaluation = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                  "metadata": {"name": "demo", "namespace": namespace},
                  "spec": {"agentRef": {"name": "mixed"},
                           "dataset": {"name": "proctor-demo", "maxRows": -1},
                           "maxConcurrentRows": 2, **spec}}
    return agent, evaluation


class Api:
    def __init__(self, client: Any, namespace: str):
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

    def jobs(self) -> list[dict]:
        return [j.to_dict() for j in self.batch.list_namespaced_job(self.ns).items]

    def active_jobs(self) -> int:
        def ended(job: dict) -> bool:
            return any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
                       for c in (job.get("status") or {}).get("conditions") or [])
        return sum(not ended(j) for j in self.jobs())

    def running_pods(self) -> int:
        return sum(p.status.phase not in ("Succeeded", "Failed")
                   for p in self.core.list_namespaced_pod(self.ns).items)

    def configmaps(self) -> list[Any]:
        return self.core.list_namespaced_config_map(self.ns).items

    def events(self) -> list[Any]:
        return self.core.list_namespaced_event(self.ns).items


def wait_succeeded(cluster, api: Api, timeout: float = 240, watch: list | None = None,
                   sample: Any = None) -> dict:
    """Wait for Succeeded=True, sampling the active Jobs (or `sample()`) into `watch`."""
    def done() -> bool:
        if watch is not None:
            watch.append((sample or api.active_jobs)())
        return api.condition("Succeeded").get("status") == "True"
    cluster.wait_for(done, timeout, interval=0.2, message="the Evaluation never succeeded")
    return api.evaluation()


def results(api: Api) -> list[Any]:
    """The result ConfigMaps kept so far."""
    return [c for c in api.configmaps()
            if (c.metadata.labels or {}).get("app.kubernetes.io/component") == "result"]


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_demo_evaluation_end_to_end(test_cluster, k8s_namespace, kube_client, agent, tmp_path):
    api = Api(kube_client, k8s_namespace)
    agent_body, eval_body = manifests(k8s_namespace, agent.url)
    api.apply(agent_body, eval_body)
    metrics, _ = start_http_server(0, addr="127.0.0.1")
    metrics_port, probe_port = metrics.server_port, free_port()
    active: list[int] = []
    busy: list[int] = []

    def agent_in_flight() -> int:
        status = api.custom.get_namespaced_custom_object(
            *GROUP, k8s_namespace, "agentundertests", agent_body["metadata"]["name"]).get(
            "status") or {}
        busy.append(status.get("tasksInFlight", 0))
        return api.active_jobs()

    with operator(test_cluster, k8s_namespace, probe_port):
        body = wait_succeeded(test_cluster, api, watch=active, sample=agent_in_flight)
        health = urllib.request.urlopen(f"http://127.0.0.1:{probe_port}/healthz", timeout=5)
        assert health.status == 200
        samples = scrape(metrics_port)
    metrics.shutdown()
    status = body["status"]
    assert status["items"]["done"] == status["items"]["total"] == TASKS
    assert max(active) <= 2, "more Jobs ran at once than maxConcurrentRows"
    assert status["reason"] == "AllItemsDone"
    assert not body["metadata"].get("finalizers"), "the Evaluation needs no finalizer"
    # The AgentUnderTest says how it is reached, that it is usable, and had tasks in
    # flight while the Evaluation ran (none once it is done).
    assert max(busy) > 0, "the agent's status never showed a task in flight"
    aut = api.custom.get_namespaced_custom_object(*GROUP, k8s_namespace, "agentundertests",
                                                  agent_body["metadata"]["name"])["status"]
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
    assert pull(Kube(kube_client), k8s_namespace, "demo", pulled) == TASKS
    summary = json.loads((pulled / "summary.json").read_text())
    assert summary["results"] == json.loads((tmp_path / "local" / "summary.json").read_text()
                                            )["results"]
    by_item = {r.item_id: r for r in ResultsFolder(pulled).load()}
    for mine in ResultsFolder(tmp_path / "local").load():
        theirs = by_item[mine.item_id]
        assert (theirs.outcome, theirs.FAIL_TO_PASS, theirs.PASS_TO_PASS) == \
            (mine.outcome, mine.FAIL_TO_PASS, mine.PASS_TO_PASS)
        assert all("sha256:" in image for image in theirs.images.values())
        assert theirs.images, "image digests are recorded with each result"
        item_dir = Path(pulled, "items", mine.instance_id, mine.variant_id, str(mine.repeat))
        assert (item_dir / "result.json").exists() and (item_dir / "report.json").exists()
        if mine.tests_ran:
            assert ">>>>> Start Test Output" in (item_dir / "test_output.txt").read_text()

    # Everything it made is owned by the Evaluation.
    uid = body["metadata"]["uid"]
    owned = [*api.jobs(), *[c.to_dict() for c in api.configmaps()
                            if (c.metadata.labels or {}).get("app.kubernetes.io/managed-by")]]
    assert owned and all(any(o["uid"] == uid for o in (x["metadata"]["owner_references"] or []))
                         for x in owned)

    # Metrics scraped from the operator's port equal summary.json.
    labels = frozenset({"namespace": k8s_namespace, "evaluation": "demo",
                        "agent": "mixed"}.items())
    assert samples[("proctor_resolved_ratio", labels)] == summary["results"]["resolved_pct"]
    assert samples[("proctor_instances", labels)] == TASKS
    assert samples[("proctor_no_op_ratio", labels)] == summary["results"]["no_op_pct"]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def test_restart_mid_run_creates_no_duplicate_and_loses_nothing(test_cluster, k8s_namespace,
                                                                 kube_client, agent):
    api = Api(kube_client, k8s_namespace)
    api.apply(*manifests(k8s_namespace, agent.url))
    with operator(test_cluster, k8s_namespace):
        test_cluster.wait_for(lambda: (api.evaluation().get("status") or {}).get(
            "items", {}).get("done", 0) >= 3, 120)
    with operator(test_cluster, k8s_namespace):
        body = wait_succeeded(test_cluster, api)
    assert body["status"]["items"]["done"] == TASKS
    creates = [c for c in test_cluster.calls("POST", f"/namespaces/{k8s_namespace}/jobs")
               if c[2] in (200, 201)]
    assert len(creates) == TASKS, "a Job was created twice"
    assert sum(agent.calls.values()) == TASKS, "the agent was asked twice"
    assert len(results(api)) == TASKS


def test_suspend_starts_nothing_until_resumed(test_cluster, k8s_namespace, kube_client, agent):
    api = Api(kube_client, k8s_namespace)
    agent_body, eval_body = manifests(k8s_namespace, agent.url, suspend=True, maxConcurrentRows=3)
    eval_body["spec"]["dataset"]["maxRows"] = 3
    api.apply(agent_body, eval_body)
    with operator(test_cluster, k8s_namespace):
        test_cluster.wait_for(lambda: api.condition("Ready").get("status") == "True", 30)
        time.sleep(2)
        assert api.jobs() == []
        assert api.condition("Running")["reason"] == "Suspended"
        assert api.evaluation()["status"]["reason"] == "Suspended"
        api.custom.patch_namespaced_custom_object(*GROUP, k8s_namespace, "evaluations", "demo",
                                                  {"spec": {"suspend": False}})
        body = wait_succeeded(test_cluster, api)
    assert body["status"]["items"]["done"] == 3
    assert body["status"]["reason"] == "AllItemsDone"


def test_a_slot_is_refilled_when_the_pod_ends_not_when_the_job_is_complete(
        test_cluster, k8s_namespace, kube_client):
    """As on a real cluster, whose Job controller marks a Job Complete about a second after
    its pod ends (it batches pod updates): the operator keeps each result when the pod
    ends, and starts the next item in its slot then, not a second later."""
    kubelet = test_cluster.kubelet
    kubelet.simulation = Simulation({"solve": 0.05})
    kubelet.job_sync_batch_seconds = 1.0
    api = Api(kube_client, k8s_namespace)
    _, eval_body = manifests(k8s_namespace, "", predictions={"source": "gold"})
    del eval_body["spec"]["agentRef"]
    active: list[int] = []
    try:
        api.apply(eval_body)
        with operator(test_cluster, k8s_namespace):
            began = time.monotonic()
            body = wait_succeeded(test_cluster, api, timeout=120, watch=active,
                                  sample=api.running_pods)
            took = time.monotonic() - began
    finally:
        kubelet.job_sync_batch_seconds = 0.0
    assert body["status"]["items"]["done"] == TASKS and len(results(api)) == TASKS
    assert max(active) <= 2  # pods not ended (a Job whose pod ended holds no slot)
    # Five rounds of two Jobs: less than the second each would wait for its Complete.
    assert took < TASKS / 2 * 1.0, took


def reconcile_errors() -> float:
    """proctor_reconcile_errors_total of this process's operator (0 before it ever ran), as
    its metrics endpoint serves it (the default registry)."""
    return REGISTRY.get_sample_value("proctor_reconcile_errors_total") or 0.0


def test_status_writes_refused_for_a_while_lose_nothing(test_cluster, k8s_namespace,
                                                         kube_client, agent):
    """The API server refuses the Evaluation's status writes for a while (etcd timing out):
    the items go on meanwhile, the refusals are counted as reconcile errors, and the status
    is written, complete, once the server takes it."""
    api = Api(kube_client, k8s_namespace)
    agent_body, eval_body = manifests(k8s_namespace, agent.url, maxConcurrentRows=3)
    eval_body["spec"]["dataset"]["maxRows"] = 3
    status_path = f"/namespaces/{k8s_namespace}/evaluations/demo/status"
    # Only the operator's own status writes (kopf writes its progress there too in a
    # process that registers change handlers).
    test_cluster.emulator.refuse("PATCH", status_path, times=3,
                                 body_contains='"observedGeneration"')
    before = reconcile_errors()
    api.apply(agent_body, eval_body)
    with operator(test_cluster, k8s_namespace):
        body = wait_succeeded(test_cluster, api)
    writes = test_cluster.calls("PATCH", status_path)
    assert [c[2] for c in writes].count(500) == 3
    assert reconcile_errors() - before == 3
    assert body["status"]["items"]["done"] == 3
    assert len(results(api)) == 3


def test_job_creations_refused_are_tried_again(test_cluster, k8s_namespace, kube_client,
                                               agent):
    """The API server refuses the first Job creations (etcd timing out): their slots are
    not lost; a later pass creates each Job, once."""
    api = Api(kube_client, k8s_namespace)
    agent_body, eval_body = manifests(k8s_namespace, agent.url, maxConcurrentRows=3)
    eval_body["spec"]["dataset"]["maxRows"] = 3
    jobs_path = f"/namespaces/{k8s_namespace}/jobs"
    test_cluster.emulator.refuse("POST", jobs_path, times=2)
    api.apply(agent_body, eval_body)
    with operator(test_cluster, k8s_namespace):
        body = wait_succeeded(test_cluster, api)
    answers = [c[2] for c in test_cluster.calls("POST", jobs_path)]
    assert answers.count(500) == 2 and answers.count(201) == 3
    assert body["status"]["items"]["done"] == 3
    assert len(results(api)) == 3


@pytest.mark.parametrize(("change", "reason", "words"), [
    ({"dataset": {"name": "proctor-demo", "instanceIds": ["nope__nope-1"]}},
     "DatasetUnusable", "nope__nope-1"),
    ({"agentRef": {"name": "no-such-agent"}}, "AgentNotFound", "no-such-agent"),
    ({"promptSensitivity": {"enabled": True}}, "PromptSensitivityUnsupported",
     "promptSensitivity is not run yet"),
])
def test_an_unusable_spec_is_degraded_and_creates_nothing(test_cluster, k8s_namespace,
                                                          kube_client, agent, change, reason,
                                                          words):
    # (A spec the CRD's schema refuses never gets this far: the API server answers 422.)
    api = Api(kube_client, k8s_namespace)
    agent_body, eval_body = manifests(k8s_namespace, agent.url)
    eval_body["spec"].update(change)
    api.apply(agent_body, eval_body)
    with operator(test_cluster, k8s_namespace):
        degraded = test_cluster.wait_for(
            lambda: (c := api.condition("Degraded")).get("status") == "True" and c, 30)
        time.sleep(1)
    assert degraded["reason"] == reason and words in degraded["message"]
    assert api.condition("Ready")["status"] == "False"
    assert api.evaluation()["status"]["reason"] == reason  # a default column of kubectl get
    assert f"{reason}: " in degraded_events(api)[0]
    assert api.jobs() == [] and not [c for c in api.configmaps()
                                     if (c.metadata.labels or {}).get("proctor.dev/evaluation")]


def test_an_agent_deleted_mid_run_degrades_and_starts_nothing_more(test_cluster, k8s_namespace,
                                                                   kube_client, agent):
    # Nor do the Jobs that were running give their slots to new items when they end; what
    # they get is kept all the same.
    api = Api(kube_client, k8s_namespace)
    api.apply(*manifests(k8s_namespace, agent.url))

    def created() -> int:
        return jobs_created(test_cluster, k8s_namespace)
    with operator(test_cluster, k8s_namespace):
        test_cluster.wait_for(lambda: created() >= 2, 60)
        api.custom.delete_namespaced_custom_object(*GROUP, k8s_namespace, "agentundertests",
                                                   "mixed")
        test_cluster.wait_for(lambda: api.condition("Degraded").get("reason") == "AgentNotFound",
                              30)
        made = created()
        test_cluster.wait_for(lambda: api.active_jobs() == 0, 120)
        # The Jobs that were running still have their results kept (and are cleaned up).
        test_cluster.wait_for(lambda: len(results(api)) == made and not api.jobs(), 60)
        time.sleep(1)
    assert created() == made < TASKS


def test_the_api_server_refuses_a_spec_its_schema_refuses(test_cluster, k8s_namespace,
                                                          kube_client, agent):
    api = Api(kube_client, k8s_namespace)
    _, eval_body = manifests(k8s_namespace, agent.url)
    eval_body["spec"]["dataset"]["maxRows"] = 0
    with pytest.raises(kubernetes.client.ApiException) as refused:
        api.apply(eval_body)
    assert refused.value.status == 422 and "maxRows" in refused.value.body


@pytest.mark.parametrize("fault", ["image_pull", "evict", "oom", "deadline"])
def test_infra_failures_are_retried_without_asking_again_then_recorded(
        test_cluster, k8s_namespace, kube_client, agent, fault, monkeypatch):
    monkeypatch.setenv("PROCTOR_IMAGE_PULL_TIMEOUT_SECONDS", "2")
    rows = demo.load_rows()
    flaky, broken = rows[0]["instance_id"], rows[1]["instance_id"]
    # Each fault strikes as its step starts: a delayed strike could lose the race with a
    # fast test step (seen on a fresh machine).
    test_cluster.kubelet.faults.add(fault, instance=flaky, times=1)
    test_cluster.kubelet.faults.add(fault, instance=broken, times=None)
    api = Api(kube_client, k8s_namespace)
    agent_body, eval_body = manifests(k8s_namespace, agent.url, runner={"infraRetries": 1})
    eval_body["spec"]["dataset"]["instanceIds"] = [flaky, broken]
    api.apply(agent_body, eval_body)
    with operator(test_cluster, k8s_namespace):
        body = wait_succeeded(test_cluster, api, timeout=120)
    kept = {r.instance_id: r for r in _results(kube_client, k8s_namespace)}
    assert kept[flaky].outcome.value != "error" and kept[flaky].attempts == 2
    assert kept[broken].outcome.value == "error" and kept[broken].error_kind.value == "infra"
    assert kept[broken].attempts == 2
    # a pod stopped before its solve step never reached the agent; else it was asked once
    expected = 0 if fault in ("image_pull", "deadline") else 1
    assert agent.calls[broken] == expected and agent.calls[flaky] == 1
    assert body["status"]["items"]["retries"] == 2
    reasons = {e.reason for e in api.events()}
    assert "Retrying" in reasons and "ItemFailed" in reasons


def test_a_gold_run_is_retried_after_an_infra_failure_with_the_given_patch(
        test_cluster, k8s_namespace, kube_client):
    """The solve step prints a given patch as it prints an agent's: the retry of a gold
    run runs the task's patch again, and keeps no patch of its own."""
    flaky = demo.load_rows()[0]["instance_id"]
    test_cluster.kubelet.faults.add("oom", instance=flaky, times=1)
    api = Api(kube_client, k8s_namespace)
    body = gold_evaluation(k8s_namespace, runner={"infraRetries": 1})
    body["spec"]["dataset"]["instanceIds"] = [flaky]
    api.apply(body)
    with operator(test_cluster, k8s_namespace):
        wait_succeeded(test_cluster, api, timeout=60)
    (result,) = _results(kube_client, k8s_namespace)
    assert (result.outcome.value, result.attempts) == ("resolved", 2)


def _results(client: Any, namespace: str) -> list[Any]:
    from proctor.k8s.store import read_result

    kube = Kube(client)
    return [read_result(c) for c in kube.list_configmaps(
        namespace, {"app.kubernetes.io/component": "result"})["items"]]


def test_failed_create_degrades_naming_the_cause(test_cluster, k8s_namespace, kube_client,
                                                  agent):
    test_cluster.kubelet.faults.add("failed_create", times=None)
    api = Api(kube_client, k8s_namespace)
    agent_body, eval_body = manifests(k8s_namespace, agent.url)
    eval_body["spec"]["dataset"]["maxRows"] = 1
    api.apply(agent_body, eval_body)
    with operator(test_cluster, k8s_namespace):
        degraded = test_cluster.wait_for(
            lambda: (c := api.condition("Degraded")).get("status") == "True" and c, 60)
    assert degraded["reason"] == "FailedCreate"
    assert "forbidden" in degraded["message"] or "PodSecurity" in degraded["message"]
    assert api.evaluation()["status"]["reason"] == "FailedCreate"
    test_cluster.wait_for(lambda: degraded_events(api), 30)
    assert degraded_events(api)[0].startswith("FailedCreate: ")


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


def gold_evaluation(k8s_namespace: str, **spec: Any) -> dict:
    _, body = manifests(k8s_namespace, "", predictions={"source": "gold"}, **spec)
    del body["spec"]["agentRef"]
    return body


def jobs_created(cluster: Any, namespace: str) -> int:
    """The Jobs the API server created in the namespace so far."""
    return len([c for c in cluster.calls("POST", f"/namespaces/{namespace}/jobs")
                if c[2] == 201])


def slow_gold_run(cluster: Any, kube_client: Any, namespace: str) -> tuple[Api, Any]:
    """A gold run whose pods take two seconds each; the API and a count of Jobs created."""
    cluster.kubelet.simulation = Simulation({"solve": 2.0})
    api = Api(kube_client, namespace)
    api.apply(gold_evaluation(namespace))
    return api, lambda: jobs_created(cluster, namespace)


def test_deleting_an_evaluation_mid_run_creates_no_job_after_and_leaves_nothing_behind(
        test_cluster, k8s_namespace, kube_client):
    # Both slots busy for two seconds: no Job is due when the Evaluation is deleted, but the
    # garbage collector then removes its Jobs, and their slots look free.
    api, created = slow_gold_run(test_cluster, kube_client, k8s_namespace)
    with operator(test_cluster, k8s_namespace):
        test_cluster.wait_for(lambda: api.active_jobs() == 2, 60)
        api.custom.delete_namespaced_custom_object(*GROUP, k8s_namespace, "evaluations", "demo")
        made = created()
        test_cluster.wait_for(lambda: not children(api), 30,
                              message="the deleted Evaluation's children are still there")
        time.sleep(3)  # resyncs and Job events have come and gone
        assert created() == made, "a Job was created after its Evaluation was deleted"
        assert not children(api)


def test_an_evaluation_deleted_while_the_operator_is_stopped_is_gone_and_stays_gone(
        test_cluster, k8s_namespace, kube_client):
    api, created = slow_gold_run(test_cluster, kube_client, k8s_namespace)
    with operator(test_cluster, k8s_namespace):
        test_cluster.wait_for(lambda: created() >= 2, 60)
        assert not api.evaluation()["metadata"].get("finalizers")
    api.custom.delete_namespaced_custom_object(*GROUP, k8s_namespace, "evaluations", "demo")
    with pytest.raises(kubernetes.client.ApiException) as gone:  # no finalizer holds it
        api.evaluation()
    assert gone.value.status == 404
    made = created()
    test_cluster.wait_for(lambda: not children(api), 30)
    test_cluster.kubelet.simulation = Simulation({"solve": 0.05})
    with operator(test_cluster, k8s_namespace):
        time.sleep(3)
        assert created() == made and not children(api)
        # A new Evaluation of the same name starts afresh.
        api.apply(gold_evaluation(k8s_namespace, maxConcurrentRows=2))
        body = wait_succeeded(test_cluster, api, timeout=120)
    assert body["status"]["items"]["done"] == TASKS


def test_a_loopback_endpoint_is_refused_unless_the_operator_allows_it(
        test_cluster, k8s_namespace, kube_client, agent):
    api = Api(kube_client, k8s_namespace)
    api.apply(*manifests(k8s_namespace, agent.url))
    with operator(test_cluster, k8s_namespace, allow_local=False):
        ready = test_cluster.wait_for(
            lambda: (c := api.condition("Ready")).get("reason") == "LocalEndpoint" and c, 30)
        aut = test_cluster.wait_for(lambda: (api.custom.get_namespaced_custom_object(
            *GROUP, k8s_namespace, "agentundertests", "mixed").get("status") or {}).get(
            "conditions"), 30)
        time.sleep(1)
    assert ready["status"] == "False" and agent.url in ready["message"]
    assert api.evaluation()["status"]["reason"] == "LocalEndpoint"
    assert (aut[0]["status"], aut[0]["reason"]) == ("False", "LocalEndpoint")
    assert api.jobs() == [] and sum(agent.calls.values()) == 0
