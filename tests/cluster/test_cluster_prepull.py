"""The pre-pull of an Evaluation's task images on the real cluster (scripts/cluster.sh): an
Evaluation of demo tasks with spec.images.prePull shows its images' progress in its status
(status.images, ImagesPulled False with reason Pulling) while no item's Job exists, makes
one pull Job per distinct image and no more than prePullParallelism pulling at once, makes
its first item's Job only after every pull Job completed (in the API server's order, from a
watch of Jobs), deletes the pull Jobs once items run, and ends Succeeded with every image
pulled.

The operator runs in this process (`in_process_operator`, as tests/cluster/test_cluster_variants.py
runs it); the demo images are on the node already (`cluster_images`), so each pull is the
kubelet finding its image there: what is tested is the order, the Jobs and the status.
"""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest

from proctor import datasets
from proctor.core.images import instance_image
from proctor.core.labels import LABEL_ITEM
from proctor.k8s.features import prepull
from support.cluster_watch import Watch
from support.real_cluster_fixtures import in_process_operator, wait_for

pytest_plugins = ["support.real_cluster_fixtures"]
pytestmark = [pytest.mark.cluster, pytest.mark.slow]

GROUP = ("proctor.dev", "v1alpha1")
TASKS, PARALLELISM = 4, 2
RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "768Mi"}}


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def ended(job: Any) -> bool:
    """Whether the Job says it ended (1.31+: SuccessCriteriaMet, FailureTarget first)."""
    return any(c.type in ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget")
               and c.status == "True" for c in job.status.conditions or [])


def is_pull(job: Any) -> bool:
    return prepull.ANNOTATION_IMAGE in (job.metadata.annotations or {})


def test_a_pre_pull_shows_its_progress_before_any_item_starts(
        real_cluster, cluster_images, cluster_namespace, cluster_api_client) -> None:
    ns, registry = cluster_namespace, cluster_images.instance_registry
    custom = kubernetes.client.CustomObjectsApi(cluster_api_client)
    batch = kubernetes.client.BatchV1Api(cluster_api_client)
    tasks = datasets.load("proctor-demo", max_rows=TASKS).instances
    images = {instance_image(task, registry) for task in tasks}
    assert len(images) > PARALLELISM  # so that the parallelism is seen to hold
    jobs = Watch(real_cluster, ns, "jobs")  # every change of a Job, in the server's order
    custom.create_namespaced_custom_object(*GROUP, ns, "evaluations", {
        "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
        "metadata": {"name": "pulled", "namespace": ns},
        "spec": {"predictions": {"source": "gold"},
                 "dataset": {"name": "proctor-demo", "maxRows": TASKS},
                 "maxConcurrentRows": 2,
                 "images": {"prePull": True, "prePullParallelism": PARALLELISM},
                 "runner": {"instanceImageRegistry": registry, "resources": RESOURCES}}})

    def status() -> dict[str, Any]:
        body = custom.get_namespaced_custom_object(*GROUP, ns, "evaluations", "pulled")
        return body.get("status") or {}

    def progress_before_items() -> dict[str, Any] | None:
        """The status, once it shows the pull's progress and then (read after it) no item's
        Job exists: none existed when the status was read either (an item's Job lives until
        its result is kept). The order itself is checked from the watch, below."""
        st = status()
        pulled = condition(st, prepull.CONDITION)
        if pulled.get("reason") != "Pulling":
            assert pulled.get("status") != "True", f"the pre-pull ended unseen: {st}"
            return None
        items = batch.list_namespaced_job(ns, label_selector=LABEL_ITEM).items
        return st if not items else None

    try:
        with in_process_operator(real_cluster, ns, runner_image=cluster_images.runner):
            during = wait_for(progress_before_items, 300, 0.1,
                              lambda: f"no pre-pull progress seen: {status()}")
            wait_for(lambda: condition(status(), "Succeeded").get("status") == "True", 600,
                     0.5, lambda: f"the Evaluation never succeeded: {status()}")
            # Once items run, the pull Jobs go (their pods would keep the images in use).
            wait_for(lambda: not [j for j in batch.list_namespaced_job(ns).items
                                  if is_pull(j)], 120, 0.5, "the pull Jobs were not deleted")
    finally:
        jobs.close()

    assert during["reason"] == "PullingImages"
    assert during["images"]["total"] == len(images) and during["images"]["pulled"] < len(images)
    final = status()
    assert final["images"] == {"total": len(images), "pulled": len(images), "failed": 0,
                               "pulling": 0}
    assert (condition(final, prepull.CONDITION)["status"],
            condition(final, prepull.CONDITION)["reason"]) == ("True", "Pulled")
    assert final["items"]["done"] == final["items"]["total"] == TASKS
    assert final["outcomes"] == {"resolved": TASKS}
    # From the watch: one pull Job per image; never more than PARALLELISM pulling at once;
    # every one completed before the first item's Job was made.
    pulling: set[str] = set()
    completed: set[str] = set()
    first_item = None
    for index, (kind, job) in enumerate(jobs.events):
        if is_pull(job):
            image = job.metadata.annotations[prepull.ANNOTATION_IMAGE]
            if kind == "DELETED" or ended(job):
                pulling.discard(image)
                if ended(job) and first_item is None:
                    completed.add(image)
            elif kind == "ADDED":
                pulling.add(image)
            assert len(pulling) <= PARALLELISM, f"{len(pulling)} pulling at once"
        elif (job.metadata.labels or {}).get(LABEL_ITEM) and first_item is None:
            first_item = index
    assert first_item is not None, "no item's Job was seen"
    assert completed == images, "an item's Job was made before every image was pulled"
