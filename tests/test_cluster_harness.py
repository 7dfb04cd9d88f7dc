"""The test cluster itself (tests/cluster), without the operator.

Jobs made by ``proctor.k8s.manifests`` go in through the official ``kubernetes`` client;
the harness runs them (for real, or simulated) and what comes back must read through
``proctor.k8s.podstatus.item_state`` as the right state, with the fields, reasons and
shapes of the real objects in shared/data/k8s-status. Then the API semantics the operator
relies on, garbage collection, and kopf's handshake.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import kopf
import kubernetes
import pytest
import yaml
from kopf.testing import KopfRunner

from cluster import ApiError, Simulation, Store, register_proctor_crds, running_cluster
from cluster.emulator import Cluster
from conftest import SHARED_DATA, task_files
from proctor.core.model import ErrorKind, Instance, Outcome, RunResult, WorkItem
from proctor.core.plan import PlanInputs, plan
from proctor.core.spec import AgentUnderTest, AgentUnderTestSpec, Evaluation, EvaluationSpec
from proctor.datasets import demo
from proctor.k8s import manifests as m
from proctor.k8s.podstatus import ItemState, Phase, PodsByJob, item_state
from proctor.runner.grade import compact_result
from proctor.runner.solve import patch_from_log

pytest_plugins = ["cluster.fixtures"]

K8S = SHARED_DATA / "k8s-status"
INSTANCES = {row["instance_id"]: Instance.model_validate(row) for row in demo.load_rows()}
DATEKIT, TEXTKIT = "proctor-demo__datekit-1", "proctor-demo__textkit-1"
ApiException = kubernetes.client.ApiException


def real(name: str) -> list[dict[str, Any]]:
    text = (K8S / name).read_text()
    obj = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
    return obj.get("items", [obj])


REAL_PODS = [pod for name in ("kubelet-podlist-succeeded-and-running-job-pod_nvsentinel.json",
                              "podlist-oomkilled-job-pod_troubleshoot.json",
                              "pod-evicted-emptydir-sizelimit_aiops-e2e-report_k8s1.26.yaml",
                              "pod-pending-imagepullbackoff_aiops-e2e-report_k8s1.26.yaml",
                              "podlist-errimagepull-pending_troubleshoot.json",
                              "pod-succeeded-tekton-init-completed-with-termination-message_"
                              "blog.yaml")
             for pod in real(name)]
POD_STATUS_KEYS = {key for pod in REAL_PODS for key in pod["status"]}
CONTAINER_KEYS = {key for pod in REAL_PODS for key in pod["status"]["containerStatuses"][0]}
COMPLETE_JOB = real("job-complete-successcriteriamet_k8s131plus.yaml")[0]
FAILED_JOB = real("job-failed-backofflimitexceeded-failuretarget_k8s131plus.yaml")[0]
DEADLINE_STATUS = real("job-failed-deadlineexceeded_STATUS-ONLY-PARTIAL_blog2025.yaml")[0]
KUBELET_EVENTS = [e for e in real("eventlist-imagepull-oomjob-backofflimit_troubleshoot.json")
                  if e["source"].get("component") == "kubelet"]
# kubectl adds kind and apiVersion to the items of a list; the apiserver leaves them out.
TYPE_META = {"kind", "apiVersion"}
FAILED_CREATE = real("event-failedcreate-podsecurity-replicaset-controller_k8s1.35_blog.json")[0]


# --- Helpers --------------------------------------------------------------------------------


def evaluation(namespace: str, name: str = "demo", **spec: Any) -> Evaluation:
    body = {"predictions": {"source": "gold"}, "dataset": {"name": "proctor-demo"}, **spec}
    return Evaluation(name=name, namespace=namespace, spec=EvaluationSpec.model_validate(body))


def item_of(instance_id: str, repeat: int = 0) -> WorkItem:
    inputs = PlanInputs(dataset="proctor-demo", revision="test", agent="gold",
                        repeats=repeat + 1)
    return next(i for i in plan(inputs, [INSTANCES[instance_id]]) if i.repeat == repeat)


def submit(client: Any, ev: Evaluation, instance_id: str, *, repeat: int = 0,
           attempt: int = 0, agent: AgentUnderTest | None = None, **job_options: Any
           ) -> tuple[dict[str, Any], dict[str, Any], WorkItem]:
    """The task's ConfigMap (if new) and the item's Job, created with the official client."""
    instance, item = INSTANCES[instance_id], item_of(instance_id, repeat)
    configmap = m.task_configmap(ev, instance, {})
    core = kubernetes.client.CoreV1Api(client)
    try:
        core.create_namespaced_config_map(ev.namespace, configmap)
    except ApiException as exc:
        assert exc.status == 409
    job = m.desired_job(ev, agent, item, instance, configmap, runner_version="0.1.0",
                        attempt=attempt, **job_options)
    kubernetes.client.BatchV1Api(client).create_namespaced_job(ev.namespace, job)
    return job, configmap, item


def raw(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A call's JSON exactly as the server sent it (not the client's models)."""
    return json.loads(call(*args, _preload_content=False, **kwargs).data)


def objects(client: Any, namespace: str, job_name: str
            ) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The Job, its pods and the namespace's events, read over HTTP as an operator reads."""
    core, batch = kubernetes.client.CoreV1Api(client), kubernetes.client.BatchV1Api(client)
    job = raw(batch.read_namespaced_job, job_name, namespace)
    pods = raw(core.list_namespaced_pod, namespace, label_selector=f"job-name={job_name}")
    events = raw(core.list_namespaced_event, namespace)
    return job, PodsByJob(pods["items"]).of(job), events["items"]


def wait_state(cluster: Cluster, client: Any, namespace: str, job_name: str,
               done: Callable[[ItemState], bool] | None = None, timeout: float = 60
               ) -> ItemState:
    """The item's state once ``done`` holds; without it, once the Job has its terminal
    condition (Complete or Failed), as the Job controller sets it."""
    def reached() -> ItemState | None:
        job, pods, events = objects(client, namespace, job_name)
        state = item_state(job, pods, events)
        terminal = {"Complete", "Failed"} & {c for c, _, _ in conditions(job)}
        return state if (done(state) if done else terminal) else None
    return cluster.wait_for(reached, timeout, message=f"Job {job_name} never got there")


def conditions(obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["type"], c.get("reason", ""), c.get("message", ""))
            for c in obj["status"].get("conditions") or []]


def check_pod_shape(pod: dict[str, Any]) -> None:
    """Every field the harness writes in a pod's status is one real pods have."""
    status = pod["status"]
    assert set(status) <= POD_STATUS_KEYS | {"initContainerStatuses"}
    for key in ("initContainerStatuses", "containerStatuses"):
        for entry in status.get(key) or []:
            assert set(entry) <= CONTAINER_KEYS
            (state, detail), = entry["state"].items()
            if state == "terminated":
                assert {"exitCode", "reason", "startedAt", "finishedAt", "containerID"} <= set(
                    detail) <= {"exitCode", "reason", "startedAt", "finishedAt", "containerID",
                                "message"}
                assert re.fullmatch(r"[\w.-]+(/[\w.-]+)+@sha256:[0-9a-f]{64}", entry["imageID"])
    for condition in status["conditions"]:
        assert set(condition) <= {"type", "status", "lastProbeTime", "lastTransitionTime",
                                  "reason", "message"}


# --- A real run -----------------------------------------------------------------------------


def test_a_gold_job_runs_for_real_and_reads_as_resolved(test_cluster: Cluster,
                                                        k8s_namespace: str,
                                                        kube_client: Any) -> None:
    ns, core = k8s_namespace, kubernetes.client.CoreV1Api(kube_client)
    job, configmap, item = submit(kube_client, evaluation(ns), DATEKIT)
    name = job["metadata"]["name"]
    # The Job controller: one pod at once, and the Job counts it active.
    stored, pods, _ = test_cluster.wait_for(
        lambda: (found := objects(kube_client, ns, name))[1]
        and found[0]["status"].get("active") == 1 and found, 10)
    pod = pods[0]
    assert re.fullmatch(rf"{name}-[a-z0-9]{{5}}", pod["metadata"]["name"])
    labels, uid = pod["metadata"]["labels"], stored["metadata"]["uid"]
    assert labels["job-name"] == labels["batch.kubernetes.io/job-name"] == name
    assert labels["controller-uid"] == labels["batch.kubernetes.io/controller-uid"] == uid
    assert labels["proctor.dev/item"] == item.id
    assert pod["metadata"]["ownerReferences"][0] | {"uid": uid} == {
        "apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
        "controller": True, "blockOwnerDeletion": True}
    assert pod["metadata"]["finalizers"] == ["batch.kubernetes.io/job-tracking"]
    assert stored["status"]["active"] == 1 and stored["status"]["startTime"]
    assert stored["spec"]["selector"] == {"matchLabels": {
        "batch.kubernetes.io/controller-uid": uid}}
    # The projected /task is what the manifests say the kubelet makes of it.
    task = test_cluster.wait_for(lambda: test_cluster.kubelet.volume(
        ns, pod["metadata"]["name"], "task"), 10)
    assert {p.name: p.read_text() for p in task.iterdir()} == task_files(job, [configmap])

    state = wait_state(test_cluster, kube_client, ns, name)
    assert (state.phase, state.reason, state.error_kind) == (Phase.SUCCEEDED, "Completed", None)
    assert state.result is not None and state.result["item"] == item.id
    assert (state.result["outcome"], state.result["f2p"][0]) == ("resolved",
                                                                 state.result["f2p"][1])
    assert state.node in {"node-1", "node-2", "node-3"} and "@sha256:" in state.images["test"]
    assert [s.name for s in state.steps] == ["pull", "solve", "test", "grade"]
    assert all(s.state == "terminated" and s.exit_code == 0 for s in state.steps)

    # The pod log endpoint: the grade step printed the full result first (no container
    # named: the pod's only main container); solve printed the patch for retries.
    pod_name = state.pod
    grade_log = core.read_namespaced_pod_log(pod_name, ns)
    full = RunResult.model_validate_json(grade_log.splitlines()[0])
    assert full.outcome == Outcome.RESOLVED and compact_result(full) == state.result
    solve_log = core.read_namespaced_pod_log(pod_name, ns, container="solve")
    assert patch_from_log(solve_log).strip() == INSTANCES[DATEKIT].patch.strip()

    # Shapes: the Job as a 1.31+ job-controller writes it, the pod as a kubelet does.
    job_obj, pods, events = objects(kube_client, ns, name)
    assert set(job_obj["status"]) == set(COMPLETE_JOB["status"])
    assert conditions(job_obj) == [(t, r, msg) for t, r, msg in conditions(COMPLETE_JOB)]
    assert job_obj["status"]["succeeded"] == 1
    check_pod_shape(pods[0])
    assert pods[0]["status"]["phase"] == "Succeeded" and "finalizers" not in pods[0]["metadata"]
    assert [c["type"] for c in pods[0]["status"]["conditions"]] == [
        "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
    kubelet = [e for e in events if e["source"].get("component") == "kubelet"]
    assert {e["reason"] for e in kubelet} == {"Pulling", "Pulled", "Created", "Started"}
    assert all(set(e) | TYPE_META == set(KUBELET_EVENTS[0]) for e in kubelet)
    assert "spec.initContainers{pull}" in {e["involvedObject"].get("fieldPath") for e in kubelet}
    about_job = {e["reason"] for e in events if e["involvedObject"]["kind"] == "Job"}
    assert about_job == {"SuccessfulCreate", "Completed"}


def test_a_sidecar_agent_edits_its_own_workspace(tmp_path: Any) -> None:
    """Sidecar mode: the workspace copy, the agent as a native sidecar on a remapped port."""
    serve = [sys.executable, "-m", "proctor.agents", "serve"]
    with running_cluster(namespaces=["evals"], entrypoints={"agents:test": serve}) as cluster:
        client = cluster.api_client()
        ev = evaluation("evals", predictions={"source": "agent"}, agentRef={"name": "editor"})
        agent = AgentUnderTest(name="editor", namespace="evals", spec=AgentUnderTestSpec(
            sidecar={"image": "agents:test", "port": 9009, "args": ["--kind", "editor"]}))
        job, _, _ = submit(client, ev, TEXTKIT, agent=agent)
        state = wait_state(cluster, client, "evals", job["metadata"]["name"], timeout=90)
        assert state.phase == Phase.SUCCEEDED and state.result["outcome"] == "resolved"
        steps = {s.name: s for s in state.steps}
        assert steps["agent"].sidecar and steps["agent"].state == "terminated"
        assert steps["workspace"].exit_code == 0
        core = kubernetes.client.CoreV1Api(client)
        served = core.read_namespaced_pod_log(state.pod, "evals", container="agent")
        assert "Serving the editor agent on 0.0.0.0:" in served


# --- Failures -------------------------------------------------------------------------------


def test_a_stuck_image_pull_is_pending_until_fixed(test_cluster: Cluster, k8s_namespace: str,
                                                   kube_client: Any) -> None:
    ns, core = k8s_namespace, kubernetes.client.CoreV1Api(kube_client)
    test_cluster.kubelet.simulation = Simulation({"solve": 0.1})
    item = item_of(DATEKIT)
    fault = test_cluster.kubelet.faults.add("image_pull", item=item.id)
    job, _, _ = submit(kube_client, evaluation(ns), DATEKIT)
    name = job["metadata"]["name"]
    state = wait_state(test_cluster, kube_client, ns, name,
                       lambda s: s.reason == "ImagePullBackOff", 20)
    assert (state.phase, state.error_kind, state.retryable) == (Phase.PENDING, ErrorKind.INFRA,
                                                                True)
    image = INSTANCES[DATEKIT].image
    assert state.message == f'Back-off pulling image "{image}"'
    _, pods, events = objects(kube_client, ns, name)
    check_pod_shape(pods[0])
    assert pods[0]["status"]["phase"] == "Pending"
    failed = [e for e in events if e["reason"] == "Failed" and e["type"] == "Warning"]
    assert failed[0]["involvedObject"]["fieldPath"] == "spec.initContainers{pull}"
    assert state.since == min(e["firstTimestamp"] for e in failed)
    assert any(e["reason"] == "BackOff" for e in events)
    assert all(set(e) | TYPE_META == set(KUBELET_EVENTS[0]) for e in failed)
    # Nothing to read from a step that never started, as in Kubernetes.
    with pytest.raises(ApiException) as refused:
        core.read_namespaced_pod_log(state.pod, ns, container="solve")
    assert refused.value.status == 400 and "is waiting to start" in refused.value.body
    test_cluster.kubelet.faults.remove(fault)  # the registry is back
    done = wait_state(test_cluster, kube_client, ns, name, timeout=20)
    assert done.phase == Phase.SUCCEEDED and done.result["outcome"] == "resolved"


def test_an_eviction_kills_the_running_step_and_fails_the_job(
        test_cluster: Cluster, k8s_namespace: str, kube_client: Any) -> None:
    ns = k8s_namespace
    item = item_of(TEXTKIT)
    test_cluster.kubelet.faults.add("evict", item=item.id, step="solve", after=0.2)
    job, _, _ = submit(kube_client, evaluation(ns), TEXTKIT)  # a real solve step, killed
    name = job["metadata"]["name"]
    state = wait_state(test_cluster, kube_client, ns, name, timeout=30)
    assert (state.phase, state.reason, state.error_kind, state.retryable) == (
        Phase.FAILED, "Evicted", ErrorKind.INFRA, True)
    assert state.message == 'Usage of EmptyDir volume "work" exceeds the limit "4Gi". '
    job_obj, pods, events = objects(kube_client, ns, name)
    pod = pods[0]
    check_pod_shape(pod)
    evicted = real("pod-evicted-emptydir-sizelimit_aiops-e2e-report_k8s1.26.yaml")[0]
    assert set(evicted["status"]) <= set(pod["status"])
    assert (pod["status"]["phase"], pod["status"]["reason"]) == ("Failed", "Evicted")
    solve = next(s for s in pod["status"]["initContainerStatuses"] if s["name"] == "solve")
    assert (solve["state"]["terminated"]["exitCode"],
            solve["state"]["terminated"]["reason"]) == (137, "Error")
    assert set(job_obj["status"]) == set(FAILED_JOB["status"])
    assert conditions(job_obj) == conditions(FAILED_JOB)
    assert {e["reason"] for e in events if e["type"] == "Warning"} >= {"Evicted",
                                                                       "BackoffLimitExceeded"}


def test_an_oom_kill_fails_the_first_attempt_only(test_cluster: Cluster, k8s_namespace: str,
                                                  kube_client: Any) -> None:
    ns = k8s_namespace
    test_cluster.kubelet.simulation = Simulation({"solve": 0.1, "test": 0.3})
    item = item_of(DATEKIT)
    test_cluster.kubelet.faults.add("oom", item=item.id, step="test", times=1)
    ev = evaluation(ns)
    first, _, _ = submit(kube_client, ev, DATEKIT)
    state = wait_state(test_cluster, kube_client, ns, first["metadata"]["name"])
    assert (state.phase, state.reason, state.retryable) == (Phase.FAILED, "OOMKilled", True)
    assert state.message == "step test exited 137: out of memory"
    _, pods, _ = objects(kube_client, ns, first["metadata"]["name"])
    check_pod_shape(pods[0])
    oom = real("podlist-oomkilled-job-pod_troubleshoot.json")[0]
    assert set(pods[0]["status"]) - {"initContainerStatuses", "hostIPs"} == set(oom["status"])
    assert [s["name"] for s in pods[0]["status"]["containerStatuses"]] == ["grade"]
    assert pods[0]["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == \
        "PodInitializing"
    retry, _, _ = submit(kube_client, ev, DATEKIT, attempt=1)
    assert retry["metadata"]["name"] == first["metadata"]["name"] + "-r1"
    again = wait_state(test_cluster, kube_client, ns, retry["metadata"]["name"])
    assert again.phase == Phase.SUCCEEDED and again.result["item"] == item.id


def test_a_job_past_its_deadline_fails_and_loses_its_pod(test_cluster: Cluster,
                                                        k8s_namespace: str,
                                                        kube_client: Any) -> None:
    ns, kubelet = k8s_namespace, test_cluster.kubelet
    kubelet.simulation = Simulation({"solve": 30})
    item = item_of(DATEKIT)
    kubelet.faults.add("deadline", item=item.id, step="solve", after=0.2)
    injected, _, _ = submit(kube_client, evaluation(ns), DATEKIT)
    # A real activeDeadlineSeconds too, on a faster clock: 60 s read as 0.6 s.
    kubelet.deadline_scale = 0.01
    try:
        timed, _, _ = submit(kube_client, evaluation(ns, timeouts={"podSeconds": 60}), TEXTKIT)
        for job in (injected, timed):
            name = job["metadata"]["name"]
            state = wait_state(test_cluster, kube_client, ns, name, timeout=20)
            assert (state.phase, state.reason, state.retryable) == (
                Phase.FAILED, "DeadlineExceeded", True)
            job_obj, _, _ = test_cluster.wait_for(
                lambda n=name: (o := objects(kube_client, ns, n)) and not o[1] and o, 10)
            assert conditions(job_obj) == conditions(DEADLINE_STATUS)
            assert job_obj["status"]["failed"] == 1 and "active" not in job_obj["status"]
    finally:
        kubelet.deadline_scale = 1.0


def test_failed_create_leaves_no_pod_until_the_cause_goes(test_cluster: Cluster,
                                                          k8s_namespace: str,
                                                          kube_client: Any) -> None:
    ns = k8s_namespace
    test_cluster.kubelet.simulation = Simulation({"solve": 0.1})
    item = item_of(TEXTKIT)
    fault = test_cluster.kubelet.faults.add("failed_create", item=item.id)
    job, _, _ = submit(kube_client, evaluation(ns), TEXTKIT)
    name = job["metadata"]["name"]
    state = wait_state(test_cluster, kube_client, ns, name,
                       lambda s: s.reason == "FailedCreate", 10)
    assert (state.phase, state.retryable, state.error_kind, state.pod) == (
        Phase.PENDING, False, None, None)
    assert 'is forbidden: violates PodSecurity "restricted:latest"' in state.message
    _, _, events = objects(kube_client, ns, name)
    event = next(e for e in events if e["reason"] == "FailedCreate")
    assert set(event) | TYPE_META == set(FAILED_CREATE) and event["source"] == {
        "component": "job-controller"}
    test_cluster.kubelet.faults.remove(fault)  # the namespace's policy was relaxed
    done = wait_state(test_cluster, kube_client, ns, name, timeout=20)
    assert done.phase == Phase.SUCCEEDED


def test_a_broken_step_is_a_sandbox_error_with_its_log_tail(test_cluster: Cluster,
                                                            k8s_namespace: str,
                                                            kube_client: Any) -> None:
    ns = k8s_namespace
    test_cluster.kubelet.simulation = Simulation({"solve": 0.1})
    item = item_of(DATEKIT)
    test_cluster.kubelet.faults.add("exit", item=item.id, step="test", exit_code=3,
                                    message="test step: no repository at /testbed\n")
    kubelet = test_cluster.kubelet
    kubelet.split_conditions, kubelet.condition_delay = True, 1.0  # FailureTarget, then Failed
    try:
        job, _, _ = submit(kube_client, evaluation(ns), DATEKIT)
        name = job["metadata"]["name"]
        wait_state(test_cluster, kube_client, ns, name, lambda s: s.phase == "failed")
        assert [c[0] for c in conditions(objects(kube_client, ns, name)[0])] == [
            "FailureTarget"]
        state = wait_state(test_cluster, kube_client, ns, name)
    finally:
        kubelet.split_conditions, kubelet.condition_delay = False, 0.05
    assert (state.phase, state.reason, state.error_kind, state.retryable) == (
        Phase.FAILED, "StepFailed", ErrorKind.SANDBOX, False)
    # terminationMessagePolicy FallbackToLogsOnError: the log's tail is the message.
    assert state.message == "step test exited 3: test step: no repository at /testbed"


def test_the_scheduler_honours_selectors_and_preferred_nodes(test_cluster: Cluster,
                                                            k8s_namespace: str,
                                                            kube_client: Any) -> None:
    ns = k8s_namespace
    test_cluster.kubelet.simulation = Simulation({"solve": 0.1})
    nowhere, _, _ = submit(kube_client, evaluation(ns, runner={"nodeSelector": {"disk": "ssd"}}),
                           DATEKIT)
    state = wait_state(test_cluster, kube_client, ns, nowhere["metadata"]["name"],
                       lambda s: s.reason == "Unschedulable", 10)
    assert state.phase == Phase.PENDING and state.message.startswith(
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.")
    preferred, _, _ = submit(kube_client, evaluation(ns), TEXTKIT, preferred_node="node-3")
    done = wait_state(test_cluster, kube_client, ns, preferred["metadata"]["name"])
    assert done.node == "node-3"


def test_the_jobs_count_active_while_the_machine_queues_their_pods() -> None:
    with running_cluster(namespaces=["evals"], max_pods=1,
                         simulation=Simulation({"solve": 0.4})) as cluster:
        client = cluster.api_client()
        ev = evaluation("evals")
        names = [submit(client, ev, i)[0]["metadata"]["name"] for i in list(INSTANCES)[:3]]
        batch = kubernetes.client.BatchV1Api(client)

        def active() -> int:
            return sum(raw(batch.read_namespaced_job, n, "evals")["status"].get("active", 0)
                       for n in names)
        cluster.wait_for(lambda: active() == 3, 5)  # all three at once, as the cluster sees it
        assert cluster.kubelet.running() <= 1
        for name in names:
            state = wait_state(cluster, client, "evals", name, timeout=20)
            assert state.result["outcome"] == "resolved"
        assert cluster.kubelet.running_peak == 1


def test_simulated_pods_wait_side_by_side_on_the_kubelets_thread() -> None:
    """Simulated pods are timers on the controllers' thread (no worker thread each), yet
    wait at the same time, and a killed one ends at once, mid-wait."""
    chosen = list(INSTANCES)[:4]  # the last one waits long enough to be killed mid-wait
    simulation = Simulation(lambda item: {"solve": 30.0 if item.instance_id == chosen[3]
                                          else 1.0})
    workers = {t for t in threading.enumerate() if t.name.startswith("kubelet-pod")}
    with running_cluster(namespaces=["evals"], max_pods=5, simulation=simulation) as cluster:
        client = cluster.api_client()
        ev = evaluation("evals")
        names = [submit(client, ev, i)[0]["metadata"]["name"] for i in chosen]
        cluster.wait_for(lambda: cluster.kubelet.running() == 4, 5)
        assert not [t for t in threading.enumerate()  # none of this kubelet's own
                    if t.name.startswith("kubelet-pod") and t not in workers]
        began = time.monotonic()
        for name in names[:3]:
            state = wait_state(cluster, client, "evals", name, timeout=20)
            assert state.result["outcome"] == "resolved"
        assert time.monotonic() - began < 2.5  # side by side: not three waits of 1 s in turn
        core = kubernetes.client.CoreV1Api(client)
        pod = core.list_namespaced_pod("evals", label_selector=f"job-name={names[3]}").items[0]
        killed = time.monotonic()
        core.delete_namespaced_pod(pod.metadata.name, "evals")
        cluster.wait_for(lambda: cluster.kubelet.running() == 0, 5)
        assert time.monotonic() - killed < 0.5


# --- The API --------------------------------------------------------------------------------


def test_api_semantics_the_operator_relies_on(test_cluster: Cluster, k8s_namespace: str,
                                              kube_client: Any) -> None:
    ns, core = k8s_namespace, kubernetes.client.CoreV1Api(kube_client)
    made = core.create_namespaced_config_map(ns, {"metadata": {"name": "a", "labels": {
        "app": "x", "tier": "1"}}, "data": {"k": "v"}}, _preload_content=False)
    assert made.status == 201
    first = json.loads(made.data)["metadata"]
    assert first["uid"] and first["creationTimestamp"].endswith("Z")
    with pytest.raises(ApiException) as taken:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    status = json.loads(taken.value.body)
    assert (taken.value.status, status["kind"], status["reason"], status["details"]) == (
        409, "Status", "AlreadyExists", {"name": "a", "kind": "configmaps"})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "b", "labels": {
        "app": "y"}}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})

    def names(**selectors: str) -> list[str]:
        return [i.metadata.name for i in core.list_namespaced_config_map(ns, **selectors).items]
    assert names(label_selector="app=x,tier=1") == ["a"]
    assert names(label_selector="app!=x") == ["b", "c"]
    assert names(label_selector="app in (x, y)") == ["a", "b"]
    assert names(label_selector="!app") == ["c"]
    assert names(field_selector="metadata.name=b") == ["b"]
    with pytest.raises(ApiException) as unsupported:
        names(field_selector="data.k=v")
    assert unsupported.value.status == 400

    # resourceVersion: changed by every write, not by a no-op; a stale one conflicts.
    patched = core.patch_namespaced_config_map("a", ns, {"data": {"k": "w"}})
    assert int(patched.metadata.resource_version) > int(first["resourceVersion"])
    same = core.patch_namespaced_config_map("a", ns, {"data": {"k": "w"}})
    assert same.metadata.resource_version == patched.metadata.resource_version
    stale = {"metadata": {"name": "a", "resourceVersion": first["resourceVersion"]}}
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_config_map("a", ns, stale)
    assert (conflict.value.status, json.loads(conflict.value.body)["reason"]) == (409,
                                                                                 "Conflict")
    replaced = core.replace_namespaced_config_map("a", ns, {"metadata": {
        "name": "a", "resourceVersion": patched.metadata.resource_version}, "data": {"n": "1"},
        "immutable": True})
    assert replaced.data == {"n": "1"}
    with pytest.raises(ApiException) as immutable:
        core.patch_namespaced_config_map("a", ns, {"data": {"n": "2"}})
    assert immutable.value.status == 422 and "field is immutable" in immutable.value.body
    with pytest.raises(ApiException) as no_namespace:
        core.create_namespaced_config_map("nowhere", {"metadata": {"name": "a"}})
    assert no_namespace.value.status == 404
    assert ns in [n.metadata.name for n in core.list_namespace().items]
    assert core.read_namespace(ns).status.phase == "Active"

    # events.k8s.io/v1 is another view of the same Events.
    regarding = {"kind": "ConfigMap", "namespace": ns, "name": "b", "apiVersion": "v1"}
    kubernetes.client.EventsV1Api(kube_client).create_namespaced_event(ns, {
        "metadata": {"generateName": "b."}, "regarding": regarding, "reason": "Tested",
        "note": "seen both ways", "type": "Normal", "action": "Test",
        "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "tester",
        "reportingInstance": "tester-1"})
    core_event = core.list_namespaced_event(
        ns, field_selector="involvedObject.name=b,reason=Tested").items[0]
    assert (core_event.message, core_event.involved_object.kind) == ("seen both ways",
                                                                     "ConfigMap")
    assert core_event.metadata.name.startswith("b.")

    core.delete_collection_namespaced_config_map(ns, label_selector="app=y")
    assert names() == ["a", "c"]


def test_a_namespace_goes_once_everything_in_it_has() -> None:
    store = Store(namespaces=["doomed"])
    register_proctor_crds(store)
    evaluations = store.resource("proctor.dev", "v1alpha1", "evaluations")
    namespaces = store.resource("", "v1", "namespaces")
    store.create(evaluations, "doomed", {"metadata": {"name": "e", "finalizers": ["x/y"]},
                                         "spec": {"agentRef": {"name": "a"}}})
    store.delete(namespaces, None, "doomed")
    assert store.get(namespaces, None, "doomed")["status"]["phase"] == "Terminating"
    with pytest.raises(ApiError) as refused:
        store.create(store.resource("", "v1", "configmaps"), "doomed", {"metadata": {
            "name": "late"}})
    assert refused.value.code == 403
    store.patch(evaluations, "doomed", "e", {"metadata": {"finalizers": None}})
    assert store.find(namespaces, None, "doomed") is None


def test_a_watch_from_a_forgotten_version_is_told_410() -> None:
    store = Store()
    store._log = collections.deque(maxlen=2)  # a tiny change log
    configmaps = store.resource("", "v1", "configmaps")
    first = store.create(configmaps, "default", {"metadata": {"name": "x"}})
    for n in range(3):
        store.patch(configmaps, "default", "x", {"data": {"n": str(n)}})
    with pytest.raises(ApiError) as expired:
        store.watch(configmaps, "default", None, None, None,
                    first["metadata"]["resourceVersion"], lambda _: None)
    assert (expired.value.code, expired.value.reason) == (410, "Expired")
    _, recent = store.watch(configmaps, "default", None, None, None,
                            str(store.resource_version - 1), lambda _: None)
    assert [(e["type"], e["object"]["data"]) for e in recent] == [("MODIFIED", {"n": "2"})]


def test_wake_ups_asked_for_under_the_lock_wait_until_it_is_let_go() -> None:
    store = Store()
    configmaps = store.resource("", "v1", "configmaps")
    woken: list[tuple[str, bool]] = []

    def listener(kind: str, *_: Any) -> None:
        # A listener runs under the lock: its wake-up must come after the write is done.
        store.lock.defer(lambda: woken.append((kind, store.lock._lock._is_owned())))

    store.listen(listener)
    with store.lock:  # a write nested in an outer hold: the wake-up waits for the outer one
        store.create(configmaps, "default", {"metadata": {"name": "x"}})
        assert woken == []
    assert woken == [("ADDED", False)]
    store.patch(configmaps, "default", "x", {"data": {"a": "b"}})
    assert woken[-1] == ("MODIFIED", False)
    store.lock.defer(lambda: woken.append(("outside", store.lock._lock._is_owned())))
    assert woken[-1] == ("outside", False)  # not held: at once


def test_custom_resources_get_the_apiservers_treatment(test_cluster: Cluster,
                                                       k8s_namespace: str,
                                                       kube_client: Any) -> None:
    ns = k8s_namespace
    api = kubernetes.client.CustomObjectsApi(kube_client)
    where = ("proctor.dev", "v1alpha1", ns, "evaluations")
    made = api.create_namespaced_custom_object(*where, {
        "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation", "metadata": {"name": "e"},
        "spec": {"agentRef": {"name": "a"}, "typo": 1}, "status": {"ignored": True}})
    assert made["metadata"]["generation"] == 1 and "status" not in made
    assert "typo" not in made["spec"]  # pruned
    assert made["spec"]["dataset"]["name"] == "SWE-bench/SWE-bench_Verified"  # defaulted
    status = api.patch_namespaced_custom_object_status(*where, "e", {
        "status": {"progress": "0/3"}, "spec": {"suspend": True}})
    assert status["status"] == {"progress": "0/3"} and status["spec"]["suspend"] is False
    assert status["metadata"]["generation"] == 1
    body = api.patch_namespaced_custom_object(*where, "e", {"spec": {"suspend": True},
                                                           "status": {"progress": "lost"}})
    assert body["metadata"]["generation"] == 2 and body["status"] == {"progress": "0/3"}
    with pytest.raises(ApiException) as immutable:  # a CEL transition rule
        api.patch_namespaced_custom_object(*where, "e", {"spec": {"repeats": 2}})
    assert immutable.value.status == 422 and "repeats cannot change" in immutable.value.body
    with pytest.raises(ApiException) as strategic:
        api.patch_namespaced_custom_object(*where, "e", {"spec": {"suspend": False}},
                                           _content_type="application/strategic-merge-patch"
                                                         "+json")
    assert strategic.value.status == 415

    # kopf's finalizer patch: a JSON patch led by a test of resourceVersion.
    def add_finalizer(rv: str) -> Any:
        return api.patch_namespaced_custom_object(*where, "e", [
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/metadata/finalizers", "value": ["test/keep"]}],
            _content_type="application/json-patch+json")
    with pytest.raises(ApiException) as stale:
        add_finalizer(made["metadata"]["resourceVersion"])
    assert stale.value.status == 422
    held = add_finalizer(body["metadata"]["resourceVersion"])
    assert held["metadata"]["finalizers"] == ["test/keep"]
    deleting = api.delete_namespaced_custom_object(*where, "e")
    assert deleting["metadata"]["deletionTimestamp"]
    assert api.get_namespaced_custom_object(*where, "e")["metadata"]["deletionTimestamp"]
    api.patch_namespaced_custom_object(*where, "e", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as gone:
        api.get_namespaced_custom_object(*where, "e")
    assert gone.value.status == 404


def test_watches_resume_and_follow_selectors(test_cluster: Cluster, k8s_namespace: str,
                                             kube_client: Any) -> None:
    ns, core = k8s_namespace, kubernetes.client.CoreV1Api(kube_client)
    listed = core.list_namespaced_config_map(ns, label_selector="watch=me")
    core.create_namespaced_config_map(ns, {"metadata": {"name": "w", "labels": {"watch": "me"}}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "other"}})
    core.patch_namespaced_config_map("w", ns, {"data": {"a": "1"}})
    core.patch_namespaced_config_map("w", ns, {"metadata": {"labels": {"watch": "no"}}})
    seen = []
    stream = kubernetes.watch.Watch().stream(
        core.list_namespaced_config_map, ns, label_selector="watch=me",
        resource_version=listed.metadata.resource_version, timeout_seconds=1)
    for event in stream:
        seen.append((event["type"], event["object"].metadata.name))
    # Leaving the selection reads as DELETED, as the apiserver sends it.
    assert seen == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


def test_deleting_an_owner_collects_what_it_owns(test_cluster: Cluster, k8s_namespace: str,
                                                 kube_client: Any) -> None:
    ns = k8s_namespace
    core, batch = kubernetes.client.CoreV1Api(kube_client), kubernetes.client.BatchV1Api(
        kube_client)
    api = kubernetes.client.CustomObjectsApi(kube_client)
    test_cluster.kubelet.simulation = Simulation({"solve": 60})
    where = ("proctor.dev", "v1alpha1", ns, "evaluations")
    owner = api.create_namespaced_custom_object(*where, {
        "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
        "metadata": {"name": "demo", "finalizers": ["test/keep"]},
        "spec": {"agentRef": {"name": "a"}}})
    ref = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation", "name": "demo",
           "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    ev = evaluation(ns)
    instance, item = INSTANCES[DATEKIT], item_of(DATEKIT)
    configmap = m.task_configmap(ev, instance, {})
    configmap["metadata"]["ownerReferences"] = [ref]
    core.create_namespaced_config_map(ns, configmap)
    job = m.desired_job(ev, None, item, instance, configmap, runner_version="0.1.0")
    job["metadata"]["ownerReferences"] = [ref]
    batch.create_namespaced_job(ns, job)
    kept, _, _ = submit(kube_client, ev, TEXTKIT)

    def pods() -> list[str]:
        return sorted(p.metadata.labels["job-name"] for p in core.list_namespaced_pod(ns).items)
    test_cluster.wait_for(lambda: len(pods()) == 2, 10)

    # A Job deleted without a propagationPolicy orphans its pod (batch/v1's default).
    batch.delete_namespaced_job(kept["metadata"]["name"], ns)
    assert pods() == sorted([job["metadata"]["name"], kept["metadata"]["name"]])
    orphan = core.list_namespaced_pod(ns, label_selector=f"job-name={kept['metadata']['name']}")
    assert orphan.items[0].metadata.owner_references is None
    core.delete_namespaced_pod(orphan.items[0].metadata.name, ns)
    test_cluster.wait_for(lambda: pods() == [job["metadata"]["name"]], 10)

    # The owner waits for its finalizer; then its Job, pod and ConfigMap go with it.
    api.delete_namespaced_custom_object(*where, "demo")
    assert pods() and batch.list_namespaced_job(ns).items
    api.patch_namespaced_custom_object(*where, "demo", {"metadata": {"finalizers": None}})
    owned = f"metadata.name={configmap['metadata']['name']}"
    test_cluster.wait_for(lambda: not pods() and not batch.list_namespaced_job(ns).items
                          and not core.list_namespaced_config_map(
                              ns, field_selector=owned).items, 10)
    assert len(core.list_namespaced_config_map(ns).items) == 1  # the other task's


def test_dependents_of_an_owner_already_gone_are_collected(test_cluster: Cluster,
                                                          k8s_namespace: str,
                                                          kube_client: Any) -> None:
    """Kubernetes' garbage collector deletes a dependent whose owners are all absent, also
    one created (or updated to name them) after they were deleted: the operator's race of
    a Job created for an Evaluation being deleted must leave nothing behind."""
    ns = k8s_namespace
    core, batch = kubernetes.client.CoreV1Api(kube_client), kubernetes.client.BatchV1Api(
        kube_client)
    test_cluster.kubelet.simulation = Simulation({"solve": 60})
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    live = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner-live"}})

    def ref(obj: Any) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "name": obj.metadata.name,
                "uid": obj.metadata.uid}
    gone = ref(owner)
    core.delete_namespaced_config_map("owner", ns)
    ev = evaluation(ns)
    instance = INSTANCES[DATEKIT]
    configmap = m.task_configmap(ev, instance, {})
    job = m.desired_job(ev, None, item_of(DATEKIT), instance, configmap,
                        runner_version="0.1.0")
    job["metadata"]["ownerReferences"] = [gone]
    made = batch.create_namespaced_job(ns, job)  # the create itself succeeds, as it does
    assert made.metadata.owner_references[0].uid == gone["uid"]
    core.create_namespaced_config_map(ns, {"metadata": {"name": "late", "ownerReferences": [
        gone, ref(live)]}})  # one owner still there: kept
    core.create_namespaced_config_map(ns, {"metadata": {"name": "adopted-late"}})
    core.patch_namespaced_config_map("adopted-late", ns, {"metadata": {
        "ownerReferences": [gone]}})

    def left() -> tuple[list[str], list[str], list[str]]:
        return (sorted(c.metadata.name for c in core.list_namespaced_config_map(ns).items),
                [j.metadata.name for j in batch.list_namespaced_job(ns).items],
                [p.metadata.name for p in core.list_namespaced_pod(ns).items])
    test_cluster.wait_for(lambda: left() == (["late", "owner-live"], [], []), 10,
                          message=f"left behind: {left()}")
    core.delete_namespaced_config_map("owner-live", ns)
    test_cluster.wait_for(lambda: left() == ([], [], []), 10, message=f"left: {left()}")


def test_the_request_counter_counts_each_request_served_by_method(
        test_cluster: Cluster, k8s_namespace: str, kube_client: Any) -> None:
    assert test_cluster.emulator is not None
    core = kubernetes.client.CoreV1Api(kube_client)
    before = collections.Counter(test_cluster.emulator.served)
    core.create_namespaced_config_map(k8s_namespace, {"metadata": {"name": "counted"}})
    core.read_namespaced_config_map("counted", k8s_namespace)
    with pytest.raises(ApiException):
        core.read_namespaced_config_map("absent", k8s_namespace)  # refused ones count too
    assert test_cluster.emulator.served - before == {"POST": 1, "GET": 2}


# --- kopf -----------------------------------------------------------------------------------

TINY_OPERATOR = '''
import kopf


@kopf.on.login()  # a registry of its own has none of kopf's default logins
def login(**kwargs):
    return kopf.login_via_client(**kwargs)


@kopf.on.create("proctor.dev", "v1alpha1", "evaluations")
def created(body, name, namespace, patch, logger, **_):
    logger.info(f"Saw Evaluation {namespace}/{name}")
    kopf.info(body, reason="Seen", message="seen by the tiny operator")
    patch.status["progress"] = "seen"
    patch.metadata.annotations["tiny.test/seen"] = "yes"


@kopf.on.delete("proctor.dev", "v1alpha1", "evaluations")
def deleted(name, logger, **_):
    logger.info(f"Let go of Evaluation {name}")
'''


def test_kopf_lists_watches_and_patches_custom_resources(test_cluster: Cluster,
                                                         k8s_namespace: str, kube_client: Any,
                                                         tmp_path: Any) -> None:
    ns = k8s_namespace
    operator = tmp_path / "tiny_operator.py"
    operator.write_text(TINY_OPERATOR)
    api = kubernetes.client.CustomObjectsApi(kube_client)
    where = ("proctor.dev", "v1alpha1", ns, "evaluations")
    args = ["run", "--standalone", "--namespace", ns, "--verbose", str(operator)]
    # Its handlers go to a registry of their own (kopf makes the given one the default:
    # the operator's tests after this one must not run them too).
    original = kopf.get_default_registry()
    with test_cluster.kubeconfig_env(), contextlib.ExitStack() as stack:
        stack.callback(kopf.set_default_registry, original)
        runner = stack.enter_context(KopfRunner(args, timeout=60,
                                                registry=kopf.OperatorRegistry()))
        api.create_namespaced_custom_object(*where, {
            "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
            "metadata": {"name": "seen"}, "spec": {"agentRef": {"name": "a"}}})
        body = test_cluster.wait_for(
            lambda: (o := api.get_namespaced_custom_object(*where, "seen")).get(
                "status", {}).get("progress") == "seen" and o, 30)
        assert body["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
        annotations = body["metadata"]["annotations"]
        assert annotations["tiny.test/seen"] == "yes"
        assert "kopf.zalando.org/last-handled-configuration" in annotations
        api.delete_namespaced_custom_object(*where, "seen")

        def gone() -> bool:
            try:
                api.get_namespaced_custom_object(*where, "seen")
            except ApiException as exc:
                return exc.status == 404
            return False
        test_cluster.wait_for(gone, 30)
        time.sleep(0.2)
    assert runner.exit_code == 0 and runner.exception is None
    assert kopf.get_default_registry() is original
    assert f"Saw Evaluation {ns}/seen" in runner.output
    assert "Let go of Evaluation seen" in runner.output
    assert "Traceback" not in runner.output
    calls = test_cluster.calls(contains=f"/namespaces/{ns}/evaluations")
    assert any("watch=true" in path for _, path, _ in calls)
    assert ("PATCH", f"/apis/proctor.dev/v1alpha1/namespaces/{ns}/evaluations/seen/status",
            200) in calls
    # Only our 404 probes fail, and kopf's optimistic JSON patches of the finalizers: each
    # tests the resourceVersion it read, so one that races our delete is refused (422) and
    # retried on the next cycle, as on a real API server.
    stale = ("PATCH", f"/apis/proctor.dev/v1alpha1/namespaces/{ns}/evaluations/seen", 422)
    assert [c for c in calls if c[2] >= 400 and c[0] != "GET" and c != stale] == []
    posted = test_cluster.calls("POST", f"/api/v1/namespaces/{ns}/events")
    assert posted and all(code == 201 for _, _, code in posted)  # kopf's own events
    seen = kubernetes.client.CoreV1Api(kube_client).list_namespaced_event(
        ns, field_selector="reason=Seen").items
    assert [(e.involved_object.name, e.source.component) for e in seen] == [("seen", "kopf")]
    namespaces = test_cluster.calls("GET", "/api/v1/namespaces?watch=true")
    assert namespaces and all(code == 200 for _, _, code in namespaces)  # kopf's observer


@pytest.mark.skipif(os.geteuid() != 0, reason="only a test cluster run as root can switch users")
def test_each_container_runs_as_its_run_as_user(test_cluster: Cluster, k8s_namespace: str,
                                                kube_client: Any) -> None:
    """A step run as another user cannot write over what a root step wrote, but can write in
    the emptyDir both share (the kubelet makes it world-writable)."""
    mount = [{"name": "work", "mountPath": "/shared"}]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "users"}, "spec": {
        "backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never", "volumes": [{"name": "work", "emptyDir": {}}],
            "securityContext": {"runAsUser": 1000, "runAsGroup": 3000},
            "initContainers": [{"name": "as-root", "image": "busybox", "volumeMounts": mount,
                                "securityContext": {"runAsUser": 0, "runAsGroup": 0},
                                "command": ["sh", "-c", "id -u > /shared/root && echo a > "
                                                        "/shared/owned"]}],
            "containers": [{"name": "as-user", "image": "busybox", "volumeMounts": mount,
                            "command": ["sh", "-c", "echo $(id -u):$(id -g); echo b > "
                                                    "/shared/mine && echo c >> /shared/owned"]}],
        }}}}
    batch = kubernetes.client.BatchV1Api(kube_client)
    core = kubernetes.client.CoreV1Api(kube_client)
    batch.create_namespaced_job(k8s_namespace, job)

    def ended() -> Any:
        status = batch.read_namespaced_job("users", k8s_namespace).status
        return status.failed or status.succeeded
    test_cluster.wait_for(ended, 60, message="the Job never ended")
    pod = core.list_namespaced_pod(k8s_namespace, label_selector="job-name=users").items[0]
    (terminated,) = [s.state.terminated for s in pod.status.container_statuses]
    log = core.read_namespaced_pod_log(pod.metadata.name, k8s_namespace, container="as-user")
    assert log.splitlines()[0] == "1000:3000"
    assert "owned: Permission denied" in log and "mine: Permission" not in log, log
    assert terminated.exit_code != 0
    assert batch.read_namespaced_job("users", k8s_namespace).status.failed == 1


def _http(cluster: Cluster, path: str, method: str = "GET", body: Any = None,
          accept: str = "application/json") -> tuple[int, Any]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        cluster.url + path, method=method, data=None if body is None else json.dumps(
            body).encode(), headers={"Accept": accept, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            text = answer.read().decode()
            status = answer.status
    except urllib.error.HTTPError as error:
        text, status = error.read().decode(), error.code
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    return status, lines[0] if len(lines) == 1 else lines


def test_discovery_and_openapi_are_what_kubectl_reads(test_cluster: Cluster) -> None:
    assert _http(test_cluster, "/api")[1]["versions"] == ["v1"]
    core = _http(test_cluster, "/api/v1")[1]
    assert core["groupVersion"] == "v1"
    by_name = {r["name"]: r for r in core["resources"]}
    assert by_name["configmaps"]["shortNames"] == ["cm"]
    assert "shortNames" not in by_name["pods/status"] and by_name["pods/log"]["verbs"] == [
        "get"]
    groups = {g["name"]: g for g in _http(test_cluster, "/apis")[1]["groups"]}
    assert groups["proctor.dev"]["preferredVersion"]["groupVersion"] == "proctor.dev/v1alpha1"
    proctor = _http(test_cluster, "/apis/proctor.dev/v1alpha1")[1]
    assert {"evaluations", "evaluations/status"} <= {r["name"] for r in proctor["resources"]}
    index = _http(test_cluster, "/openapi/v3")[1]["paths"]
    document = _http(test_cluster, index["apis/proctor.dev/v1alpha1"]["serverRelativeURL"])[1]
    schema = document["components"]["schemas"]["dev.proctor.v1alpha1.Evaluation"]
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": "proctor.dev", "version": "v1alpha1", "kind": "Evaluation"}]
    assert "dataset" in schema["properties"]["spec"]["properties"]
    patch = document["paths"][
        "/apis/proctor.dev/v1alpha1/namespaces/{namespace}/evaluations/{name}"]["patch"]
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]


def test_tables_watch_lists_and_strict_field_validation(test_cluster: Cluster,
                                                        k8s_namespace: str) -> None:
    path = f"/apis/proctor.dev/v1alpha1/namespaces/{k8s_namespace}/evaluations"
    body = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
            "metadata": {"name": "demo"}, "spec": {"predictions": {"source": "gold"},
                                                   "dataset": {"name": "proctor-demo",
                                                               "maxRow": 3}}}
    status, refused = _http(test_cluster, path + "?fieldValidation=Strict", "POST", body)
    assert (status, refused["reason"]) == (400, "BadRequest")
    assert 'unknown field "spec.dataset.maxRow"' in refused["message"]
    status, created = _http(test_cluster, path + "?fieldValidation=Ignore", "POST", body)
    assert status == 201 and "maxRow" not in created["spec"]["dataset"]  # pruned
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                 "dta": {"a": "b"}}
    status, refused = _http(test_cluster, f"/api/v1/namespaces/{k8s_namespace}/configmaps"
                                          "?fieldValidation=Strict", "POST", configmap)
    assert status == 400 and refused["message"].endswith('unknown field "dta"')

    table = _http(test_cluster, path, accept="application/json;as=Table;v=v1;g=meta.k8s.io,"
                                             "application/json")[1]
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names[0] == "Name" and "Dataset" in names and names[-1] == "Age"
    (row,) = table["rows"]
    assert row["cells"][0] == "demo" and row["cells"][names.index("Dataset")] == "proctor-demo"
    assert row["object"]["kind"] == "PartialObjectMetadata"

    watch = "&".join(["?watch=true", "sendInitialEvents=true", "allowWatchBookmarks=true",
                      "resourceVersionMatch=NotOlderThan", "timeoutSeconds=1"])
    events = _http(test_cluster, path + watch)[1]
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"] == {
        "k8s.io/initial-events-end": "true"}


def test_pods_and_jobs_print_as_kubectl_shows_real_ones() -> None:
    """The pod and Job printers (READY, STATUS; STATUS, COMPLETIONS) on real objects."""
    from cluster import tables
    from cluster.resources import BUILTINS

    by_plural = {rt.plural: rt for rt in BUILTINS if not rt.group or rt.group == "batch"}
    shown = {p["metadata"]["name"]: tables.table(by_plural["pods"], [p])["rows"][0]["cells"][1:3]
             for p in REAL_PODS}
    assert shown == {"gpu-job-xkbmx": ["1/1", "Running"],
                     "node-debugger-10.0.12.244-2x8vm": ["0/1", "Completed"],
                     "oom-kill-job3-gbb89": ["0/1", "OOMKilled"],
                     "logfill-6ccfcf9c9c-mgf77": ["0/1", "Error"],  # evicted: its step's end
                     "imagepull-fail-victim": ["0/1", "ImagePullBackOff"],
                     "no-image-deployment-849c4c4958-rxqmt": ["0/1", "ErrImagePull"],
                     "hello-run-rj8z2-pod": ["0/1", "Completed"]}
    jobs = tables.table(by_plural["jobs"], [COMPLETE_JOB, FAILED_JOB])
    assert [c["name"] for c in jobs["columnDefinitions"]] == [
        "Name", "Status", "Completions", "Duration", "Age"]
    assert jobs["rows"][0]["cells"][1:4] == ["Complete", "6/6", "84s"]
    assert jobs["rows"][1]["cells"][1:3] == ["Failed", "0/6"]
