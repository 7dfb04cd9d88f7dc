"""Work-item Jobs in Kueue's queue and their pods, as the API returns them once Kueue
(v0.17) and the Job controller have acted (pure builders on `reconcile_views`' items):
Kueue admits a Job by setting spec.suspend false and preempts it by setting it true again."""

from __future__ import annotations

from typing import Any

from proctor.core.labels import KUEUE_QUEUE_NAME
from support.reconcile_views import ITEMS, job, pod_for, ts
from support.reconcile_views import evaluation as eval_body

QUEUE = "team-a"


def kueue_job(n: int, attempt: int = 0, *, suspended: bool = True, asks: bool = True) -> dict:
    """A work item's Job in Kueue's queue: suspended (queued) or admitted."""
    j = job(ITEMS[n], attempt)
    j["metadata"]["labels"][KUEUE_QUEUE_NAME] = QUEUE
    solve = ["proctor", "runner", "solve", *(["--endpoint", "http://agent:9009/"] if asks
                                              else ["--patch-file", "/task/patch.diff"])]
    j["spec"] = {"suspend": suspended,
                 "template": {"spec": {"initContainers": [{"name": "solve", "command": solve}],
                                       "containers": [{"name": "grade"}]}}}
    # The Job controller's condition: True while suspended, False (JobResumed) once admitted.
    j["status"]["conditions"].append(
        {"type": "Suspended", "status": "True" if suspended else "False",
         "reason": "JobSuspended" if suspended else "JobResumed",
         "lastTransitionTime": ts(30)})
    return j


def solving(j: dict, *, ended: bool) -> dict:
    """The Job's pod: its solve step running, or ended (exit 0) and its test step running."""
    solve = ({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": ts(50),
                             "finishedAt": ts(5)}} if ended
             else {"running": {"startedAt": ts(50)}})
    statuses = [{"name": "solve", "state": solve}]
    if ended:
        statuses.append({"name": "test", "state": {"running": {"startedAt": ts(4)}}})
    return pod_for(j, "Running", initContainerStatuses=statuses)


def agent_eval(**spec: Any):
    return eval_body(predictions={"source": "agent"}, agentRef={"name": "agent"}, **spec)
