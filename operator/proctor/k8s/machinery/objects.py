"""The Kubernetes objects Proctor reads, as types: the parts of them it reads, no more.

They mirror the JSON the API server writes (camelCase keys, as `api` decodes it, and as
kopf's watches and indexes hold it) of batch/v1 Job, core/v1 Pod, Event and ConfigMap and
coordination.k8s.io/v1 Lease, as Kubernetes 1.29 to 1.35 serve them (the Job conditions
FailureTarget and SuccessCriteriaMet: 1.31+), and of Kueue's kueue.x-k8s.io/v1beta2
Workload (Kueue 0.17). Nothing checks them at runtime: the API server is the source, and
has checked its objects against its schemas already. Every class is ``total=False``: the
API omits an empty field, so a reader says what it does without one (``.get``).

What Proctor does not model (its own Evaluations, which pydantic parses; the manifests it
builds; objects it passes on as they are) is an `Obj` to read or a `MutableObj` to build.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

Obj = Mapping[str, Any]
"""An object Proctor reads and does not model."""
MutableObj = dict[str, Any]
"""An object Proctor builds or changes (a manifest, a patch, a status)."""


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    generation: int
    resourceVersion: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    creationTimestamp: str
    deletionTimestamp: str


class Condition(TypedDict, total=False):
    """A condition of a Job, a pod or a Workload (``status``: "True", "False", "Unknown")."""

    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str


# --- Pods ----------------------------------------------------------------------------------


class Container(TypedDict, total=False):
    name: str
    image: str
    command: list[str]
    restartPolicy: str
    """"Always" on an init container: a native sidecar."""


class PodSpec(TypedDict, total=False):
    initContainers: list[Container]
    containers: list[Container]
    nodeName: str


class ContainerStateDetail(TypedDict, total=False):
    """One of a container's states (waiting, running, terminated): the fields Proctor
    reads of each, which the API spells alike where they are there at all (exitCode and
    finishedAt only on terminated, startedAt not on waiting)."""

    reason: str
    message: str
    exitCode: int
    startedAt: str
    finishedAt: str


class ContainerState(TypedDict, total=False):
    """At most one key is there (none before the kubelet reports the container)."""

    waiting: ContainerStateDetail
    running: ContainerStateDetail
    terminated: ContainerStateDetail


class ContainerStatus(TypedDict, total=False):
    name: str
    state: ContainerState
    imageID: str


class PodStatus(TypedDict, total=False):
    phase: str
    reason: str
    message: str
    startTime: str
    conditions: list[Condition]
    initContainerStatuses: list[ContainerStatus]
    containerStatuses: list[ContainerStatus]


class Pod(TypedDict, total=False):
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


# --- Jobs ----------------------------------------------------------------------------------


class PodTemplateSpec(TypedDict, total=False):
    metadata: ObjectMeta
    spec: PodSpec


class JobSpec(TypedDict, total=False):
    suspend: bool
    template: PodTemplateSpec


class JobStatus(TypedDict, total=False):
    conditions: list[Condition]
    completionTime: str


class Job(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: JobSpec
    status: JobStatus


# --- Events, ConfigMaps, Leases --------------------------------------------------------------


class ObjectReference(TypedDict, total=False):
    kind: str
    name: str
    namespace: str
    uid: str
    fieldPath: str
    """The container an Event is about: ``spec.containers{solve}``."""


class Event(TypedDict, total=False):
    """A core/v1 Event (``involvedObject``, ``firstTimestamp``) or an events/v1 one
    (``regarding``, ``eventTime``): the kubelet and the job-controller write either."""

    metadata: ObjectMeta
    type: str
    reason: str
    message: str
    involvedObject: ObjectReference
    regarding: ObjectReference
    firstTimestamp: str
    eventTime: str


class ConfigMap(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    data: dict[str, str]
    binaryData: dict[str, str]
    """Base64 text, as the API writes it."""


class ConfigMapList(TypedDict, total=False):
    items: list[ConfigMap]


class Lease(TypedDict, total=False):
    """The spec is read by `leader._Spec` (pydantic: its fields' names and types there)."""

    metadata: ObjectMeta
    spec: dict[str, Any]


# --- Kueue ---------------------------------------------------------------------------------


class AdmissionCheckState(TypedDict, total=False):
    """One AdmissionCheck's state on a Workload (Pending, Ready, Retry, Rejected)."""

    name: str
    state: str
    message: str
    lastTransitionTime: str


class WorkloadStatus(TypedDict, total=False):
    admissionChecks: list[AdmissionCheckState]
    conditions: list[Condition]


class Workload(TypedDict, total=False):
    metadata: ObjectMeta
    status: WorkloadStatus


class WorkloadList(TypedDict, total=False):
    items: list[Workload]
