"""The pre-pull of an Evaluation's task images (pure): its Jobs, what their pods say, where
it stands (no item starts before every pull ended), and a pod that met a full node disk
(an infra failure retried on another node). Objects are the real ones of
shared/data/k8s-status, changed only where the case needs (the kubelet's own words for
disk pressure, as its eviction manager writes them)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from proctor import datasets
from proctor.core.model import ErrorKind, WorkItem
from proctor.k8s.children import manifests as m
from proctor.k8s.children.podstatus import DISK_PRESSURE, Phase, item_state
from proctor.k8s.evaluation import reconcile
from proctor.k8s.evaluation.reconcile import ItemView, Settings, decide
from proctor.k8s.features import prepull
from proctor.k8s.render import render
from support.job_manifests import evaluation, validate
from support.k8s_status import COMPLETE_131, EVICTED_POD, FAILED_131, real, real_items
from support.pod_security import restricted_departures
from support.work_item_pods import ACTIVE, BEFORE_SOLVE, ITEM, TASK, done, our_job, our_pod

NOW = datetime(2026, 5, 1, 10, 10, tzinfo=UTC)


@pytest.fixture(scope="module")
def demo() -> datasets.Selection:
    return datasets.load("proctor-demo", max_rows=-1)


def items_of(selection: datasets.Selection, repeats: int = 1) -> list[WorkItem]:
    return [WorkItem(id=f"{i:032x}", instance_id=inst.instance_id, repeat=r)
            for i, (inst, r) in enumerate((inst, r) for inst in selection.instances
                                          for r in range(repeats))]


# --- The pull Jobs ---------------------------------------------------------------------------


def test_one_image_per_task_in_plan_order_from_the_spec_registry(demo) -> None:
    images = prepull.images_of(evaluation(), items_of(demo, repeats=3), demo.by_id)
    # The demo's tasks of one repository version share an image: each is pulled once.
    assert images == list(dict.fromkeys(inst.image for inst in demo.instances))
    assert len(images) < len(demo.instances)
    mirrored = prepull.images_of(evaluation(runner={"instanceImageRegistry": "mirror:5000"}),
                                 items_of(demo), demo.by_id)
    assert all(image.startswith("mirror:5000/") for image in mirrored)


def test_a_pull_job_runs_true_in_its_image_and_meets_restricted(demo) -> None:
    ev = evaluation(images={"prePull": True},
                    runner={"nodeSelector": {"pool": "evals"},
                            "tolerations": [{"key": "evals", "operator": "Exists"}],
                            "imagePullSecrets": [{"name": "hub"}],
                            "runtimeClassName": "gvisor"})
    image = demo.instances[0].image
    job = prepull.pull_job(ev, image)
    validate(job)
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert (container["image"], container["command"]) == (image, ["true"])
    assert restricted_departures(pod, container) == set()
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    # The nodes an item's pod may go to: the image lands where its items can run.
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "amd64", "pool": "evals"}
    assert pod["tolerations"] == [{"key": "evals", "operator": "Exists"}]
    assert pod["imagePullSecrets"] == [{"name": "hub"}]
    assert pod["runtimeClassName"] == "gvisor"
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] > 0
    # Found again as a pull Job of that image, never as an item's attempt.
    assert prepull.is_pull_job(job) and prepull.image_of(job) == image
    assert reconcile.item_of(job) == "" and not prepull.is_pull_job(our_job())


def test_pull_jobs_are_named_per_image_and_evaluation(demo) -> None:
    images = list(dict.fromkeys(inst.image for inst in demo.instances))
    long = evaluation(name="an-evaluation-with-a-name-far-longer-than-any-job-name-may-be")
    names = {prepull.pull_job_name(ev, image) for ev in (evaluation(), long)
             for image in images}
    assert len(names) == 2 * len(images)
    assert all(len(name) <= 63 for name in names)
    assert prepull.pull_job_name(evaluation(), images[0]) == prepull.pull_job_name(
        evaluation(), images[0])  # a restart finds the Job it made


def test_render_prints_the_pull_jobs_first_when_the_pre_pull_is_on(demo) -> None:
    items = items_of(demo)
    ev = evaluation(predictions={"source": "gold"}, images={"prePull": True})
    objects = render(ev, None, demo, items, 4)
    pulls = [o for o in objects if prepull.is_pull_job(o)]
    assert [prepull.image_of(o) for o in pulls] == prepull.images_of(ev, items[:4], demo.by_id)
    assert objects[:len(pulls)] == pulls
    off = render(evaluation(predictions={"source": "gold"}), None, demo, items, 4)
    assert not any(prepull.is_pull_job(o) for o in off) and off == objects[len(pulls):]


# --- What a pull Job says --------------------------------------------------------------------


def pull_job_with(**status: Any) -> dict[str, Any]:
    job = prepull.pull_job(evaluation(), TASK.image)
    job["metadata"] |= {"uid": "job-uid", "creationTimestamp": "2026-05-01T10:00:00Z"}
    job["status"] = status or dict(ACTIVE)
    return job


def pulling_pod(job: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    """The pull Job's pod with its container waiting (the real ErrImagePull pod's shape)."""
    pod = copy.deepcopy(real_items("podlist-errimagepull-pending_troubleshoot.json")[0])
    pod["metadata"] |= {"name": f"{job['metadata']['name']}-abcde",
                        "creationTimestamp": "2026-05-01T10:00:01Z"}
    pod["spec"] = copy.deepcopy(job["spec"]["template"]["spec"]) | {"nodeName": "node-a"}
    pod["status"]["startTime"] = "2026-05-01T10:00:02Z"
    pod["status"]["containerStatuses"] = [{"name": "pull", "image": TASK.image, "imageID": "",
                                           "ready": False, "restartCount": 0,
                                           "state": {"waiting": {"reason": reason,
                                                                 "message": message}}}]
    return pod


def test_a_completed_pull_job_pulled_its_image_even_with_its_pod_gone() -> None:
    for job in (COMPLETE_131, real_items("joblist-complete-and-backofflimitexceeded_"
                                         "troubleshoot.json")[0]):
        assert prepull.pull_of(job, [], [], NOW, 600).outcome == "pulled"


def test_a_pull_counts_as_ended_once_its_job_says_so() -> None:
    # Not when its pod has: Jobs not yet marked would let more than N be unfinished at once.
    job = pull_job_with()
    pod = pulling_pod(job, "ContainerCreating", "")
    pod["status"]["phase"] = "Succeeded"
    pod["status"]["containerStatuses"][0]["state"] = {"terminated": done()["terminated"]}
    assert prepull.pull_of(job, [pod], [], NOW, 600).outcome == "pulling"
    job["status"]["conditions"] = [{"type": "SuccessCriteriaMet", "status": "True"}]
    assert prepull.pull_of(job, [pod], [], NOW, 600) == prepull.Pull("pulled", "node-a")


def test_a_failed_pull_job_failed() -> None:
    deadline = real("job-failed-deadlineexceeded_STATUS-ONLY-PARTIAL_blog2025.yaml")
    pull = prepull.pull_of(deadline, [], [], NOW, 600)
    assert (pull.outcome, pull.reason) == ("failed", "DeadlineExceeded")
    assert prepull.pull_of(FAILED_131, [], [], NOW, 600).outcome == "failed"


def test_a_pull_that_keeps_failing_fails_past_the_timeout_only() -> None:
    job = pull_job_with()
    pod = pulling_pod(job, "ImagePullBackOff", f'Back-off pulling image "{TASK.image}"')
    early = prepull.pull_of(job, [pod], [], NOW, 600)
    assert (early.outcome, early.reason, early.node) == ("pulling", "ImagePullBackOff",
                                                         "node-a")
    late = prepull.pull_of(job, [pod], [], NOW + timedelta(minutes=10), 600)
    assert (late.outcome, late.reason) == ("failed", "ImagePullBackOff")


def test_a_pull_that_found_the_disk_full_fails_at_once() -> None:
    job = pull_job_with()
    full = (f'failed to pull and unpack image "{TASK.image}": failed to extract '
            f'layer sha256:{"cd" * 32}: write /var/lib/containerd/io.containerd.snapshotter.v1.'
            f'overlayfs/snapshots/81/fs/usr/lib/libLLVM.so: no space left on device')
    pull = prepull.pull_of(job, [pulling_pod(job, "ErrImagePull", full)], [], NOW, 600)
    assert (pull.outcome, pull.reason) == ("failed", DISK_PRESSURE)


# --- Where the pre-pull stands ---------------------------------------------------------------

IMAGES = [f"swebench/sweb.eval.x86_64.task-{i}:latest" for i in range(5)]


def test_at_first_nothing_starts_and_the_first_images_are_pulled_n_at_a_time() -> None:
    state = prepull.pull_state(IMAGES, {}, parallelism=2)
    assert not state.ready and state.create == tuple(IMAGES[:2])
    assert state.condition[:2] == (False, "Pulling")
    assert state.status() == {"total": 5, "pulled": 0, "failed": 0, "pulling": 0}


def test_progress_is_counted_and_no_more_than_n_pull_at_once() -> None:
    pulls = {IMAGES[0]: prepull.Pull("pulled", "node-a"), IMAGES[1]: prepull.Pull("pulling"),
             IMAGES[2]: prepull.Pull("failed", None, "ErrImagePull", "not found")}
    state = prepull.pull_state(IMAGES, pulls, parallelism=2)
    assert not state.ready and state.create == (IMAGES[3],)
    assert state.status() == {"total": 5, "pulled": 1, "failed": 1, "pulling": 1}
    assert state.condition[2].startswith("1 of 5 images pulled, 1 pulling, 1 failed")
    assert state.nodes == {IMAGES[0]: "node-a"}
    full = {**pulls, IMAGES[3]: prepull.Pull("pulling"), IMAGES[4]: prepull.Pull("pulling")}
    assert prepull.pull_state(IMAGES, full, parallelism=2).create == ()


def test_items_start_once_every_image_is_pulled() -> None:
    pulls = {image: prepull.Pull("pulled", "node-a") for image in IMAGES}
    state = prepull.pull_state(IMAGES, pulls, parallelism=2)
    assert state.ready and state.create == ()
    assert state.condition == (True, "Pulled", "5 of 5 images pulled")


def test_a_failed_image_does_not_hold_the_items_back() -> None:
    pulls = {image: prepull.Pull("pulled") for image in IMAGES[1:]}
    pulls[IMAGES[0]] = prepull.Pull("failed", None, "ErrImagePull", "manifest unknown")
    state = prepull.pull_state(IMAGES, pulls, parallelism=2)
    assert state.ready and state.status()["failed"] == 1
    assert state.condition[:2] == (False, "PullFailed")
    assert f"{IMAGES[0]}: ErrImagePull: manifest unknown" in state.condition[2]


def test_a_suspended_evaluation_starts_no_pull() -> None:
    pulls = {IMAGES[0]: prepull.Pull("pulling")}
    state = prepull.pull_state(IMAGES, pulls, parallelism=2, suspended=True)
    assert not state.ready and state.create == ()
    assert state.condition[2].endswith("suspended: no image starts pulling")


# --- A full node disk ------------------------------------------------------------------------

LOW_ON_DISK = ("The node was low on resource: ephemeral-storage. Threshold quantity: "
               "10967403210, available: 9416616Ki. Container test was using 7833676Ki, "
               "request is 2Gi, has larger consumption of ephemeral-storage. ")
REJECTED = "Pod was rejected: The node had condition: [DiskPressure]. "


def evicted(message: str) -> dict[str, Any]:
    """The real evicted pod, as the kubelet's eviction manager words a node's pressure."""
    pod = copy.deepcopy(EVICTED_POD)
    pod["status"]["message"] = message
    return pod


@pytest.mark.parametrize("message", [LOW_ON_DISK, REJECTED])
def test_an_eviction_or_refusal_for_node_disk_pressure_is_infra_and_retried(message) -> None:
    state = item_state(FAILED_131, [evicted(message)])
    assert (state.phase, state.reason, state.error_kind, state.retryable) == (
        Phase.FAILED, DISK_PRESSURE, ErrorKind.INFRA, True)
    assert state.node == "node2" and state.message == message


def test_the_pods_own_storage_limits_stay_an_eviction() -> None:
    # The real pod: an emptyDir over its sizeLimit would fill any node again.
    assert item_state(FAILED_131, [EVICTED_POD]).reason == "Evicted"
    own = "Pod ephemeral local storage usage exceeds the total limit of containers 20Gi. "
    assert item_state(FAILED_131, [evicted(own)]).reason == "Evicted"


def test_a_disruption_by_the_kubelet_for_disk_is_disk_pressure() -> None:
    job = our_job(conditions=[{"type": "Failed", "status": "True",
                               "reason": "BackoffLimitExceeded"}])
    pod = our_pod(job, "Failed", BEFORE_SOLVE | {"solve": done(143)})
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                    "reason": "TerminationByKubelet", "message": LOW_ON_DISK}]
    assert item_state(job, [pod]).reason == DISK_PRESSURE


def test_a_step_that_met_a_full_disk_is_infra_not_a_broken_sandbox() -> None:
    job = our_job(conditions=[{"type": "Failed", "status": "True",
                               "reason": "BackoffLimitExceeded"}])
    tail = "OSError: [Errno 28] No space left on device: 'build/lib'\n"
    steps = BEFORE_SOLVE | {"solve": done(), "test": done(1, message=tail)}
    state = item_state(job, [our_pod(job, "Failed", steps)])
    assert (state.reason, state.error_kind, state.retryable) == (DISK_PRESSURE,
                                                                 ErrorKind.INFRA, True)


def test_a_pull_into_a_full_disk_is_retried_at_once_on_another_node() -> None:
    ev = evaluation(predictions={"source": "gold"})
    job = our_job()
    pod = our_pod(job, "Pending", {"pull": {"waiting": {
        "reason": "ErrImagePull", "message": "write /var/lib/containerd/tmpmounts: no space "
                                             "left on device"}}})
    state = item_state(job, [pod])
    assert (state.phase, state.reason, state.node) == (Phase.PENDING, DISK_PRESSURE, "node-a")
    view = ItemView(ITEM, [job], state)
    # At once, not after the image pull timeout: 28 seconds after the pod started.
    decision = decide(ev, [view], datetime(2026, 5, 1, 10, 0, 30, tzinfo=UTC),
                      Settings(image_pull_timeout_s=600))
    assert decision.retry == [view] and decision.stop == [job]
    # Its retry prefers no node: not the full one, nor the one its image was pulled on.
    nodes = reconcile.preferred_nodes(ev, {TASK.instance_id: TASK}, [view],
                                      {TASK.image: "node-a"})
    assert nodes == {}
    retry = m.desired_job(ev, None, ITEM, TASK, m.task_configmap(ev, TASK, {}),
                          runner_version="0.1.0", attempt=1,
                          preferred_node=nodes.get(TASK.instance_id))
    assert "affinity" not in retry["spec"]["template"]["spec"]


def test_a_first_attempt_prefers_the_node_its_image_was_pulled_on() -> None:
    ev = evaluation(predictions={"source": "gold"})
    waiting = ItemView(ITEM)
    assert reconcile.preferred_nodes(ev, {TASK.instance_id: TASK}, [waiting],
                                     {TASK.image: "node-b"}) == {TASK.instance_id: "node-b"}
    ran = ItemView(ITEM, [our_job()], item_state(FAILED_131, [EVICTED_POD]))
    assert reconcile.preferred_nodes(ev, {TASK.instance_id: TASK}, [ran],
                                     {TASK.image: "node-b"}) == {TASK.instance_id: "node2"}


def test_a_full_node_is_not_preferred_whichever_repeat_met_it() -> None:
    ev = evaluation(predictions={"source": "gold"})
    full = item_state(FAILED_131, [evicted(LOW_ON_DISK)])  # on node2
    other = ItemView(WorkItem(id="f" * 32, instance_id=TASK.instance_id, repeat=1),
                     [our_job()], item_state(FAILED_131, [EVICTED_POD]))  # node2 as well
    views = [ItemView(ITEM, [our_job()], full), other]
    for order in (views, views[::-1]):
        assert reconcile.preferred_nodes(ev, {TASK.instance_id: TASK}, order, {}) == {}
