"""`proctor crds apply`: the CRDs packaged with proctor (crds/), applied server-side.

Helm installs a chart's crds/ once and never upgrades them; the chart's pre-install and
pre-upgrade hook runs this instead, in the image of the release being installed, so the
CRDs on the cluster are always the ones the operator was built with. Server-side apply
with field manager ``proctor`` and ``force``: the fields the CRD files set are taken over
from whoever set them before (Helm's create, a `kubectl apply`), so the files win.

The pure parts (which CRDs, each apply's body and path, the takeover of other managers'
fields, what changed) are here; the calls are in proctor.k8s.machinery.api.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from importlib import resources

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from urllib3.exceptions import HTTPError

from proctor.core.exits import BadInput, NotRun
from proctor.k8s.machinery.api import apply_crd, describe, load_config, patch_crd, read_crd
from proctor.k8s.machinery.objects import MutableObj, Obj

FIELD_MANAGER = "proctor"
CRD_API = "apiextensions.k8s.io/v1"


def packaged_crds() -> list[MutableObj]:
    """The CustomResourceDefinitions shipped in the package (crds/), by file name."""
    folder = resources.files("proctor") / "crds"
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".yaml")),
                   key=lambda f: f.name)
    return [yaml.safe_load(f.read_text(encoding="utf-8")) for f in files]


def crd_names() -> list[str]:
    """The names of proctor's CRDs: what the hook's ClusterRole names in resourceNames."""
    return [crd["metadata"]["name"] for crd in packaged_crds()]


def apply_body(crd: Obj) -> MutableObj:
    """What is sent: the CRD's identity, labels, annotations and spec. No status (the API
    server owns it) and no server-set metadata (an apply must not carry a resourceVersion
    or managedFields)."""
    meta = crd["metadata"]
    kept = {k: meta[k] for k in ("name", "labels", "annotations") if meta.get(k)}
    return {"apiVersion": CRD_API, "kind": "CustomResourceDefinition", "metadata": kept,
            "spec": crd["spec"]}


def apply_path(name: str) -> str:
    """The CRD's URL path; the apply's query is in api.apply_crd."""
    return f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"


def _union(ours: MutableObj, theirs: MutableObj) -> MutableObj:
    """Two managedFields field sets (fieldsV1 trees) as one."""
    merged = dict(ours)
    for key, value in theirs.items():
        merged[key] = _union(merged[key], value) if key in merged else value
    return merged


def takeover_patch(held: Obj) -> list[MutableObj] | None:
    """A JSON patch making ``proctor`` the one manager of the CRD's spec, or None if it is.

    Server-side apply removes a field the applied files no longer set only where no other
    manager also owns it; and Helm's create (crds/ on install), a `kubectl apply`, or an
    edit by hand own the fields they set. So before applying, their ownership of spec
    moves to proctor's Apply entry (as `kubectl apply --server-side` moves a client-side
    apply's), and a field a new release drops is then removed from the cluster. Their
    other fields (metadata) stay theirs; the status subresource's entries are untouched.
    The test of resourceVersion makes the patch fail if the CRD changed since it was read.
    """
    entries = held["metadata"].get("managedFields") or []
    kept: list[MutableObj] = []
    ours: MutableObj = {}
    moved = False
    for entry in entries:
        fields = entry.get("fieldsV1") or {}
        if entry.get("subresource"):
            kept.append(entry)
        elif entry.get("manager") == FIELD_MANAGER and entry.get("operation") == "Apply":
            ours = _union(ours, fields)
        elif "f:spec" in fields:
            moved = True
            ours = _union(ours, {"f:spec": fields["f:spec"]})
            rest = {k: v for k, v in fields.items() if k != "f:spec"}
            if rest:
                kept.append({**entry, "fieldsV1": rest})
        else:
            kept.append(entry)
    if not moved:
        return None
    mine = {"manager": FIELD_MANAGER, "operation": "Apply", "apiVersion": CRD_API,
            "fieldsType": "FieldsV1", "fieldsV1": ours}
    return [{"op": "test", "path": "/metadata/resourceVersion",
             "value": held["metadata"]["resourceVersion"]},
            {"op": "replace", "path": "/metadata/managedFields", "value": [*kept, mine]}]


def _version_changes(before: list[MutableObj], after: list[MutableObj]) -> list[str]:
    old = {v["name"]: v for v in before}
    new = {v["name"]: v for v in after}
    changes = [f"version {name} added" for name in new if name not in old]
    changes += [f"version {name} removed" for name in old if name not in new]
    for name in (n for n in new if n in old and new[n] != old[n]):
        fields = sorted(k for k in old[name].keys() | new[name].keys()
                        if old[name].get(k) != new[name].get(k))
        changes.append(f"version {name}: {', '.join(fields)}")
    return changes


def describe_change(name: str, before: Obj | None,
                    after: Obj) -> str:
    """One log line saying what an apply did to a CRD: created it, changed which parts of
    its spec (by version, and which of a version's fields), or nothing."""
    if before is None:
        return f"Created CustomResourceDefinition {name}"
    old, new = before.get("spec") or {}, after.get("spec") or {}
    changes = _version_changes(old.get("versions") or [], new.get("versions") or [])
    changes += [f"spec.{key}" for key in sorted(old.keys() | new.keys())
                if key != "versions" and old.get(key) != new.get(key)]
    if not changes:
        return f"Left CustomResourceDefinition {name} unchanged"
    return f"Updated CustomResourceDefinition {name}: {'; '.join(changes)}"


def apply_packaged(*, dry_run: bool = False) -> Iterator[str]:
    """`proctor crds apply`: apply each packaged CRD to the cluster of the kubeconfig (or
    the pod's service account), yielding a line saying what changed as each is done. No
    cluster configured is bad input (exit 2); one that does not answer, or refuses, is
    NotRun (exit 3), after the lines of the CRDs already applied."""
    try:
        load_config()
    except (ConfigException, OSError, ValueError) as exc:  # ValueError: a junk kubeconfig
        where = os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise BadInput(f"no cluster to apply the CRDs to (kubeconfig {where}): {exc}") from None
    with client.ApiClient() as api_client:
        for crd in packaged_crds():
            name = crd["metadata"]["name"]
            try:
                before = read_crd(api_client, name)
                takeover = None if before is None or dry_run else takeover_patch(before)
                if takeover is not None:
                    patch_crd(api_client, apply_path(name), takeover)
                after = apply_crd(api_client, apply_path(name), apply_body(crd),
                                  field_manager=FIELD_MANAGER, dry_run=dry_run)
            except ApiException as exc:
                raise NotRun(f"the cluster refused CustomResourceDefinition {name}: "
                             f"{describe(exc)}") from None
            except HTTPError as exc:
                raise NotRun(f"cannot reach the cluster: {exc}") from None
            line = describe_change(name, before, after)
            yield f"{line} (dry run)" if dry_run else line
