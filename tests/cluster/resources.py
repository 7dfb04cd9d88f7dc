"""The kinds the emulator serves: built-ins, and custom resources from CRDs.

Each ``ResourceType`` says how the apiserver treats a kind: scope, its ``status``
subresource (a main-resource write leaves status alone, a ``/status`` write changes only
status), whether ``metadata.generation`` counts spec changes, and, for custom resources, the
OpenAPI schema used to prune, default and validate (CEL rules included) as the apiserver does.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    subresources: frozenset[str] = frozenset()
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    generation: bool = False
    """metadata.generation is set and bumped on spec changes."""
    custom: bool = False
    schema: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)
    """openAPIV3Schema of a custom resource."""
    printer_columns: tuple[Mapping[str, Any], ...] = field(default=(), compare=False,
                                                           hash=False)
    """additionalPrinterColumns of a custom resource (its server-side table)."""
    storage: tuple[str, str] | None = None
    """(group, plural) whose objects this kind shows in another form (events.k8s.io)."""
    to_storage: Callable[[dict[str, Any]], dict[str, Any]] | None = field(
        default=None, compare=False, hash=False)
    from_storage: Callable[[dict[str, Any]], dict[str, Any]] | None = field(
        default=None, compare=False, hash=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        """Where its objects are kept: (group, plural), whatever the version."""
        return self.storage or (self.group, self.plural)

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


# --- events.k8s.io/v1 is a view of core v1 Events --------------------------------------------

_EVENT_FIELDS = [("regarding", "involvedObject"), ("note", "message"),
                 ("reportingController", "reportingComponent"),
                 ("deprecatedSource", "source"), ("deprecatedFirstTimestamp", "firstTimestamp"),
                 ("deprecatedLastTimestamp", "lastTimestamp"), ("deprecatedCount", "count")]


def _event_to_core(obj: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in obj.items() if k not in dict(_EVENT_FIELDS)}
    for new, old in _EVENT_FIELDS:
        if new in obj:
            out[old] = obj[new]
    out.update(apiVersion="v1", kind="Event")
    return out


def _event_from_core(obj: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in obj.items() if k not in {old for _, old in _EVENT_FIELDS}}
    for new, old in _EVENT_FIELDS:
        if obj.get(old) is not None:
            out[new] = obj[old]
    out.update(apiVersion="events.k8s.io/v1", kind="Event")
    return out


def _core(plural: str, kind: str, **kw: Any) -> ResourceType:
    return ResourceType("", "v1", plural, kind, singular=kind.lower(), **kw)


BUILTINS: tuple[ResourceType, ...] = (
    _core("namespaces", "Namespace", namespaced=False, short_names=("ns",),
          subresources=frozenset({"status", "finalize"})),
    _core("nodes", "Node", namespaced=False, short_names=("no",),
          subresources=frozenset({"status"})),
    _core("pods", "Pod", short_names=("po",), categories=("all",),
          subresources=frozenset({"status", "log", "eviction", "binding", "ephemeralcontainers"})),
    _core("configmaps", "ConfigMap", short_names=("cm",)),
    _core("secrets", "Secret"),
    _core("services", "Service", short_names=("svc",), categories=("all",),
          subresources=frozenset({"status"})),
    _core("serviceaccounts", "ServiceAccount", short_names=("sa",)),
    _core("events", "Event", short_names=("ev",)),
    _core("persistentvolumeclaims", "PersistentVolumeClaim", short_names=("pvc",),
          subresources=frozenset({"status"})),
    ResourceType("batch", "v1", "jobs", "Job", singular="job", categories=("all",),
                 subresources=frozenset({"status"}), generation=True),
    ResourceType("apps", "v1", "deployments", "Deployment", singular="deployment",
                 short_names=("deploy",), categories=("all",),
                 subresources=frozenset({"status", "scale"}), generation=True),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", singular="lease"),
    ResourceType("events.k8s.io", "v1", "events", "Event", singular="event",
                 short_names=("ev",), storage=("", "events"),
                 to_storage=_event_to_core, from_storage=_event_from_core),
    ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                 "CustomResourceDefinition", singular="customresourcedefinition",
                 namespaced=False, short_names=("crd", "crds"),
                 subresources=frozenset({"status"}), generation=True),
)


def crd_types(crd: Mapping[str, Any]) -> list[ResourceType]:
    """The served versions of a CustomResourceDefinition, as resource types."""
    spec, names = crd["spec"], crd["spec"]["names"]
    types = []
    for version in spec.get("versions", []):
        if not version.get("served", True):
            continue
        subresources = set((version.get("subresources") or {}).keys())
        types.append(ResourceType(
            spec["group"], version["name"], names["plural"], names["kind"],
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            subresources=frozenset(subresources), singular=names.get("singular") or
            names["kind"].lower(), short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()), generation=True, custom=True,
            schema=copy.deepcopy((version.get("schema") or {}).get("openAPIV3Schema")),
            printer_columns=tuple(copy.deepcopy(version.get("additionalPrinterColumns") or []))))
    return types


# --- Pruning of custom resources ------------------------------------------------------------


def prune(value: Any, schema: Mapping[str, Any] | None) -> Any:
    """Drop the fields a structural schema does not know, as the apiserver does."""
    if schema is None or schema.get("x-kubernetes-preserve-unknown-fields"):
        return value
    if isinstance(value, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        if properties is None and additional is None:
            return value if schema.get("type") != "object" else {}
        out = {}
        for key, item in value.items():
            if properties and key in properties:
                out[key] = prune(item, properties[key])
            elif isinstance(additional, Mapping):
                out[key] = prune(item, additional)
            elif additional is True:
                out[key] = item
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [prune(item, schema["items"]) for item in value]
    return value


def prune_object(obj: dict[str, Any], schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """Pruning of a whole custom resource: apiVersion, kind and metadata always stay."""
    if schema is None:
        return obj
    kept = {k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj}
    rest = {k: v for k, v in obj.items() if k not in kept}
    return {**kept, **prune(rest, schema)}


def unknown_fields(value: Any, schema: Mapping[str, Any] | None, path: str = "") -> list[str]:
    """The fields ``prune`` would drop, by their path (``spec.dataset.nmae``): what
    ``fieldValidation=Strict`` refuses."""
    if schema is None or schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    found: list[str] = []
    if isinstance(value, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if properties and key in properties:
                found += unknown_fields(item, properties[key], where)
            elif isinstance(additional, Mapping):
                found += unknown_fields(item, additional, where)
            elif additional is not True and (properties is not None or additional is not None
                                             or schema.get("type") == "object"):
                found.append(where)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            found += unknown_fields(item, schema["items"], f"{path}[{index}]")
    return found
