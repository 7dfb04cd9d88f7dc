"""Every change of one kind of object in a namespace of the real cluster, in the API
server's order, from a watch started before what is watched (`Watch`): Jobs or pods
counted as they came, and when."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import kubernetes

from support.real_cluster_fixtures import RealCluster


class Watch:
    """Every change of one kind of object in the namespace, in the API server's order,
    from a watch started before the operator."""

    def __init__(self, cluster: RealCluster, namespace: str, kind: str):
        self.events: list[tuple[str, Any]] = []
        self.times: list[float] = []
        """When each event arrived (time.monotonic())."""
        self._client = cluster.api_client()
        lister = {"jobs": kubernetes.client.BatchV1Api(self._client).list_namespaced_job,
                  "pods": kubernetes.client.CoreV1Api(self._client).list_namespaced_pod}[kind]
        self._stop = threading.Event()
        version = lister(namespace).metadata.resource_version
        self._thread = threading.Thread(target=self._run, args=(lister, namespace, version),
                                        daemon=True, name=f"watch-{kind}")
        self._thread.start()

    def _run(self, lister: Callable[..., Any], namespace: str, version: str) -> None:
        while not self._stop.is_set():
            watch = kubernetes.watch.Watch()
            for event in watch.stream(lister, namespace, resource_version=version,
                                      timeout_seconds=2):
                version = event["object"].metadata.resource_version
                self.times.append(time.monotonic())
                self.events.append((event["type"], event["object"]))
                if self._stop.is_set():
                    break

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._client.close()

    def created(self) -> set[str]:
        """The uids of the objects created since the watch began."""
        return {obj.metadata.uid for kind, obj in self.events if kind == "ADDED"}

    def owners(self) -> dict[str, str]:
        """The uid of each object created since the watch began -> its owner's uid."""
        return {obj.metadata.uid: ref.uid for kind, obj in self.events if kind == "ADDED"
                for ref in obj.metadata.owner_references or []}

    def first(self, seen: Callable[[str, Any], bool]) -> dict[str, float]:
        """Object name -> when an event for which `seen(type, object)` first arrived."""
        found: dict[str, float] = {}
        for (kind, obj), at in zip(self.events, self.times, strict=True):
            if seen(kind, obj):
                found.setdefault(obj.metadata.name, at)
        return found

    def running(self) -> list[int]:
        """After each event, how many pods had not ended (not Succeeded, Failed or gone)."""
        live: set[str] = set()
        counts = []
        for kind, pod in self.events:
            ended = kind == "DELETED" or pod.status.phase in ("Succeeded", "Failed")
            (live.discard if ended else live.add)(pod.metadata.name)
            counts.append(len(live))
        return counts
