"""The pre-pull of an Evaluation's task images on the real cluster (scripts/cluster.sh): an
Evaluation of demo tasks with spec.images.prePull shows its images' progress in its status
(status.images, ImagesPulled False with reason Pulling) while no item's Job exists, makes
one pull Job per distinct image and no more than prePullParallelism pulling at once, starts
its first item only after the last pull ended, and ends Succeeded with every image pulled.

The operator runs in this process (`in_process_operator`, as tests/test_cluster_variants.py
runs it); the demo images are on the node already (`cluster_images`), so each pull is the
kubelet finding its image there: what is tested is the order, the Jobs and the status.
"""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest

from proctor import datasets
from proctor.core.images import instance_image
from proctor.core.labels import COMPONENT, LABEL_ITEM
from proctor.k8s import prepull
from proctor.k8s.podstatus import parse_time
from real_cluster_fixtures import in_process_operator, wait_for

pytest_plugins = ["real_cluster_fixtures"]
pytestmark = [pytest.mark.cluster, pytest.mark.slow]

GROUP = ("proctor.dev", "v1alpha1")
TASKS, PARALLELISM = 4, 2
RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "768Mi"}}


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def test_a_pre_pull_shows_its_progress_before_any_item_starts(
        real_cluster, cluster_images, cluster_namespace, cluster_api_client) -> None:
    ns, registry = cluster_namespace, cluster_images.instance_registry
    custom = kubernetes.client.CustomObjectsApi(cluster_api_client)
    batch = kubernetes.client.BatchV1Api(cluster_api_client)
    tasks = datasets.load("proctor-demo", max_rows=TASKS).instances
    images = {instance_image(task, registry) for task in tasks}
    assert len(images) > PARALLELISM  # so that the parallelism is seen to hold
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

    def jobs(selector: str) -> list[Any]:
        return batch.list_namespaced_job(ns, label_selector=selector).items

    seen: list[dict[str, Any]] = []

    def progress_before_items() -> dict[str, Any] | None:
        st = status()
        if "images" in st:
            seen.append(st["images"])
        pulled = condition(st, prepull.CONDITION)
        if pulled.get("reason") != "Pulling":
            assert pulled.get("status") != "True", f"the pre-pull ended unseen: {st}"
            return None
        assert jobs(LABEL_ITEM) == [], "an item's Job exists while images are pulling"
        return st

    def succeeded() -> bool:
        st = status()
        if "images" in st:
            seen.append(st["images"])
        return condition(st, "Succeeded").get("status") == "True"

    with in_process_operator(real_cluster, ns, runner_image=cluster_images.runner):
        during = wait_for(progress_before_items, 300, 0.1,
                          lambda: f"no pre-pull progress seen: {status()}")
        wait_for(succeeded, 600, 0.5, lambda: f"the Evaluation never succeeded: {status()}")

    assert during["images"]["total"] == len(images) and during["reason"] == "PullingImages"
    assert all(counts["pulling"] <= PARALLELISM for counts in seen), seen
    final = status()
    assert final["images"] == {"total": len(images), "pulled": len(images), "failed": 0,
                               "pulling": 0}
    assert (condition(final, prepull.CONDITION)["status"],
            condition(final, prepull.CONDITION)["reason"]) == ("True", "Pulled")
    assert final["items"]["done"] == final["items"]["total"] == TASKS
    assert final["outcomes"] == {"resolved": TASKS}
    # One pull Job per distinct image, each completed before the first item's Job was made
    # (status.startTime: the earliest attempt's creation).
    pulls = jobs(f"{COMPONENT}={prepull.COMPONENT_VALUE}")
    assert sorted(j.metadata.annotations[prepull.ANNOTATION_IMAGE] for j in pulls) == \
        sorted(images)
    ended = max(j.status.completion_time for j in pulls)
    assert parse_time(final["startTime"]) >= ended, (final["startTime"], ended)
