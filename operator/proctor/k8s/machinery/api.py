"""The one place that talks to the Kubernetes API (the official client, raw JSON).

Objects come back as plain dicts, exactly as the API server wrote them (camelCase),
so that the pure modules read what a real cluster sends; those Proctor reads are typed
(`proctor.k8s.machinery.objects`). Calls are synchronous; the controller runs them in asyncio's
default executor. Reads of what the controller watches (Evaluations, agents, Jobs, pods,
kept results, events) come from kopf's indexes instead.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, cast

import orjson
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from proctor.core.labels import LABEL_ITEM
from proctor.k8s.machinery.names import selector
from proctor.k8s.machinery.objects import (
    ConfigMap,
    ConfigMapList,
    Lease,
    MutableObj,
    Obj,
    Workload,
    WorkloadList,
)

GROUP, VERSION = "proctor.dev", "v1alpha1"
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
Plural = Literal["evaluations", "agentundertests"]
"""The custom resources whose status the operator writes."""

Rule = tuple[str, str, str]
"""One RBAC right: (API group, resource, verb)."""
NEEDS: dict[str, tuple[Rule, ...]] = {}
"""The rights each method below needs (``Kube.create`` -> its rules), declared by @needs."""
_Method = TypeVar("_Method", bound=Callable[..., Any])


def needs(*rules: Rule) -> Callable[[_Method], _Method]:
    """Declare the rights a method's API calls need. The chart grants what Kube's and Leases'
    methods declare, and a test runs each method against a recording HTTP server: a call
    its declaration lacks fails it (tests/unit/k8s/machinery/test_k8s_rbac.py,
    tests/deploy/test_chart.py)."""
    def declare(method: _Method) -> _Method:
        NEEDS[method.__qualname__] = rules
        return method
    return declare


def needed(cls: type) -> set[Rule]:
    """Every right the methods of ``cls`` (Kube, Leases) declare."""
    return {rule for name, rules in NEEDS.items() if name.split(".")[0] == cls.__name__
            for rule in rules}


class NameTaken(Exception):
    """An object of this name exists and is not this one: a Job of another item, or what an
    earlier Evaluation of the same name owned and the garbage collector has yet to remove.
    Never adopt it (the pass fails, and is made again)."""


def owner_uid(obj: Obj) -> str | None:
    """The uid of the Evaluation that owns an object (`kopf.adopt` made it the owner)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((ref.get("uid") for ref in refs if ref.get("kind") == "Evaluation"), None)


def load_config() -> None:
    """In a pod: the service account; elsewhere: the kubeconfig (KUBECONFIG)."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()


def _json(response: Any) -> MutableObj:
    decoded: MutableObj = orjson.loads(response.data)  # the API server answers with an object
    return decoded

# The typed reads below cast what `_json` decoded to the kind they asked for: the API server
# answers with that kind, having checked it against its schema, so the types of
# `proctor.k8s.machinery.objects` hold without a check here (they are the server's own, in part).


class SecretUnreadable(Exception):
    """An agent's auth Secret, or its key, is missing; the message names them (no value)."""


class Kube:
    """Reads and writes what the operator needs, nothing more."""

    def __init__(self, api_client: client.ApiClient | None = None, connections: int = 32):
        """`connections`: the pool's size, at least the calls made at once (asyncio's
        default executor runs up to 32; the client's default pool, five per core, would
        open and drop connections)."""
        if api_client is None:
            configuration = client.Configuration.get_default_copy()
            configuration.connection_pool_maxsize = connections
            api_client = client.ApiClient(configuration)
        self.client = api_client  # one connection pool for every kind
        self.core = client.CoreV1Api(self.client)
        self.batch = client.BatchV1Api(self.client)
        self.custom = client.CustomObjectsApi(self.client)

    @needs((GROUP, "evaluations", "get"))
    def get_evaluation(self, namespace: str, name: str) -> MutableObj | None:
        try:
            return _json(self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "evaluations", name, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    @needs((GROUP, "evaluations/status", "patch"), (GROUP, "agentundertests/status", "patch"))
    def patch_status(self, plural: Plural, namespace: str, name: str, status: MutableObj) -> None:
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, plural, name, {"status": status})

    @needs(("", "configmaps", "list"))
    def list_configmaps(self, namespace: str, labels: Mapping[str, str]) -> ConfigMapList:
        return cast(ConfigMapList, _json(self.core.list_namespaced_config_map(
            namespace, label_selector=selector(labels), _preload_content=False)))

    @needs((KUEUE_GROUP, "workloads", "list"))
    def list_workloads(self, namespace: str) -> list[Workload]:
        """The namespace's Kueue Workloads; none where Kueue is not installed (404)."""
        try:
            found = cast(WorkloadList, _json(self.custom.list_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads", _preload_content=False)))
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise
        return list(found.get("items") or [])

    @needs((KUEUE_GROUP, "workloads/status", "patch"))
    def apply_workload_status(self, workload: MutableObj) -> None:
        """Set an admission check's state on a Workload (server-side apply of its status:
        the operator's field manager owns that entry of status.admissionChecks alone)."""
        meta = workload["metadata"]
        self._send("PATCH", f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}/namespaces/"
                            f"{meta['namespace']}/workloads/{meta['name']}/status",
                   workload, apply=True)

    @needs(("", "secrets", "get"))
    def secret_value(self, namespace: str, name: str, key: str) -> str:
        """One key of a Secret, decoded: an agent's token (spec.auth), for its card fetch.
        A get by name only: the chart grants no list or watch of Secrets. Raises
        SecretUnreadable, naming the Secret and the key, when either is missing."""
        try:
            secret = _json(self.core.read_namespaced_secret(name, namespace,
                                                            _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                raise SecretUnreadable(f"Secret {namespace}/{name} does not exist") from None
            raise
        encoded = (secret.get("data") or {}).get(key)
        if encoded is None:
            raise SecretUnreadable(f"Secret {namespace}/{name} has no key {key!r}")
        try:  # stripped: a Secret made from a file often ends in a newline
            return base64.b64decode(encoded, validate=True).decode().strip()
        except (binascii.Error, UnicodeDecodeError):  # the value itself is never said
            raise SecretUnreadable(f"Secret {namespace}/{name} key {key!r} is not "
                                   f"UTF-8 text") from None

    @needs(("", "pods/log", "get"))
    def pod_log(self, namespace: str, pod: str, container: str) -> str:
        try:
            return self.core.read_namespaced_pod_log(pod, namespace, container=container)
        except ApiException as exc:
            if exc.status in (400, 404):  # the pod or its container is gone
                return ""
            raise

    def _send(self, method: str, path: str, body: MutableObj, *, apply: bool = False) -> bytes:
        """One write with a plain JSON body; the answer's bytes. The client's typed methods
        turn a body into the client's models and back (pydantic), the larger part of the
        operator's CPU per write; the server checks the object anyway. ``apply``:
        a server-side apply by the field manager ``proctor`` (it creates the object, or
        changes what differs, taking over fields others set)."""
        content = "application/apply-patch+yaml" if apply else "application/json"
        request = self.client.param_serialize(
            method=method, resource_path=path, body=body, auth_settings=["BearerToken"],
            query_params=[("fieldManager", "proctor"), ("force", "true")] if apply else None,
            header_params={"Content-Type": content, "Accept": "application/json"})
        response = self.client.call_api(*request)
        data: bytes = response.read() or b""
        if not 200 <= response.status <= 299:
            # The body is the API server's Status: its message says what was refused (a
            # 403 names the verb, the resource and the user).
            text = data.decode("utf-8", "replace") if data else None
            raise ApiException.from_response(http_resp=response, body=text, data=None)
        return data

    # A server-side apply of an object not there yet creates it: the API server asks for
    # create as well as patch then.
    @needs(("apps", "deployments", "patch"), ("apps", "deployments", "create"),
           ("", "services", "patch"), ("", "services", "create"),
           ("networking.k8s.io", "networkpolicies", "patch"),
           ("networking.k8s.io", "networkpolicies", "create"))
    def apply(self, obj: MutableObj) -> MutableObj:
        """Create or update a service agent's Deployment or Service, or an Evaluation's
        NetworkPolicy (server-side apply); the object as the API server answers, its status
        included."""
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        if obj["kind"] == "Deployment":
            data = self._send("PATCH", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
                              obj, apply=True)
        elif obj["kind"] == "Service":
            data = self._send("PATCH", f"/api/v1/namespaces/{namespace}/services/{name}", obj,
                              apply=True)
        elif obj["kind"] == "NetworkPolicy":
            data = self._send(
                "PATCH",
                f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/{name}",
                obj, apply=True)
        else:
            raise ValueError(f"cannot apply a {obj['kind']}")
        answer: MutableObj = orjson.loads(data)
        return answer

    @needs(("", "configmaps", "create"), ("batch", "jobs", "create"),
           ("", "configmaps", "get"), ("batch", "jobs", "get"))  # get: _check_same on a 409
    def create(self, obj: MutableObj) -> bool:
        """Create a ConfigMap or Job; False if it was already there (409)."""
        namespace = obj["metadata"]["namespace"]
        try:
            if obj["kind"] == "ConfigMap":
                self._send("POST", f"/api/v1/namespaces/{namespace}/configmaps", obj)
            elif obj["kind"] == "Job":
                self._send("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", obj)
            else:
                raise ValueError(f"cannot create a {obj['kind']}")
        except ApiException as exc:
            if exc.status != 409:
                raise
            self._check_same(obj)
            return False
        return True

    def _check_same(self, obj: MutableObj) -> None:
        """A 409 means "already there" only when the existing object is this one: of the
        same Evaluation (not an earlier one of the same name, its objects still being
        collected) and, for a Job, of the same item."""
        meta = obj["metadata"]
        read = (self.batch.read_namespaced_job if obj["kind"] == "Job"
                else self.core.read_namespaced_config_map)
        existing = _json(read(meta["name"], meta["namespace"], _preload_content=False))
        if owner_uid(existing) != owner_uid(obj):
            raise NameTaken(f"{obj['kind']} {meta['name']} is still there from an earlier "
                            f"Evaluation of the same name; waiting for its deletion")
        theirs = (existing["metadata"].get("labels") or {}).get(LABEL_ITEM)
        if obj["kind"] == "Job" and theirs != meta["labels"][LABEL_ITEM]:
            raise NameTaken(f"Job {meta['name']} exists for item {theirs}, not "
                            f"{meta['labels'][LABEL_ITEM]}")

    @needs(("", "configmaps", "get"))
    def read_configmap(self, namespace: str, name: str) -> ConfigMap | None:
        """A ConfigMap whole (a kept result's logs: the index keeps none); None if gone."""
        try:
            return cast(ConfigMap, _json(self.core.read_namespaced_config_map(
                name, namespace, _preload_content=False)))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    @needs(("", "configmaps", "delete"))
    def delete_configmap(self, namespace: str, name: str) -> None:
        """Delete a result ConfigMap moved to the store (its record kept); gone already
        is as good."""
        try:
            self._send("DELETE", f"/api/v1/namespaces/{namespace}/configmaps/{name}",
                       {"apiVersion": "v1", "kind": "DeleteOptions"})
        except ApiException as exc:
            if exc.status != 404:
                raise

    @needs(("batch", "jobs", "delete"))
    def delete_job(self, namespace: str, name: str) -> None:
        try:
            self._send("DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
                       {"apiVersion": "v1", "kind": "DeleteOptions",
                        "propagationPolicy": "Background"})
        except ApiException as exc:
            if exc.status != 404:
                raise


def describe(failure: BaseException) -> str:
    """One line for a log: an API error's status and the API server's message."""
    if not isinstance(failure, ApiException):
        return repr(failure)
    message = failure.reason or ""
    with contextlib.suppress(ValueError, KeyError, TypeError):
        message = orjson.loads(failure.body or "")["message"]
    return f"{type(failure).__name__} ({failure.status}): {message}"


class Leases:
    """The Lease of `proctor operator --leader-election` (coordination.k8s.io/v1), in the
    operator's own namespace (the chart's Role there grants what these methods declare)."""

    def __init__(self, namespace: str, name: str, api_client: client.ApiClient | None = None):
        self.namespace, self.name = namespace, name
        self.coordination = client.CoordinationV1Api(api_client or client.ApiClient())

    @needs(("coordination.k8s.io", "leases", "get"))
    def read(self) -> Lease | None:
        try:
            return cast(Lease, _json(self.coordination.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False)))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    @needs(("coordination.k8s.io", "leases", "create"),
           ("coordination.k8s.io", "leases", "update"))
    def write(self, action: str, body: MutableObj) -> bool:
        """Create or update (replace, with the resourceVersion read) the Lease; False when
        another candidate wrote first (409)."""
        sent: Any = body  # a plain dict is sent as it is (the types say V1Lease)
        try:
            if action == "create":
                self.coordination.create_namespaced_lease(self.namespace, sent,
                                                          _preload_content=False)
            else:
                self.coordination.replace_namespaced_lease(self.name, self.namespace, sent,
                                                           _preload_content=False)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True


class AdmissionChecks:
    """The agent-slots AdmissionCheck's status (`kueue`), cluster-scoped: granted by
    the chart's ClusterRole only where it makes the check (kueue.agentSlotsCheck)."""

    def __init__(self, api_client: client.ApiClient | None = None):
        self.kube = Kube(api_client)

    @needs((KUEUE_GROUP, "admissionchecks/status", "patch"))
    def apply_status(self, check: MutableObj) -> bool:
        """Server-side apply of the AdmissionCheck's status; False where it is not there."""
        try:
            self.kube._send("PATCH", f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}/admissionchecks/"
                                     f"{check['metadata']['name']}/status", check, apply=True)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True


# --- the CRD hook's calls (`proctor crds apply`) ----------------------------------------------
# Outside Kube on purpose: the operator never makes them, and its RBAC (what Kube's methods
# declare) must not grant them; the hook's own ClusterRole does.


def read_crd(api_client: client.ApiClient, name: str) -> MutableObj | None:
    """The CustomResourceDefinition ``name`` as the server holds it; None if absent."""
    try:
        return _json(client.ApiextensionsV1Api(api_client).read_custom_resource_definition(
            name, _preload_content=False))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def apply_crd(api_client: client.ApiClient, path: str, body: MutableObj, *, field_manager: str,
              dry_run: bool = False) -> MutableObj:
    """Server-side apply of a CRD (``force``: its fields are taken from other managers);
    the object the server answers with."""
    query = [("fieldManager", field_manager), ("force", "true")]
    if dry_run:
        query.append(("dryRun", "All"))
    return _patch(api_client, path, body, "application/apply-patch+yaml", query)


def patch_crd(api_client: client.ApiClient, path: str, operations: list[MutableObj]) -> MutableObj:
    """A JSON patch of a CRD (its managedFields: see crdapply.takeover_patch)."""
    return _patch(api_client, path, operations, "application/json-patch+json", [])


def _patch(api_client: client.ApiClient, path: str, body: MutableObj | list[MutableObj],
           content_type: str, query: list[tuple[str, str]]) -> MutableObj:
    """One PATCH. A JSON patch (a list) goes to the client's JSON serializer; an apply's
    object goes as bytes, as the serializer does not know the apply-patch content type."""
    payload = body if isinstance(body, list) else orjson.dumps(body)
    request = api_client.param_serialize(
        method="PATCH", resource_path=path, query_params=query, body=payload,
        auth_settings=["BearerToken"],
        header_params={"Content-Type": content_type, "Accept": "application/json"})
    response = api_client.call_api(*request)
    data = response.read()
    if not 200 <= response.status <= 299:
        text = data.decode("utf-8", "replace") if data else None
        raise ApiException.from_response(http_resp=response, body=text, data=None)
    answer: MutableObj = orjson.loads(data)
    return answer
