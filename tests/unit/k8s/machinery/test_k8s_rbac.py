"""Each API method of k8s/machinery/api.py (Kube, Leases, AdmissionChecks) makes exactly the
calls it declares (@needs).

Every method is run, through the official client's own request path, against a loopback
HTTP server that records each request and turns it into the RBAC right the API server would
ask for (group, resource, verb). The chart grants what the methods declare
(tests/deploy/test_chart.py), so a call that a declaration lacks fails here, and one the chart lacks
fails there.
"""

from __future__ import annotations

import base64
import inspect
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client

from proctor.core.labels import LABEL_ITEM
from proctor.k8s.features.kueue import active, check_state
from proctor.k8s.machinery.api import NEEDS, AdmissionChecks, Kube, Leases, Rule, needed

NAMESPACE = "team-a"
VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def right(method: str, url: str, content_type: str) -> set[Rule]:
    """The rights the API server asks for a request (its RBAC request attributes)."""
    parts = urlsplit(url)
    segments = parts.path.strip("/").split("/")
    group, rest = ("", segments[2:]) if segments[0] == "api" else (segments[1], segments[3:])
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]  # a namespaced resource; the namespace is not part of the right
    resource, named = "/".join([rest[0], *rest[2:]]), len(rest) > 1
    if method == "GET":
        watch = parse_qs(parts.query).get("watch") == ["true"]
        verb = "get" if named else "watch" if watch else "list"
    else:
        verb = VERBS[method]
    rights = {(group, resource, verb)}
    if content_type.startswith("application/apply-patch") and "/" not in resource:
        # An apply creates what is not there yet; one of a subresource (status) cannot.
        rights.add((group, resource, "create"))
    return rights


class Recorder(ThreadingHTTPServer):
    """A loopback API server: records each request's rights, answers ``status`` (by HTTP
    method, else 200) with one object that fits every read."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.rights: set[Rule] = set()
        self.status: dict[str, int] = {}


OBJECT = {
    "apiVersion": "v1", "kind": "Object", "items": [],
    "metadata": {"name": "x", "namespace": NAMESPACE, "resourceVersion": "1",
                 "labels": {LABEL_ITEM: "item"},
                 "ownerReferences": [{"kind": "Evaluation", "uid": "u"}]},
    "data": {"token": base64.b64encode(b"secret").decode()},
}


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.server.rights |= right(self.command, self.path,
                                    self.headers.get("Content-Type") or "")
        status = self.server.status.get(self.command, 200)
        body = json.dumps(OBJECT if status < 300 else {
            "kind": "Status", "code": status, "message": "as the test asked"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Recorder]:
    recorder = Recorder()
    thread = threading.Thread(target=recorder.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield recorder
    recorder.shutdown()
    recorder.server_close()


def api_client(server: Recorder) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    return client.ApiClient(configuration)


def _obj(kind: str, api_version: str = "v1") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": "x", "namespace": NAMESPACE, "labels": {LABEL_ITEM: "item"},
                         "ownerReferences": [{"kind": "Evaluation", "uid": "u"}]}}


Call = Callable[[Any], object]
# Each method of Kube and Leases with calls that take it down every path it has: the
# arguments, and the statuses the server answers (by HTTP method) for that run.
RUNS: dict[str, list[tuple[Call, dict[str, int]]]] = {
    "Kube.get_evaluation": [(lambda k: k.get_evaluation(NAMESPACE, "x"), {})],
    "Kube.patch_status": [(lambda k: k.patch_status("evaluations", NAMESPACE, "x", {}), {}),
                          (lambda k: k.patch_status("agentundertests", NAMESPACE, "x", {}),
                           {})],
    "Kube.list_configmaps": [(lambda k: k.list_configmaps(NAMESPACE, {"a": "b"}), {})],
    "Kube.list_workloads": [(lambda k: k.list_workloads(NAMESPACE), {}),
                            (lambda k: k.list_workloads(NAMESPACE), {"GET": 404})],
    "Kube.apply_workload_status": [(lambda k: k.apply_workload_status(check_state(
        "w", NAMESPACE, "Ready", "a slot", "2026-01-01T00:00:00Z")), {})],
    "Kube.secret_value": [(lambda k: k.secret_value(NAMESPACE, "s", "token"), {})],
    "Kube.pod_log": [(lambda k: k.pod_log(NAMESPACE, "p", "c"), {})],
    "Kube.apply": [(lambda k, kind=kind, version=version: k.apply(_obj(kind, version)), {})
                   for kind, version in (("Deployment", "apps/v1"), ("Service", "v1"),
                                         ("NetworkPolicy", "networking.k8s.io/v1"))],
    "Kube.create": [(lambda k, kind=kind, version=version: k.create(_obj(kind, version)),
                     status)
                    for kind, version in (("ConfigMap", "v1"), ("Job", "batch/v1"))
                    for status in ({}, {"POST": 409})],  # 409: the one there is read
    "Kube.read_configmap": [(lambda k: k.read_configmap(NAMESPACE, "x"), {})],
    "Kube.delete_configmap": [(lambda k: k.delete_configmap(NAMESPACE, "x"), {})],
    "Kube.delete_job": [(lambda k: k.delete_job(NAMESPACE, "x"), {})],
    "Leases.read": [(lambda lease: lease.read(), {})],
    "Leases.write": [(lambda lease: lease.write("create", {}), {}),
                     (lambda lease: lease.write("update", {}), {})],
    "AdmissionChecks.apply_status": [
        (lambda checks: checks.apply_status(active("2026-01-01T00:00:00Z")), status)
        for status in ({}, {"PATCH": 404})],  # 404: no such check (Kueue not installed)
}


def api_methods() -> set[str]:
    """Every public method of Kube, Leases and AdmissionChecks, as ``Class.method``."""
    return {f"{cls.__name__}.{name}" for cls in (Kube, Leases, AdmissionChecks)
            for name, _ in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_")}


def made(server: Recorder, method: str) -> set[Rule]:
    """The rights the runs of ``method`` asked of the server."""
    shell: object = (Kube(api_client(server)) if method.startswith("Kube.")
                     else AdmissionChecks(api_client(server))
                     if method.startswith("AdmissionChecks.")
                     else Leases(NAMESPACE, "proctor", api_client(server)))
    for call, status in RUNS[method]:
        server.status = status
        call(shell)
    return set(server.rights)


def test_every_api_method_declares_its_rights_and_is_run_here() -> None:
    assert set(NEEDS) == api_methods(), "declare it with @needs in k8s/machinery/api.py"
    assert set(RUNS) == api_methods(), "add a run of it to RUNS above"


@pytest.mark.parametrize("method", sorted(RUNS))
def test_a_method_makes_exactly_the_calls_it_declares(server: Recorder, method: str) -> None:
    assert made(server, method) == set(NEEDS[method])


def test_a_call_the_declaration_lacks_is_found(server: Recorder) -> None:
    # Kube.create's 409 reads the object there: a declaration without that get is short.
    declared = set(NEEDS["Kube.create"]) - {("batch", "jobs", "get")}
    assert made(server, "Kube.create") - declared == {("batch", "jobs", "get")}


def test_the_declarations_are_the_rights_of_each_class() -> None:
    assert needed(Leases) == {("coordination.k8s.io", "leases", verb)
                              for verb in ("get", "create", "update")}
    assert ("", "pods/log", "get") in needed(Kube)
    assert not needed(Kube) & needed(Leases)


@pytest.mark.parametrize(("method", "url", "content_type", "expected"), [
    ("GET", "/api/v1/namespaces/a/pods/p/log?container=c", "", {("", "pods/log", "get")}),
    ("GET", "/api/v1/namespaces/a/configmaps?labelSelector=x", "",
     {("", "configmaps", "list")}),
    ("GET", "/apis/batch/v1/namespaces/a/jobs?watch=true", "", {("batch", "jobs", "watch")}),
    ("PATCH", "/apis/proctor.dev/v1alpha1/namespaces/a/evaluations/e/status",
     "application/merge-patch+json", {("proctor.dev", "evaluations/status", "patch")}),
    ("PATCH", "/apis/apps/v1/namespaces/a/deployments/d?fieldManager=proctor",
     "application/apply-patch+yaml",
     {("apps", "deployments", "patch"), ("apps", "deployments", "create")}),
    ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/c", "",
     {("apiextensions.k8s.io", "customresourcedefinitions", "get")}),
])
def test_a_request_is_the_right_the_api_server_asks(method: str, url: str, content_type: str,
                                                    expected: set[Rule]) -> None:
    assert right(method, url, content_type) == expected
