"""Reading Jobs, pods and events: every real object in shared/data/k8s-status, then ours."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from proctor.core.model import (
    ErrorKind,
    Outcome,
    PassFail,
    PatchInfo,
    RunResult,
)
from proctor.k8s.children.podstatus import (
    Phase,
    PodsByJob,
    item_state,
    read_compact_result,
    seconds_since,
    steps_of,
)
from proctor.runner.grade import compact_result
from support.k8s_status import (
    COMPLETE_131,
    EVICTED_POD,
    FAILED_131,
    OOM_POD,
    REAL_FILES,
    real,
    real_items,
)
from support.work_item_pods import (
    ACTIVE,
    BEFORE_SOLVE,
    ITEM,
    RUNNING,
    TASK,
    done,
    our_job,
    our_pod,
)


def without(job: dict[str, Any], condition: str) -> dict[str, Any]:
    """The Job as it was a moment earlier, before ``condition`` was added (1.31+)."""
    earlier = copy.deepcopy(job)
    earlier["status"]["conditions"] = [c for c in earlier["status"]["conditions"]
                                       if c["type"] != condition]
    return earlier


def job_named(name: str, uid: str = "", **status: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "uid": uid, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": status}


def test_every_real_object_is_read_by_some_test() -> None:
    used = {"event-failedcreate-podsecurity-replicaset-controller_k8s1.35_blog.json",
            "eventlist-imagepull-oomjob-backofflimit_troubleshoot.json",
            "job-complete-2019_k9s.json", "job-complete-successcriteriamet_k8s131plus.yaml",
            "job-failed-backofflimitexceeded-failuretarget_k8s131plus.yaml",
            "job-failed-deadlineexceeded_STATUS-ONLY-PARTIAL_blog2025.yaml",
            "joblist-complete-and-backofflimitexceeded_troubleshoot.json",
            "kubelet-podlist-succeeded-and-running-job-pod_nvsentinel.json",
            "pod-evicted-emptydir-sizelimit_aiops-e2e-report_k8s1.26.yaml",
            "pod-native-sidecar-running_k9s.json",
            "pod-pending-imagepullbackoff_aiops-e2e-report_k8s1.26.yaml",
            "pod-succeeded-tekton-init-completed-with-termination-message_blog.yaml",
            "podlist-errimagepull-pending_troubleshoot.json",
            "podlist-oomkilled-job-pod_troubleshoot.json"}
    assert set(REAL_FILES) == used


# --- Real Jobs -----------------------------------------------------------------------------


def test_an_attempt_ends_with_its_pod_before_its_job_is_marked() -> None:
    """The slot frees when the pod has ended (succeeded, failed, evicted), even while
    the Job controller has not marked the Job yet."""
    ended = {"pod-succeeded-tekton-init-completed-with-termination-message_blog.yaml": True,
             "pod-evicted-emptydir-sizelimit_aiops-e2e-report_k8s1.26.yaml": True,
             "pod-pending-imagepullbackoff_aiops-e2e-report_k8s1.26.yaml": False,
             "pod-native-sidecar-running_k9s.json": False}
    job = job_named("any", **ACTIVE)
    done = (Phase.SUCCEEDED, Phase.FAILED)
    assert {name: item_state(job, [real(name)]).phase in done for name in ended} == ended
    assert item_state(job, [OOM_POD]).phase == Phase.FAILED
    assert item_state(job, [{"metadata": {"name": "just-made"}}]).phase == Phase.PENDING


def test_deadline_exceeded_is_infra_whatever_the_pod_shows() -> None:
    job = real("job-failed-deadlineexceeded_STATUS-ONLY-PARTIAL_blog2025.yaml")
    running = real_items("kubelet-podlist-succeeded-and-running-job-pod_nvsentinel.json")[0]
    for pods in ([], [running]):
        state = item_state(job, pods)
        assert (state.phase, state.reason, state.error_kind, state.retryable) == (
            Phase.FAILED, "DeadlineExceeded", ErrorKind.INFRA, True)
        assert state.message == "Job was active longer than specified deadline"
    # FailureTarget comes first (1.31+): the item has failed before the Job is marked Failed.
    assert item_state(without(job, "Failed")).reason == "DeadlineExceeded"


def test_backoff_limit_exceeded_reads_the_pod_for_the_cause() -> None:
    oom = item_state(FAILED_131, [OOM_POD])
    assert (oom.phase, oom.reason, oom.retryable) == (Phase.FAILED, "OOMKilled", True)
    assert oom.message == "step memory-eater exited 137: out of memory"
    evicted = item_state(FAILED_131, [EVICTED_POD])
    assert (evicted.reason, evicted.error_kind, evicted.node) == ("Evicted", ErrorKind.INFRA,
                                                                  "node2")
    assert 'EmptyDir volume "logs" exceeds the limit "30Mi"' in evicted.message
    gone = item_state(FAILED_131, [])
    assert (gone.reason, gone.retryable) == ("PodLost", True)
    assert item_state(without(FAILED_131, "Failed"), [OOM_POD]).reason == "OOMKilled"


def test_the_oom_pod_is_picked_out_of_a_wider_list_by_its_job() -> None:
    job = job_named("oom-kill-job3", "a85295e8-54e4-40a4-aeb0-b47c19f1a69f")
    others = real_items("kubelet-podlist-succeeded-and-running-job-pod_nvsentinel.json")
    assert PodsByJob([*others, OOM_POD, EVICTED_POD]).of(job) == [OOM_POD]
    assert PodsByJob([*others, OOM_POD]).of(job_named("oom-kill-job3")) == [OOM_POD]  # by name
    # The Job controller may not have marked the Job yet: the failed pod says enough.
    state = item_state(job_named("oom-kill-job3", **ACTIVE), [OOM_POD])
    assert (state.phase, state.reason) == (Phase.FAILED, "OOMKilled")
    digest = "sha256:b99901aacc6c87f86a767b3a0b02cdc926aae62bb4a5e7361d895f26f4773562"
    assert state.images["memory-eater"].endswith(f"@{digest}")


def test_complete_jobs_of_every_vintage_without_their_pod_lost_the_result() -> None:
    complete_2019 = real("job-complete-2019_k9s.json")
    pre_131, failed_pre_131 = real_items(
        "joblist-complete-and-backofflimitexceeded_troubleshoot.json")
    for job in (complete_2019, pre_131, COMPLETE_131, without(COMPLETE_131, "Complete")):
        state = item_state(job, [])
        assert (state.phase, state.reason, state.retryable) == (Phase.FAILED, "ResultLost", True)
    assert item_state(failed_pre_131, []).reason == "PodLost"


def test_a_succeeded_pod_without_a_compact_result_sends_the_reader_to_the_log() -> None:
    tekton = real("pod-succeeded-tekton-init-completed-with-termination-message_blog.yaml")
    state = item_state(COMPLETE_131, [tekton])
    assert (state.phase, state.reason, state.result) == (Phase.SUCCEEDED, "ResultUnreadable", None)
    assert state.since == {s.name: s for s in state.steps}["step-hello"].finished_at
    assert "not a compact result" in state.message and "grade log" in state.message
    assert [s.name for s in state.steps] == ["place-tools", "step-init", "step-hello"]
    assert [s.init for s in state.steps] == [True, True, False]
    entry = "sha256:5730032a7daf7526fae6b586badf849ffe4539e16fd8be927ec7e320564486be"
    assert state.images["place-tools"].endswith(f"/entrypoint@{entry}")
    assert state.images["step-hello"].startswith("docker-pullable://ubuntu@sha256:")
    debugger = real_items("kubelet-podlist-succeeded-and-running-job-pod_nvsentinel.json")[1]
    silent = item_state(job_named("j", **ACTIVE), [debugger])
    assert silent.reason == "ResultUnreadable" and "no termination message" in silent.message


def test_a_runtime_without_registry_digests_gives_its_local_id() -> None:
    assert item_state(FAILED_131, [EVICTED_POD]).images["logfill"].startswith("sha256:")


# --- Real pods that have not ended ----------------------------------------------------------


def test_image_pull_back_off_is_pending_and_retryable_since_the_pod_started() -> None:
    pod = real("pod-pending-imagepullbackoff_aiops-e2e-report_k8s1.26.yaml")
    state = item_state(job_named("j", **ACTIVE), [pod])
    assert (state.phase, state.reason) == (Phase.PENDING, "ImagePullBackOff")
    assert (state.error_kind, state.retryable) == (ErrorKind.INFRA, True)
    assert state.since == "2026-04-22T02:57:28Z" and state.images == {}
    assert state.message == 'Back-off pulling image "nginx:latest"'


def test_err_image_pull_is_dated_by_its_first_failure_event() -> None:
    pod = real_items("podlist-errimagepull-pending_troubleshoot.json")[0]
    events = real_items("eventlist-imagepull-oomjob-backofflimit_troubleshoot.json")
    state = item_state(job_named("j", **ACTIVE), [pod], events)
    assert (state.phase, state.reason) == (Phase.PENDING, "ErrImagePull")
    assert state.since == "2023-07-11T05:34:46Z"  # the kubelet's first Failed event
    assert "x509" in state.message
    assert item_state(job_named("j", **ACTIVE), [pod]).since == "2023-07-11T05:34:44Z"
    now = datetime(2023, 7, 11, 5, 44, 46, tzinfo=UTC)
    assert seconds_since(state.since, now) == 600.0


def test_failed_create_from_pod_security_is_pending_and_not_retryable() -> None:
    # The job-controller writes the same FailedCreate event about the Job.
    event = real("event-failedcreate-podsecurity-replicaset-controller_k8s1.35_blog.json")
    job = job_named("ev-demo-0123456789abcdef", **ACTIVE)
    about_job = copy.deepcopy(event)
    about_job["involvedObject"] |= {"kind": "Job", "name": job["metadata"]["name"],
                                    "apiVersion": "batch/v1"}
    state = item_state(job, [], [event, about_job])
    assert (state.phase, state.reason, state.retryable, state.error_kind) == (
        Phase.PENDING, "FailedCreate", False, None)
    assert 'violates PodSecurity "restricted:v1.35"' in state.message
    assert state.since == "2026-04-17T11:33:08Z"
    # The ReplicaSet's own event is about another object.
    assert item_state(job, [], [event]).reason == "Created"


def test_a_running_job_pod() -> None:
    running = real_items("kubelet-podlist-succeeded-and-running-job-pod_nvsentinel.json")[0]
    job = job_named("gpu-job", "9ac18b61-8544-4b44-b33c-6e1cf29300b2", **ACTIVE)
    state = item_state(job, PodsByJob(real_items(
        "kubelet-podlist-succeeded-and-running-job-pod_nvsentinel.json")).of(job))
    assert (state.phase, state.since, state.pod) == (
        Phase.RUNNING, "2025-12-05T22:32:52Z", "gpu-job-xkbmx")
    assert state.images["gpu-container"].startswith("docker.io/nvidia/cuda@sha256:")
    assert state == item_state(job, [running])


def test_a_native_sidecar_does_not_count_as_the_running_step() -> None:
    pod = real("pod-native-sidecar-running_k9s.json")
    state = item_state(job_named("j", **ACTIVE), [pod])
    steps = {s.name: s for s in steps_of(pod)}
    assert (state.phase, state.since) == (Phase.RUNNING, steps["sleep"].started_at)
    assert steps["sidecar"].sidecar and steps["sidecar"].state == "running"
    assert steps["init"].state == "terminated" and not steps["init"].sidecar


# --- Our own pods, as a cluster would show them ---------------------------------------------

def a_result() -> RunResult:
    return RunResult(item_id=ITEM.id, instance_id=TASK.instance_id, outcome=Outcome.RESOLVED,
                     patch=PatchInfo(present=True, applied=True, apply_method="git apply -v",
                                     sha256="f" * 64),
                     tests_ran=True, FAIL_TO_PASS=PassFail(success=["t"]),
                     PASS_TO_PASS=PassFail(success=["u", "v"]))


def test_our_pod_while_the_agent_works() -> None:
    job = our_job()
    state = item_state(job, [our_pod(job, "Pending", BEFORE_SOLVE | {"solve": RUNNING})])
    assert (state.phase, state.node) == (Phase.RUNNING, "node-a")
    assert state.since == RUNNING["running"]["startedAt"]
    assert state.images["pull"].endswith(f"@sha256:{'ab' * 32}")


def test_our_pod_between_two_steps_is_running() -> None:
    job = our_job()
    waiting = {"waiting": {"reason": "PodInitializing"}}
    state = item_state(job, [our_pod(job, "Pending", BEFORE_SOLVE | {"solve": done(),
                                                                     "test": waiting})])
    assert (state.phase, state.since) == (Phase.RUNNING, "2026-05-01T10:05:00Z")  # solve's end


def test_our_pod_before_anything_ran() -> None:
    job = our_job()
    creating = {"waiting": {"reason": "PodInitializing"}}
    state = item_state(job, [our_pod(job, "Pending", {"pull": creating})])
    assert (state.phase, state.reason) == (Phase.PENDING, "PodInitializing")
    assert item_state(job).reason == "Created" and item_state(job).since == job["metadata"][
        "creationTimestamp"]


def test_our_pod_unschedulable() -> None:
    job = our_job()
    pod = our_pod(job, "Pending", {})
    pod["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 3 Insufficient ephemeral-storage.",
         "lastTransitionTime": "2026-05-01T10:00:01Z"}]}
    state = item_state(job, [pod])
    assert (state.phase, state.reason, state.since) == (Phase.PENDING, "Unschedulable",
                                                        "2026-05-01T10:00:01Z")
    assert "ephemeral-storage" in state.message


def test_the_runner_image_stuck_after_the_task_image_was_pulled() -> None:
    job = our_job()
    stuck = {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}
    state = item_state(job, [our_pod(job, "Pending", BEFORE_SOLVE | {"solve": stuck})])
    assert (state.phase, state.reason, state.retryable) == (Phase.PENDING, "ImagePullBackOff",
                                                            True)
    assert state.since == "2026-05-01T10:05:00Z"  # when the step before it ended


def test_a_missing_secret_is_stuck_but_not_retryable() -> None:
    job = our_job()
    stuck = {"waiting": {"reason": "CreateContainerConfigError",
                         "message": 'secret "tok" not found'}}
    state = item_state(job, [our_pod(job, "Pending", BEFORE_SOLVE | {"solve": stuck})])
    assert (state.phase, state.reason, state.retryable, state.error_kind) == (
        Phase.PENDING, "CreateContainerConfigError", False, None)


def test_our_pod_graded() -> None:
    message = json.dumps(compact_result(a_result()))
    job = our_job(conditions=[{"type": "SuccessCriteriaMet", "status": "True"}], succeeded=1)
    steps = BEFORE_SOLVE | {"solve": done(), "test": done(), "grade": done(message=message)}
    state = item_state(job, [our_pod(job, "Succeeded", steps)])
    assert (state.phase, state.reason) == (Phase.SUCCEEDED, "Completed")
    assert state.result == json.loads(message)
    assert state.result is not None and state.result["f2p"] == [1, 1]


def test_a_result_of_another_item_is_not_taken() -> None:
    other = a_result().model_copy(update={"item_id": "f" * 32})
    job = our_job(conditions=[{"type": "Complete", "status": "True"}], succeeded=1)
    steps = BEFORE_SOLVE | {"solve": done(), "test": done(),
                            "grade": done(message=json.dumps(compact_result(other)))}
    state = item_state(job, [our_pod(job, "Succeeded", steps)])
    assert state.reason == "ResultUnreadable" and "f" * 32 in state.message


@pytest.mark.parametrize(("message", "why"), [
    (None, "no termination message"), ('{"outcome": "resol', "not JSON"),
    ('{"outcome": "great"}', "not a compact result"), ("[1]", "not a compact result")])
def test_unreadable_compact_results(message: str | None, why: str) -> None:
    result, reason = read_compact_result(message)
    assert result is None and why in reason


def test_a_broken_test_step_is_a_sandbox_error_with_its_log_tail() -> None:
    job = our_job(conditions=[{"type": "FailureTarget", "status": "True",
                               "reason": "BackoffLimitExceeded"}])
    steps = BEFORE_SOLVE | {"solve": done(),
                            "test": done(3, message="test step: no repository at /testbed\n")}
    state = item_state(job, [our_pod(job, "Failed", steps)])
    assert (state.phase, state.reason) == (Phase.FAILED, "StepFailed")
    assert (state.error_kind, state.retryable) == (ErrorKind.SANDBOX, False)
    assert state.message == "step test exited 3: test step: no repository at /testbed"


def test_a_step_killed_without_a_reason_is_infra() -> None:
    job = our_job(conditions=[{"type": "Failed", "status": "True",
                               "reason": "BackoffLimitExceeded"}])
    steps = BEFORE_SOLVE | {"solve": done(), "test": done(137)}
    state = item_state(job, [our_pod(job, "Failed", steps)])
    assert (state.reason, state.retryable) == ("Killed", True)
    assert state.message.startswith("step test exited 137")


@pytest.mark.parametrize(("reason", "cause"), [
    ("DeletionByTaintManager", "NodeLost"), ("PreemptionByScheduler", "Preempted"),
    ("EvictionByEvictionAPI", "Evicted"), ("TerminationByKubelet", "Evicted")])
def test_disruptions_are_infra(reason: str, cause: str) -> None:
    job = our_job(conditions=[{"type": "Failed", "status": "True",
                               "reason": "BackoffLimitExceeded"}])
    pod = our_pod(job, "Failed", BEFORE_SOLVE | {"solve": done(143)})
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                    "reason": reason, "message": "node went away"}]
    state = item_state(job, [pod])
    assert (state.reason, state.error_kind, state.retryable) == (cause, ErrorKind.INFRA, True)


def test_a_jobs_pods_are_picked_by_its_uid_else_by_its_name() -> None:
    """Not the pods of an earlier Job of the same name (by uid), else by name."""
    job = our_job()
    mine = our_pod(job, "Pending", BEFORE_SOLVE)
    earlier = our_pod(job, "Failed", {"pull": done(1)})
    earlier["metadata"] |= {"name": "earlier"}
    earlier["metadata"]["labels"] = earlier["metadata"]["labels"] | {
        "batch.kubernetes.io/controller-uid": "earlier-uid"}
    pods = [*real_items("kubelet-podlist-succeeded-and-running-job-pod_nvsentinel.json"),
            OOM_POD, EVICTED_POD, earlier, mine]
    whole = PodsByJob(pods)
    assert whole.of(job) == [mine]
    assert whole.of(job | {"metadata": job["metadata"] | {"uid": "earlier-uid"}}) == [earlier]
    # None of its own by uid yet: by name.
    assert whole.of(job | {"metadata": job["metadata"] | {"uid": "a-third-uid"}}) == [
        earlier, mine]
    assert whole.of(job_named("no-such-job", "no-uid")) == []

def test_the_newest_pod_is_read() -> None:
    job = our_job()
    old = our_pod(job, "Failed", {"pull": done(1)})
    new = our_pod(job, "Pending", BEFORE_SOLVE | {"solve": RUNNING})
    new["metadata"] |= {"name": "newer", "creationTimestamp": "2026-05-01T11:00:00Z"}
    assert item_state(job, [new, old]).pod == "newer"
