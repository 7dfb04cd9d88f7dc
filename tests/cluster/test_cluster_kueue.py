"""Kueue admitting the work-item Jobs by quota, on a real Kubernetes (scripts/cluster.sh):
the demo's 10 items in a LocalQueue whose ClusterQueue has CPU for exactly 2 of their pods.
Proctor creates every Job suspended (maxConcurrentRows 10), Kueue never runs more than 2
at once, the status shows the others queued, and the Evaluation ends Succeeded with 10 done.
Then two preemptions: an item's Job evicted by Kueue after its agent answered runs again
with the kept patch, and one evicted while the agent works follows the agent's task by its
id; either way the agent (on this host, counting its requests) is asked once. Last, the
agent-slots AdmissionCheck (the chart's jobs.agentSlotsCheck): a queue that lists it holds
more Jobs than the agent has slots, and never more than its one slot's worth asks it.

It runs where the other real-cluster tests run (tests/support/real_cluster.py: skipped,
saying why, where no cluster can start; a failure then with PROCTOR_REQUIRE_CLUSTER=1).
Kueue v0.17.0's controller is installed first by `scripts/kueue.sh up` (in kueue-system; it
waits for it to serve), given the cluster's kubeconfig in KUBECONFIG. Like
tests/cluster/test_cluster_admission.py it installs the chart as its own release
(`part-kueue`, in part-kueue-system) serving only its own namespace, after applying crds/;
the runner image is built and imported under its own tag (PROCTOR_TEST_RUNNER_IMAGE, default
proctor-runner:cluster-kueue).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from proctor.agents.answers import Answer, TaskRequest
from proctor.agents.kinds import Tasks, solver_for
from proctor.agents.server import SolverExecutor, agent_card, build_app, start_in_thread
from proctor.datasets import demo
from proctor.k8s.features import kueue
from support.cluster_admin import (
    Cluster,
    build_and_import,
    install_release,
    namespace,
    sh,
    wait,
)
from support.real_cluster_fixtures import RealCluster

pytest_plugins = ["support.real_cluster_fixtures"]
pytestmark = [pytest.mark.cluster, pytest.mark.slow]
RELEASE, SYSTEM, NS = "part-kueue", "part-kueue-system", "part-kueue-demo"
IMAGE = os.environ.get("PROCTOR_TEST_RUNNER_IMAGE", "proctor-runner:cluster-kueue")
KUEUE = "kueue.x-k8s.io/v1beta2"
FLAVOR, CLUSTER_QUEUE, QUEUE = "part-kueue-flavor", "part-kueue-cq", "proctor-queue"
RESOURCES = {"requests": {"cpu": "450m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}}
"""The runner and test steps' resources: each pod asks a little more (its small steps)."""
FITS = 2
"""How many item Jobs the ClusterQueue's CPU quota admits at once."""


@pytest.fixture(scope="module")
def cluster(cluster_kubeconfig: Path) -> Iterator[Cluster]:
    """The session's cluster with Kueue, this release installed, its images imported."""
    c = Cluster(str(cluster_kubeconfig))
    sh("bash", "scripts/kueue.sh", "up", timeout=900, KUBECONFIG=c.kubeconfig)
    build_and_import(IMAGE)
    c.apply(namespace(NS, **{"pod-security.kubernetes.io/enforce": "baseline"}))
    install_release(c, RELEASE, SYSTEM, [NS], IMAGE, "jobs.agentSlotsCheck=true")
    c.kubectl("delete", "evaluations", "--all", "-n", NS, "--cascade=foreground", "--wait=true")
    yield c
    # The ClusterQueue that names the agent-slots check goes first: Kueue keeps an
    # AdmissionCheck (this release's) from being deleted while a ClusterQueue names it.
    c.kubectl("delete", "clusterqueue", SLOTS_QUEUE, "--ignore-not-found", check=False)
    # Kueue's Job webhook sees every Job of the cluster: it goes with this module, and so
    # does this release (its operator would go on probing an agent whose namespace went).
    sh(c.helm_bin, "uninstall", RELEASE, "--namespace", SYSTEM, "--kubeconfig", c.kubeconfig,
       "--wait", check=False)
    c.kubectl("delete", "namespace", NS, "--wait=true", check=False)
    for kind, name in (("clusterqueue", CLUSTER_QUEUE), ("resourceflavor", FLAVOR)):
        c.kubectl("delete", kind, name, "--ignore-not-found", check=False)
    sh("bash", "scripts/kueue.sh", "down", timeout=300, KUBECONFIG=c.kubeconfig)


def millicores(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def pod_cpu_request(pod: dict[str, Any]) -> int:
    """A pod's CPU request in millicores as the scheduler and Kueue count it: the larger of
    its main containers with every sidecar, and each init step with the sidecars started
    before it (Kubernetes' PodRequests)."""
    def cpu(container: dict[str, Any]) -> int:
        return millicores(((container.get("resources") or {}).get("requests") or {}).get(
            "cpu", "0"))
    sidecars = init = 0
    for container in pod.get("initContainers") or []:
        if container.get("restartPolicy") == "Always":
            sidecars += cpu(container)
            init = max(init, sidecars)
        else:
            init = max(init, sidecars + cpu(container))
    return max(sum(cpu(c) for c in pod["containers"]) + sidecars, init)


ROWS = 6
"""Items of the queued Evaluation: three times what the quota admits at once, all of them
asked for at once (maxConcurrentRows), so that Kueue, not the operator, holds them back."""


def evaluation() -> dict[str, Any]:
    return {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
            "metadata": {"name": "queued", "namespace": NS},
            "spec": {"agentRef": {"name": "queued-agent"},
                     "dataset": {"name": "proctor-demo", "maxRows": ROWS}, "queueName": QUEUE,
                     "maxConcurrentRows": ROWS, "runner": {"resources": RESOURCES}}}


def one_job_request(tmp_path: Path) -> int:
    """The CPU request of one item's pod, from the Job the operator would create."""
    aut = {"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
           "metadata": {"name": "queued-agent", "namespace": NS},
           "spec": {"endpoint": f"http://demo-agent.{NS}.svc:9009/"}}
    manifest = tmp_path / "queued.yaml"
    manifest.write_text(yaml.safe_dump_all([evaluation(), aut]))
    rendered = sh(str(Path(sys.executable).parent / "proctor"), "render", "-f",
                  str(manifest), "--items", "1", "--runner-image", IMAGE).stdout
    (job,) = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] == "Job"]
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == QUEUE
    return pod_cpu_request(job["spec"]["template"]["spec"])


SLOTS_QUEUE = "part-kueue-slots-cq"
"""A ClusterQueue that lists the agent-slots check, and its LocalQueue's name."""


def queues(per_job: int) -> list[dict[str, Any]]:
    """A flavour, a ClusterQueue with CPU for FITS pods and a half (so FITS + 1 never fit),
    and the namespace's LocalQueue. Memory and ephemeral storage are plentiful: Kueue
    admits only what every resource the pod asks for is covered for."""
    plenty = {"memory": "256Gi", "ephemeral-storage": "4Ti"}
    resources = [{"name": "cpu", "nominalQuota": f"{per_job * FITS + per_job // 2}m"},
                 *({"name": name, "nominalQuota": quota} for name, quota in plenty.items())]
    return [
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
        {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": CLUSTER_QUEUE},
         "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
                  "resourceGroups": [{"coveredResources": ["cpu", *plenty],
                                      "flavors": [{"name": FLAVOR,
                                                   "resources": resources}]}]}},
        {"apiVersion": KUEUE, "kind": "LocalQueue",
         "metadata": {"name": QUEUE, "namespace": NS},
         "spec": {"clusterQueue": CLUSTER_QUEUE}},
    ]


def admitted(job: dict[str, Any]) -> bool:
    """Unsuspended and not finished: Kueue holds quota for it."""
    done = {c["type"] for c in (job.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"} & {"Complete", "Failed"}
    return not job["spec"].get("suspend") and not done


def test_kueue_admits_no_more_jobs_than_its_quota_and_the_status_shows_the_queue(
        cluster: Cluster, tmp_path: Path) -> None:
    per_job = one_job_request(tmp_path)
    cluster.apply(*queues(per_job))
    manifest = sh("bash", "scripts/demo-agent.sh", NS, IMAGE, "9009", "Never", "10",
                  "queued-agent").stdout
    cluster.apply(*yaml.safe_load_all(manifest))
    cluster.rollout(NS, "demo-agent")
    cluster.apply(evaluation())
    most_admitted = most_queued = 0
    workloads_seen: set[str] = set()

    def sample() -> bool:
        nonlocal most_admitted, most_queued
        jobs = cluster.get("jobs", "-n", NS, "-l", "proctor.dev/evaluation=queued")["items"]
        most_admitted = max(most_admitted, sum(admitted(j) for j in jobs))
        assert most_admitted <= FITS, [(j["metadata"]["name"], j["spec"].get("suspend"))
                                       for j in jobs]
        status = cluster.get("evaluation", "queued", "-n", NS).get("status") or {}
        most_queued = max(most_queued, (status.get("items") or {}).get("queued", 0))
        if jobs and not workloads_seen:  # each Job's Workload: found by the Job's uid
            uid = jobs[0]["metadata"]["uid"]
            found = cluster.get("workloads", "-n", NS, "-l", f"kueue.x-k8s.io/job-uid={uid}")
            workloads_seen.update(w["metadata"]["name"] for w in found["items"])
        return cluster.condition(NS, "queued", "Succeeded").get("status") == "True"
    wait("queued Succeeded", sample, 1200, 0.5)
    print(f"one item's pod asks {per_job}m CPU; most Jobs admitted at once: {most_admitted}; "
          f"most items queued in the status: {most_queued}")
    assert most_admitted == FITS  # the quota was used, and never exceeded
    assert most_queued > 0
    assert len(workloads_seen) == 1
    status = cluster.get("evaluation", "queued", "-n", NS)["status"]
    assert status["items"]["done"] == status["items"]["total"] == ROWS
    assert status["items"]["queued"] == 0 and status["errorKinds"] == {}


SLOW_IMPORT_S = 40
"""How long the slow patch's module takes to import: the test step's window for the
preemption (the operator keeps the patch when the solve step ends, before the tests)."""


def slow_gold_patch(row: dict[str, Any], tmp: Path) -> str:
    """The row's gold patch, and a module of it that sleeps when imported: a correct answer
    whose test step takes long enough to be preempted in the middle of it. Made with git."""
    repo = tmp / "repo"
    bundle = demo.bundle_path(row["repo"])
    assert bundle is not None
    def git(*args: str, stdin: str | None = None) -> str:
        return subprocess.run(["git", "-c", "advice.detachedHead=false", *args], cwd=repo,
                              input=stdin, check=True, capture_output=True, text=True).stdout
    subprocess.run(["git", "clone", "-q", str(bundle), str(repo)], check=True)
    git("checkout", "-q", row["base_commit"])
    git("apply", "-", stdin=row["patch"])
    module = repo / git("diff", "--name-only").split()[0]
    module.write_text(f"import time\ntime.sleep({SLOW_IMPORT_S})\n{module.read_text()}")
    return git("diff")


class SlowAgent:
    """An agent on this host that answers the demo tasks with `slow_gold_patch` (or, with
    ``think_s``, with the gold patch after thinking that long), and keeps the instance id of
    every task it is sent."""

    def __init__(self, host: str, tmp: Path, think_s: float = 0):
        tasks = Tasks.load()
        gold = solver_for("oracle", tasks)
        self.asked: list[str] = []

        def slow(request: TaskRequest) -> Answer:
            row = tasks.find(request)
            assert row is not None
            self.asked.append(str(row["instance_id"]))
            if think_s:
                time.sleep(think_s)
                return gold(request)
            patch = slow_gold_patch(dict(row), tmp / f"answer-{len(self.asked)}")
            return Answer(patch=patch, text=gold(request).text)
        self.server = start_in_thread(lambda url: build_app(SolverExecutor(slow),
                                                            agent_card("oracle", url)), host)


def stop_policy(c: Cluster, policy: str) -> None:
    """Stop the ClusterQueue and evict what it admitted (HoldAndDrain), or let it run again
    (None): the eviction is how Kueue preempts a Job."""
    c.kubectl("patch", "clusterqueue", CLUSTER_QUEUE, "--type=merge", "-p",
              json.dumps({"spec": {"stopPolicy": policy}}))


@contextlib.contextmanager
def one_item_for(c: Cluster, agent: SlowAgent, agent_name: str, name: str) -> Iterator[None]:
    """An AgentUnderTest `agent_name` for `agent` and an Evaluation `name` of one demo item
    asking it; the Evaluation deleted and the agent stopped afterwards."""
    try:
        c.apply({"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
                 "metadata": {"name": agent_name, "namespace": NS},
                 "spec": {"endpoint": agent.server.url, "requestTimeoutSeconds": 300}})
        spec = evaluation()["spec"] | {"agentRef": {"name": agent_name},
                                       "dataset": {"name": "proctor-demo", "maxRows": 1}}
        c.apply({"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                 "metadata": {"name": name, "namespace": NS}, "spec": spec})
        yield
    finally:
        c.kubectl("delete", "evaluation", name, "-n", NS, "--wait=true", check=False)
        agent.server.stop()


def evict_and_finish(c: Cluster, name: str) -> list[dict[str, Any]]:
    """Evict the Evaluation's admitted Job (its ClusterQueue stopped, then started again once
    the operator says Preempted); the Preempted Events, once the Evaluation has Succeeded."""
    stop_policy(c, "HoldAndDrain")
    try:
        preempted = wait("a Preempted event", lambda: [
            e for e in c.get("events", "-n", NS)["items"]
            if e["reason"] == "Preempted" and e["involvedObject"].get("name") == name],
            300, 0.5)
    finally:
        stop_policy(c, "None")
    wait(f"{name} Succeeded", lambda: c.condition(NS, name, "Succeeded").get(
        "status") == "True", 600, 1)
    return list(preempted)


def test_a_job_preempted_after_its_agent_answered_runs_again_with_the_kept_patch(
        cluster: Cluster, real_cluster: RealCluster, tmp_path: Path) -> None:
    per_job = one_job_request(tmp_path)
    cluster.apply(*queues(per_job))
    agent = SlowAgent(real_cluster.node_ip, tmp_path)
    with one_item_for(cluster, agent, "slow-agent", "preempted"):
        kept = "proctor.dev/evaluation=preempted,app.kubernetes.io/component=kept-patch"
        wait("the agent's patch kept", lambda: cluster.get(
            "configmaps", "-n", NS, "-l", kept)["items"], 600, 0.5)
        jobs = cluster.get("jobs", "-n", NS, "-l", "proctor.dev/evaluation=preempted")["items"]
        assert [admitted(j) for j in jobs] == [True]  # in its test step, now
        preempted = evict_and_finish(cluster, "preempted")
        results = cluster.get("configmaps", "-n", NS, "-l", "proctor.dev/evaluation=preempted,"
                              "app.kubernetes.io/component=result")["items"]
        print(f"Preempted: {preempted[0]['message']}; agent asked {agent.asked}")
        assert "reusing the agent's patch" in preempted[0]["message"]
        assert agent.asked == ["proctor-demo__datekit-1"]  # once, not again after
        status = cluster.get("evaluation", "preempted", "-n", NS)["status"]
        assert status["items"]["done"] == 1 and status["errorKinds"] == {}, status
        assert len(results) == 1


def slots_queues(per_job: int) -> list[dict[str, Any]]:
    """`queues`' ClusterQueue again under SLOTS_QUEUE, listing the agent-slots check, and a
    LocalQueue of the same name: quota for FITS pods, whatever the agent's slots."""
    flavor, cluster_queue, _ = queues(per_job)
    cluster_queue = {**cluster_queue, "metadata": {"name": SLOTS_QUEUE},
                     "spec": {**cluster_queue["spec"], "admissionChecksStrategy": {
                         "admissionChecks": [{"name": kueue.CHECK}]}}}
    return [flavor, cluster_queue,
            {"apiVersion": KUEUE, "kind": "LocalQueue",
             "metadata": {"name": SLOTS_QUEUE, "namespace": NS},
             "spec": {"clusterQueue": SLOTS_QUEUE}}]


def asking(pod: dict[str, Any]) -> bool:
    """Whether an item's pod may be asking the agent: admitted (it exists) and its solve
    step not ended."""
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    solve = next((s for s in (pod.get("status") or {}).get("initContainerStatuses") or []
                  if s["name"] == "solve"), None)
    return solve is None or "terminated" not in solve.get("state", {})


def test_with_the_agent_slots_check_a_job_takes_its_agents_slot_at_admission(
        cluster: Cluster, tmp_path: Path) -> None:
    per_job = one_job_request(tmp_path)
    cluster.apply(*slots_queues(per_job))
    check = wait("the check Active", lambda: [
        c for c in (cluster.get("admissioncheck", kueue.CHECK).get("status") or {}).get(
            "conditions") or [] if c["type"] == "Active" and c["status"] == "True"], 120, 1)
    assert check
    manifest = sh("bash", "scripts/demo-agent.sh", NS, IMAGE, "9009", "Never", "1",
                  "one-slot-agent").stdout
    cluster.apply(*yaml.safe_load_all(manifest))
    cluster.rollout(NS, "demo-agent")
    spec = evaluation()["spec"] | {"agentRef": {"name": "one-slot-agent"},
                                   "queueName": SLOTS_QUEUE, "maxConcurrentRows": 6,
                                   "dataset": {"name": "proctor-demo", "maxRows": 6}}
    cluster.apply({"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                   "metadata": {"name": "slotted", "namespace": NS}, "spec": spec})
    most_asking = most_jobs = most_ready = 0

    def sample() -> bool:
        nonlocal most_asking, most_jobs, most_ready
        selector = "proctor.dev/evaluation=slotted"
        jobs = cluster.get("jobs", "-n", NS, "-l", selector)["items"]
        live = [j for j in jobs if admitted(j) or j["spec"].get("suspend")]
        most_jobs = max(most_jobs, len(live))
        pods = cluster.get("pods", "-n", NS, "-l", selector)["items"]
        most_asking = max(most_asking, sum(asking(p) for p in pods))
        assert most_asking <= 1, [(p["metadata"]["name"], p.get("status")) for p in pods]
        loads = cluster.get("workloads", "-n", NS)["items"]
        most_ready = max(most_ready, sum(
            c["state"] == "Ready" for w in loads
            for c in (w.get("status") or {}).get("admissionChecks") or []
            if c["name"] == kueue.CHECK))
        return cluster.condition(NS, "slotted", "Succeeded").get("status") == "True"
    try:
        wait("slotted Succeeded", sample, 900, 0.5)
    finally:
        print(f"Jobs at once: {most_jobs}; pods asking the agent at once: {most_asking}; "
              f"Workloads the operator marked Ready: {most_ready}")
    assert most_jobs > 1  # the queue held more Jobs than the agent's one slot
    assert most_asking == 1 and most_ready >= 1
    status = cluster.get("evaluation", "slotted", "-n", NS)["status"]
    assert status["items"]["done"] == 6 and status["errorKinds"] == {}, status


def test_a_job_preempted_while_the_agent_works_follows_its_task(
        cluster: Cluster, real_cluster: RealCluster, tmp_path: Path) -> None:
    cluster.apply(*queues(one_job_request(tmp_path)))
    agent = SlowAgent(real_cluster.node_ip, tmp_path, think_s=45)
    with one_item_for(cluster, agent, "thinking-agent", "mid-solve"):
        # The operator says it noted the agent's task (read from the waiting solve step's log).
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 5))
        wait("the agent's task noted", lambda: "Noted the agent's task item=proctor-demo__"
             "datekit-1" in cluster.kubectl("logs", "-n", SYSTEM, f"deployment/{RELEASE}-proctor",
                                            f"--since-time={since}").stdout, 300, 1)
        assert agent.asked == ["proctor-demo__datekit-1"]  # and it has not answered yet
        preempted = evict_and_finish(cluster, "mid-solve")
        print(f"Preempted: {preempted[0]['message']}; agent asked {agent.asked}")
        assert "following the agent's task" in preempted[0]["message"]
        assert agent.asked == ["proctor-demo__datekit-1"]  # once: the task was followed
        status = cluster.get("evaluation", "mid-solve", "-n", NS)["status"]
        assert status["items"]["done"] == 1 and status["errorKinds"] == {}, status
        assert status["outcomes"].get("resolved") == 1, status
