"""The one place that talks to the Kubernetes API (the official client, raw JSON).

Objects come back as plain dicts, exactly as the API server wrote them (camelCase),
so that the pure modules read what a real cluster sends. Calls are synchronous; the
operator runs them in threads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from proctor.k8s.manifests import LABEL_ITEM

GROUP, VERSION = "proctor.dev", "v1alpha1"
Obj = dict[str, Any]


class NameTaken(Exception):
    """A Job of this name exists and belongs to another item: never adopt it."""


def load_config() -> None:
    """In a pod: the service account; elsewhere: the kubeconfig (KUBECONFIG)."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()


def selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())


def _json(response: Any) -> Any:
    return json.loads(response.data)


class Kube:
    """Reads and writes what the operator needs, nothing more."""

    def __init__(self, api_client: client.ApiClient | None = None):
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)

    def get_custom(self, plural: str, namespace: str, name: str) -> Obj | None:
        try:
            return _json(self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, name, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch_status(self, plural: str, namespace: str, name: str, status: Obj) -> None:
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, plural, name, {"status": status})

    def list_jobs(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
        return _json(self.batch.list_namespaced_job(
            namespace, label_selector=selector(labels), _preload_content=False))["items"]

    def list_pods(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
        return _json(self.core.list_namespaced_pod(
            namespace, label_selector=selector(labels), _preload_content=False))["items"]

    def list_events(self, namespace: str) -> list[Obj]:
        return _json(self.core.list_namespaced_event(namespace, _preload_content=False))["items"]

    def list_configmaps(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
        return _json(self.core.list_namespaced_config_map(
            namespace, label_selector=selector(labels), _preload_content=False))["items"]

    def pod_log(self, namespace: str, pod: str, container: str) -> str:
        try:
            return self.core.read_namespaced_pod_log(pod, namespace, container=container)
        except ApiException as exc:
            if exc.status in (400, 404):  # the pod or its container is gone
                return ""
            raise

    def create(self, obj: Obj) -> bool:
        """Create a ConfigMap or Job; False if it was already there (409)."""
        namespace = obj["metadata"]["namespace"]
        try:
            if obj["kind"] == "ConfigMap":
                self.core.create_namespaced_config_map(namespace, obj)
            elif obj["kind"] == "Job":
                self.batch.create_namespaced_job(namespace, obj)
            else:
                raise ValueError(f"cannot create a {obj['kind']}")
        except ApiException as exc:
            if exc.status != 409:
                raise
            if obj["kind"] == "Job":
                self._check_same_item(obj)
            return False
        return True

    def _check_same_item(self, job: Obj) -> None:
        """A 409 means "already there" only when the existing Job is this item's."""
        meta = job["metadata"]
        existing = _json(self.batch.read_namespaced_job(meta["name"], meta["namespace"],
                                                        _preload_content=False))
        theirs = (existing["metadata"].get("labels") or {}).get(LABEL_ITEM)
        if theirs != meta["labels"][LABEL_ITEM]:
            raise NameTaken(f"Job {meta['name']} exists for item {theirs}, not "
                            f"{meta['labels'][LABEL_ITEM]}")

    def delete_job(self, namespace: str, name: str) -> None:
        try:
            self.batch.delete_namespaced_job(name, namespace,
                                             propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise
