"""Discovery and OpenAPI v3 as the apiserver serves them, from the kinds the store knows.

Pure functions of the kinds served (CRDs add theirs once created):

* legacy discovery: ``/api`` (APIVersions), ``/api/v1`` (groupVersion ``v1``), ``/apis``
  (APIGroupList), ``/apis/<group>`` and ``/apis/<group>/<version>`` (APIResourceList, with
  each kind's subresources as ``<plural>/<sub>``, which carry no short names);
* OpenAPI v3: ``/openapi/v3`` lists one document per group-version, each with a path per
  resource (its operations name their kind in ``x-kubernetes-group-version-kind``, and
  create/update/patch take ``fieldValidation``: kubectl then leaves validation to the
  server) and one schema per kind: a CRD's own ``openAPIV3Schema`` (``kubectl explain``),
  an open object for a built-in kind (see tests/cluster/README.md).

Aggregated discovery (``apidiscovery.k8s.io/v2``) is not served: clients that ask for it
get the legacy documents, and fall back to them, as with an older apiserver.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import orjson

from cluster.resources import VERBS, ResourceType

Obj = dict[str, Any]
SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "scale": ["get", "patch", "update"],
                     "log": ["get"], "binding": ["create"], "eviction": ["create"],
                     "ephemeralcontainers": ["get", "patch", "update"], "finalize": ["update"]}
_OBJECT_META = {"type": "object", "description": (
    "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/"
    "sig-architecture/api-conventions.md#metadata")}


def _sorted(types: Iterable[ResourceType]) -> list[ResourceType]:
    """In a stable order: by group, version and plural."""
    return sorted(types, key=lambda rt: (rt.group, rt.version, rt.plural))


def api_versions() -> Obj:
    """``/api``."""
    return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
        {"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]}


def _group(name: str, versions: list[str]) -> Obj:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def _versions(types: Iterable[ResourceType]) -> dict[str, list[str]]:
    """Group -> its versions (the first is preferred), core left out."""
    found: dict[str, list[str]] = {}
    for rt in _sorted(types):
        if rt.group and rt.version not in found.setdefault(rt.group, []):
            found[rt.group].append(rt.version)
    return found


def group_list(types: Iterable[ResourceType]) -> Obj:
    """``/apis``."""
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group(g, v) for g, v in _versions(types).items()]}


def api_group(types: Iterable[ResourceType], name: str) -> Obj | None:
    """``/apis/<group>`` (None: no such group)."""
    versions = _versions(types).get(name)
    return None if not versions else {"kind": "APIGroup", "apiVersion": "v1",
                                      **_group(name, versions)}


def resource_list(types: Iterable[ResourceType], group: str, version: str) -> Obj | None:
    """``/api/v1`` or ``/apis/<group>/<version>`` (None: not served)."""
    resources = []
    for rt in _sorted(types):
        if (rt.group, rt.version) != (group, version):
            continue
        resources.append({"name": rt.plural, "singularName": rt.singular or rt.kind.lower(),
                          "namespaced": rt.namespaced, "kind": rt.kind, "verbs": list(VERBS),
                          **({"shortNames": list(rt.short_names)} if rt.short_names else {}),
                          **({"categories": list(rt.categories)} if rt.categories else {})})
        for sub in sorted(rt.subresources):
            resources.append({"name": f"{rt.plural}/{sub}", "singularName": "",
                              "namespaced": rt.namespaced, "kind": rt.kind,
                              "verbs": SUBRESOURCE_VERBS.get(sub, ["get"])})
    if not resources:
        return None
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": resources}


def serve_discovery(types: Iterable[ResourceType], path: str) -> Obj | None:
    """The discovery document at ``path``, or None when ``path`` is not one (or not served)."""
    parts = [p for p in path.split("/") if p]
    if parts == ["api"]:
        return api_versions()
    if parts == ["apis"]:
        return group_list(types)
    if len(parts) == 2 and parts[0] == "api":
        return resource_list(types, "", parts[1])
    if len(parts) == 2 and parts[0] == "apis":
        return api_group(types, parts[1])
    if len(parts) == 3 and parts[0] == "apis":
        return resource_list(types, parts[1], parts[2])
    return None


# --- OpenAPI v3 ------------------------------------------------------------------------------


def _prefix(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def schema_name(rt: ResourceType) -> str:
    """The kind's schema name, as the apiserver names it (``dev.proctor.v1alpha1.Evaluation``
    for a CRD's group; ``io.k8s.api.batch.v1.Job``-like for built-ins)."""
    if rt.custom:
        return ".".join([*reversed(rt.group.split(".")), rt.version, rt.kind])
    return f"io.k8s.api.{rt.group.split('.')[0] or 'core'}.{rt.version}.{rt.kind}"


def _gvk(rt: ResourceType) -> Obj:
    return {"group": rt.group, "version": rt.version, "kind": rt.kind}


def _operation(rt: ResourceType, action: str, writes: bool) -> Obj:
    params = [{"name": "dryRun", "in": "query", "schema": {"type": "string"}},
              {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
              {"name": "fieldValidation", "in": "query", "schema": {"type": "string"},
               "description": "Ignore, Warn or Strict: what the server does with an object "
                              "that names unknown or duplicate fields."}] if writes else []
    ref = {"$ref": f"#/components/schemas/{schema_name(rt)}"}
    return {"operationId": f"{action}{rt.kind}", "parameters": params,
            "responses": {"200": {"description": "OK",
                                  "content": {"application/json": {"schema": ref}}}},
            "x-kubernetes-action": action, "x-kubernetes-group-version-kind": _gvk(rt)}


def _paths(rt: ResourceType) -> Obj:
    base = "/" + _prefix(rt.group, rt.version)
    scope = f"{base}/namespaces/{{namespace}}" if rt.namespaced else base
    return {
        f"{scope}/{rt.plural}": {"get": _operation(rt, "list", False),
                                 "post": _operation(rt, "post", True)},
        f"{scope}/{rt.plural}/{{name}}": {"get": _operation(rt, "get", False),
                                          "put": _operation(rt, "put", True),
                                          "patch": _operation(rt, "patch", True),
                                          "delete": _operation(rt, "delete", False)},
    }


def _kind_schema(rt: ResourceType) -> Obj:
    if rt.custom and rt.schema:
        schema = orjson.loads(orjson.dumps(rt.schema))  # a copy, plain JSON
        properties = schema.setdefault("properties", {})
        properties["metadata"] = dict(_OBJECT_META)
        for field in ("apiVersion", "kind"):
            properties.setdefault(field, {"type": "string"})
    else:
        schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                  "description": f"{rt.kind} (its fields are not described by the test "
                                 f"cluster)."}
    return {**schema, "x-kubernetes-group-version-kind": [_gvk(rt)]}


def openapi_document(types: Iterable[ResourceType], group: str, version: str) -> Obj | None:
    """One group-version's OpenAPI v3 document (None: not served)."""
    kinds = [rt for rt in _sorted(types) if (rt.group, rt.version) == (group, version)]
    if not kinds:
        return None
    paths: Obj = {}
    for rt in kinds:
        paths.update(_paths(rt))
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "unversioned"},
            "paths": paths,
            "components": {"schemas": {schema_name(rt): _kind_schema(rt) for rt in kinds}}}


def openapi_index(types: Iterable[ResourceType]) -> Obj:
    """``/openapi/v3``: where each group-version's document is (its hash names its content,
    as the apiserver's does, so that clients may cache it)."""
    types = list(types)
    found = {}
    for group, version in sorted({(rt.group, rt.version) for rt in types}):
        body = orjson.dumps(openapi_document(types, group, version),
                            option=orjson.OPT_SORT_KEYS)
        digest = hashlib.sha512(body).hexdigest().upper()[:128]
        path = _prefix(group, version)
        found[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": found}


def serve_openapi(types: Iterable[ResourceType], path: str) -> Obj | None:
    """The OpenAPI v3 document at ``path`` (``/openapi/v3...``), or None."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] != ["openapi", "v3"]:
        return None
    rest = parts[2:]
    if not rest:
        return openapi_index(types)
    if len(rest) == 2 and rest[0] == "api":
        return openapi_document(types, "", rest[1])
    if len(rest) == 3 and rest[0] == "apis":
        return openapi_document(types, rest[1], rest[2])
    return None


def served_paths(types: Iterable[ResourceType]) -> list[str]:
    """``/``: the paths the server serves."""
    types = list(types)
    paths = {"/api", "/api/v1", "/apis", "/openapi/v3", "/version", "/healthz", "/livez",
             "/readyz"}
    for group, versions in _versions(types).items():
        paths.add(f"/apis/{group}")
        paths.update(f"/apis/{group}/{v}" for v in versions)
    return sorted(paths)

