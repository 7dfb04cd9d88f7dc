"""One work item's Job and pod as a cluster would show ours, step by step (pure builders):
the Job the operator makes for a sidecar agent's item, its pod with each step in a given
state."""

from __future__ import annotations

import copy
from typing import Any

from proctor.core.model import Instance, WorkItem
from proctor.core.spec import AgentUnderTest, AgentUnderTestSpec, Evaluation, EvaluationSpec
from proctor.k8s.children import manifests as m

ACTIVE = {"active": 1, "startTime": "2026-01-01T00:00:00Z"}
"""A Job's status while its pod runs."""
TASK = Instance(instance_id="django__django-11099", repo="django/django",
                base_commit="d26b2424437dabeeca94d7900b37d2df4410da0c",
                problem_statement="p", FAIL_TO_PASS=["t"], image="swebench/x:latest",
                eval_script="true", log_parser="parse_log_django")
ITEM = WorkItem(id="0123456789abcdef0123456789abcdef", instance_id=TASK.instance_id)
EVALUATION = Evaluation(name="demo", spec=EvaluationSpec.model_validate(
    {"agentRef": {"name": "agent"}}))
AGENT = AgentUnderTest(name="agent", spec=AgentUnderTestSpec(sidecar={"image": "agent:1"}))


def our_job(**status: Any) -> dict[str, Any]:
    cm = m.task_configmap(EVALUATION, TASK, {})
    job = m.desired_job(EVALUATION, AGENT, ITEM, TASK, cm, runner_version="0.1.0")
    job["metadata"] |= {"uid": "job-uid", "creationTimestamp": "2026-05-01T10:00:00Z"}
    job["status"] = status or dict(ACTIVE)
    return job


def our_pod(job: dict[str, Any], phase: str, states: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The Job's pod with each named step in the given state (others without status)."""
    spec = copy.deepcopy(job["spec"]["template"]["spec"]) | {"nodeName": "node-a"}
    labels = job["spec"]["template"]["metadata"]["labels"] | {
        "batch.kubernetes.io/controller-uid": "job-uid", "job-name": job["metadata"]["name"]}

    def statuses(key: str) -> list[dict[str, Any]]:
        return [{"name": c["name"], "state": states[c["name"]], "image": c["image"],
                 "imageID": f"docker.io/{c['image'].split(':')[0]}@sha256:{'ab' * 32}"
                 if "terminated" in states[c["name"]] or "running" in states[c["name"]] else "",
                 "ready": False, "restartCount": 0}
                for c in spec[key] if c["name"] in states]

    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job['metadata']['name']}-x7k2p", "labels": labels,
                         "creationTimestamp": "2026-05-01T10:00:01Z"},
            "spec": spec,
            "status": {"phase": phase, "startTime": "2026-05-01T10:00:02Z",
                       "initContainerStatuses": statuses("initContainers"),
                       "containerStatuses": statuses("containers")}}


def done(exit_code: int = 0, finished: str = "2026-05-01T10:05:00Z", **more: Any) -> dict:
    return {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0
                           else "Error", "startedAt": "2026-05-01T10:01:00Z",
                           "finishedAt": finished, **more}}


RUNNING = {"running": {"startedAt": "2026-05-01T10:06:00Z"}}
BEFORE_SOLVE = {"pull": done(finished="2026-05-01T10:03:00Z"), "workspace": done(),
                "agent": RUNNING}
