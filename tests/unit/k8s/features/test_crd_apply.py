"""`proctor crds apply` (proctor.k8s.features.crds), what the chart's CRD hook runs.

The pure parts directly; the command end to end against a loopback HTTP server that keeps
CRDs the way the API server's server-side apply does for a single field manager (the
applied object replaces the stored one), recording each request. The real API server's
side, a changed CRD put back, is tests/cluster/test_cluster_crds.py.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from proctor.k8s.features.crds import (
    apply_body,
    apply_path,
    crd_names,
    describe_change,
    packaged_crds,
    takeover_patch,
)
from support.paths import ROOT

PREFIX = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"


def test_the_packaged_crds_are_crds_folder() -> None:
    """What the image applies is what crds/ holds (a stale install would differ)."""
    assert packaged_crds() == [yaml.safe_load(p.read_text())
                               for p in sorted((ROOT / "crds").glob("*.yaml"))]
    assert crd_names() == ["agentundertests.proctor.dev", "evaluations.proctor.dev"]


def test_the_apply_body_is_the_crd_without_what_the_server_owns() -> None:
    for crd in packaged_crds():
        held = copy.deepcopy(crd)
        held["metadata"].update(resourceVersion="7", uid="u", managedFields=[{}])
        held["status"] = {"storedVersions": ["v1alpha1"]}
        body = apply_body(held)
        assert body == {"apiVersion": "apiextensions.k8s.io/v1",
                        "kind": "CustomResourceDefinition",
                        "metadata": {"name": crd["metadata"]["name"]}, "spec": crd["spec"]}
        assert kubernetes_validate.validate(body, "1.35", strict=True) == "1.35"
        assert apply_path(body["metadata"]["name"]) == PREFIX + body["metadata"]["name"]


def _changed(crd: dict[str, Any], **version: Any) -> dict[str, Any]:
    changed = copy.deepcopy(crd)
    changed["spec"]["versions"][0].update(version)
    return changed


def test_describe_change_says_what_an_apply_did() -> None:
    crd = apply_body(packaged_crds()[1])
    name = crd["metadata"]["name"]
    assert describe_change(name, None, crd) == f"Created CustomResourceDefinition {name}"
    assert describe_change(name, crd, copy.deepcopy(crd)) == \
        f"Left CustomResourceDefinition {name} unchanged"
    assert describe_change(name, crd, _changed(crd, schema={"openAPIV3Schema": {}})) == \
        f"Updated CustomResourceDefinition {name}: version v1alpha1: schema"
    beta = copy.deepcopy(crd)
    beta["spec"]["versions"].append({**crd["spec"]["versions"][0], "name": "v1beta1"})
    beta["spec"]["names"] = {**crd["spec"]["names"], "shortNames": ["ev"]}
    assert describe_change(name, crd, beta) == (
        f"Updated CustomResourceDefinition {name}: version v1beta1 added; spec.names")
    assert describe_change(name, beta, crd).endswith("version v1beta1 removed; spec.names")


def _entry(manager: str, operation: str, fields: dict[str, Any], **more: str) -> dict[str, Any]:
    return {"manager": manager, "operation": operation, "apiVersion": "apiextensions.k8s.io/v1",
            "fieldsType": "FieldsV1", "fieldsV1": fields, **more}


def test_the_takeover_makes_proctor_the_one_manager_of_the_spec() -> None:
    """What Helm's create or an edit set is moved to proctor's Apply entry, so that a
    field a new release drops is removed; their metadata and the status stay theirs."""
    status = _entry("kube-apiserver", "Update", {"f:status": {"f:conditions": {}}},
                    subresource="status")
    helm = _entry("helm", "Update", {"f:metadata": {"f:labels": {"f:team": {}}},
                                     "f:spec": {"f:group": {}, "f:scope": {}}})
    edit = _entry("kubectl-edit", "Update", {"f:spec": {"f:names": {"f:shortNames": {}}}})
    ours = _entry("proctor", "Apply", {"f:spec": {"f:group": {}, "f:versions": {}}})
    held = {"metadata": {"name": "x", "resourceVersion": "42",
                         "managedFields": [status, helm, edit, ours]}}
    test, replace = takeover_patch(held)
    assert test == {"op": "test", "path": "/metadata/resourceVersion", "value": "42"}
    assert replace["op"] == "replace" and replace["path"] == "/metadata/managedFields"
    assert replace["value"] == [
        status, _entry("helm", "Update", {"f:metadata": {"f:labels": {"f:team": {}}}}),
        _entry("proctor", "Apply", {"f:spec": {"f:group": {}, "f:versions": {}, "f:scope": {},
                                               "f:names": {"f:shortNames": {}}}})]
    after = {"metadata": {**held["metadata"], "managedFields": replace["value"]}}
    assert takeover_patch(after) is None  # nothing left to take
    assert takeover_patch({"metadata": {"resourceVersion": "1"}}) is None


# --- the command, against a loopback server ---------------------------------------------------


@dataclass
class CrdServer:
    """CRDs by name, the requests seen, and names whose apply is refused (422)."""

    stored: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, list[str]], str]] = field(default_factory=list)
    refuse: set[str] = field(default_factory=set)


def _handler(state: CrdServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _name(self) -> tuple[str, dict[str, list[str]]]:
            url = urllib.parse.urlsplit(self.path)
            assert url.path.startswith(PREFIX), url.path
            return url.path.removeprefix(PREFIX), urllib.parse.parse_qs(url.query)

        def do_GET(self) -> None:
            name, query = self._name()
            state.requests.append(("GET", name, query, ""))
            if name not in state.stored:
                self._answer(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
                return
            self._answer(200, state.stored[name])

        def do_PATCH(self) -> None:
            name, query = self._name()
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append(("PATCH", name, query, self.headers["Content-Type"]))
            if self.headers["Content-Type"] == "application/json-patch+json":
                state.stored[name]["metadata"]["managedFields"] = body[1]["value"]
                self._answer(200, state.stored[name])
                return
            if name in state.refuse:
                self._answer(422, {"kind": "Status", "code": 422, "reason": "Invalid",
                                   "message": f"{name} is invalid: status.storedVersions"})
                return
            if "dryRun" not in query:
                state.stored[name] = body
            self._answer(200, body)

    return Handler


@pytest.fixture
def crd_server(tmp_path: Path) -> Iterator[tuple[CrdServer, Path]]:
    state = CrdServer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = _kubeconfig(tmp_path, f"http://127.0.0.1:{server.server_port}")
    try:
        yield state, kubeconfig
    finally:
        server.shutdown()
        server.server_close()


def _kubeconfig(folder: Path, server: str) -> Path:
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "loopback",
        "clusters": [{"name": "loopback", "cluster": {"server": server}}],
        "users": [{"name": "me", "user": {"token": "t"}}],
        "contexts": [{"name": "loopback", "context": {"cluster": "loopback", "user": "me"}}]}))
    return path


def crds_apply(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}
    return subprocess.run([sys.executable, "-m", "proctor.cli.main", "crds", "apply", *args],
                          capture_output=True, text=True, timeout=60,
                          env={**env, "KUBECONFIG": str(kubeconfig)})


def test_crds_apply_creates_then_updates_only_what_changed(
        crd_server: tuple[CrdServer, Path]) -> None:
    state, kubeconfig = crd_server
    first = crds_apply(kubeconfig)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [f"Created CustomResourceDefinition {name}"
                                         for name in crd_names()]
    patches = [r for r in state.requests if r[0] == "PATCH"]
    assert [(name, query, kind) for _, name, query, kind in patches] == [
        (name, {"fieldManager": ["proctor"], "force": ["true"]},
         "application/apply-patch+yaml") for name in crd_names()]
    assert list(state.stored.values()) == [apply_body(c) for c in packaged_crds()]

    state.stored["evaluations.proctor.dev"]["spec"]["versions"][0]["schema"] = {}
    again = crds_apply(kubeconfig)
    assert again.stdout.splitlines() == [
        "Left CustomResourceDefinition agentundertests.proctor.dev unchanged",
        "Updated CustomResourceDefinition evaluations.proctor.dev: version v1alpha1: schema"]
    assert list(state.stored.values()) == [apply_body(c) for c in packaged_crds()]


def test_a_dry_run_changes_nothing(crd_server: tuple[CrdServer, Path]) -> None:
    state, kubeconfig = crd_server
    done = crds_apply(kubeconfig, "--dry-run")
    assert done.returncode == 0 and state.stored == {}
    assert done.stdout.splitlines()[0].endswith("(dry run)")
    assert all(r[2].get("dryRun") == ["All"] for r in state.requests if r[0] == "PATCH")


def test_a_refused_crd_is_one_line_after_the_ones_applied(
        crd_server: tuple[CrdServer, Path]) -> None:
    state, kubeconfig = crd_server
    state.refuse.add("evaluations.proctor.dev")
    done = crds_apply(kubeconfig)
    assert done.returncode == 3
    assert done.stdout.splitlines() == [
        "Created CustomResourceDefinition agentundertests.proctor.dev"]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("proctor: error: the cluster refused CustomResourceDefinition "
                           "evaluations.proctor.dev: ")
    assert line.endswith("(422): evaluations.proctor.dev is invalid: status.storedVersions")


def test_no_cluster_is_bad_input_and_an_unreachable_one_not_run(tmp_path: Path) -> None:
    missing = crds_apply(tmp_path / "absent")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.startswith("proctor: error: no cluster to apply the CRDs to")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    closed = crds_apply(_kubeconfig(tmp_path, f"http://127.0.0.1:{port}"))
    assert closed.returncode == 3 and len(closed.stderr.strip().splitlines()) == 1
    assert "cannot reach the cluster" in closed.stderr


def test_what_helm_created_is_taken_over_before_the_apply(
        crd_server: tuple[CrdServer, Path]) -> None:
    state, kubeconfig = crd_server
    for crd in packaged_crds():
        created = apply_body(crd)
        created["metadata"].update(resourceVersion="5", managedFields=[
            _entry("helm", "Update", {"f:spec": {"f:group": {}}})])
        state.stored[crd["metadata"]["name"]] = created
    done = crds_apply(kubeconfig)
    assert done.returncode == 0, done.stderr
    name = "evaluations.proctor.dev"
    assert [(method, kind) for method, held, _, kind in state.requests if held == name] == [
        ("GET", ""), ("PATCH", "application/json-patch+json"),
        ("PATCH", "application/apply-patch+yaml")]
    assert done.stdout.splitlines()[1] == f"Left CustomResourceDefinition {name} unchanged"
