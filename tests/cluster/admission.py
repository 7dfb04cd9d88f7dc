"""Per-kind defaults and validation, as the apiserver applies them on writes.

Custom resources: pruned to their schema, structurally defaulted, validated with the
schema and its CEL rules (``proctor.formats.manifest``'s validator), transition rules on updates.
Built-in kinds: validated against the upstream OpenAPI schema (kubernetes-validate, unknown
fields allowed as with ``fieldValidation=Warn``), plus the rules that matter here: Job names
fit a label, Job templates and pod specs do not change, immutable ConfigMaps stay so,
ConfigMaps hold at most 1 MiB. Defaults follow the apiserver's (a Job's selector and
controller-uid labels, a pod's terminationMessagePath, imagePullPolicy, qosClass, ...).
"""

from __future__ import annotations

import base64
import copy
import functools
import re
from collections.abc import Mapping
from typing import Any

import celpy

from cluster.errors import ApiError
from cluster.resources import ResourceType, prune_object
from cluster.store import CONFIGMAP_MAX, validate_labels
from proctor.formats import manifest

Obj = dict[str, Any]
KUBERNETES_VERSION = "1.35"
"""Schema version that built-in kinds are validated against."""


# --- Custom resources -----------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def _validator(schema_json: str) -> Any:
    import json

    schema = json.loads(schema_json)
    properties = {k: v for k, v in (schema.get("properties") or {}).items() if k != "metadata"}
    root = manifest.to_json_schema({**schema, "properties": properties})
    root["properties"]["metadata"] = {"type": "object"}
    for key in ("apiVersion", "kind"):
        root["properties"].setdefault(key, {"type": "string"})
    return manifest._Validator(root)


def _transition_problems(schema: Mapping[str, Any], old: Any, new: Any,
                         path: str) -> list[tuple[str, str]]:
    """Rules that read ``oldSelf``, where both the old and the new value exist."""
    found = []
    for rule in schema.get("x-kubernetes-validations", []):
        if not manifest.is_transition_rule(rule["rule"]):
            continue
        try:
            held = manifest._cel_program(rule["rule"]).evaluate(
                {"self": celpy.json_to_cel(new), "oldSelf": celpy.json_to_cel(old)})
        except celpy.CELEvalError:
            held = False
        if not held:
            found.append((path, " ".join(str(rule.get("message") or rule["rule"]).split())))
    if isinstance(old, dict) and isinstance(new, dict):
        for name, prop in (schema.get("properties") or {}).items():
            if name in old and name in new:
                found += _transition_problems(prop, old[name], new[name], f"{path}.{name}"
                                              if path else name)
    return found


def admit_custom(rt: ResourceType, obj: Obj, old: Obj | None) -> Obj:
    import json

    name = obj["metadata"].get("name", "")
    validate_labels(rt.kind, rt.group, name, obj["metadata"])
    if old is None and rt.has_status:
        obj.pop("status", None)  # status comes only through /status
    schema = rt.schema
    if not schema:
        return obj
    obj = prune_object(obj, schema)
    body = {k: v for k, v in obj.items() if k != "metadata"}
    obj = {**manifest.apply_defaults(body, schema), "metadata": obj["metadata"]}
    validator = _validator(json.dumps(schema, sort_keys=True))
    causes = [(path, message) for error in validator.iter_errors(obj)
              for path, message in manifest._problems(error)]
    if old is not None and not causes:
        old_body = {k: v for k, v in old.items() if k not in ("metadata", "status")}
        new_body = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
        causes = _transition_problems(schema, old_body, new_body, "")
    if causes:
        raise ApiError.invalid(rt.kind, rt.group, name, causes)
    return obj


# --- Built-in defaults ----------------------------------------------------------------------


def _pull_policy(image: str) -> str:
    tail = image.rsplit("/", 1)[-1]
    if "@" in tail:
        return "IfNotPresent"
    tag = tail.partition(":")[2]
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _default_container(container: Obj) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("imagePullPolicy", _pull_policy(container.get("image", "")))
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for key, value in limits.items():
            requests.setdefault(key, value)


def default_pod_spec(spec: Obj) -> None:
    """The apiserver's defaults of a pod spec (in a Pod or a template)."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            _default_container(container)
    for volume in spec.get("volumes") or []:
        for kind in ("configMap", "secret", "projected", "downwardAPI"):
            if kind in volume:
                volume[kind].setdefault("defaultMode", 420)
        for source in (volume.get("projected") or {}).get("sources") or []:
            for item in (source.get("downwardAPI") or {}).get("items") or []:
                item.get("fieldRef", {}).setdefault("apiVersion", "v1")
        for item in (volume.get("downwardAPI") or {}).get("items") or []:
            item.get("fieldRef", {}).setdefault("apiVersion", "v1")


def qos_class(spec: Mapping[str, Any]) -> str:
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        (r.get("limits") or {}).get(k) and (r.get("limits") or {}).get(k) ==
        (r.get("requests") or {}).get(k, (r.get("limits") or {}).get(k))
        for r in resources for k in ("cpu", "memory"))
    return "Guaranteed" if guaranteed else "Burstable"


def _default_job(obj: Obj) -> None:
    meta, spec = obj["metadata"], obj.setdefault("spec", {})
    uid, name = meta["uid"], meta["name"]
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("suspend", False)
    spec.setdefault("manualSelector", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
    template = spec.setdefault("template", {})
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    labels.update({"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name":
                   name, "controller-uid": uid, "job-name": name})
    if not meta.get("labels"):
        meta["labels"] = dict(labels)
    default_pod_spec(template.setdefault("spec", {}))
    obj["status"] = {}


def _default_pod(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    default_pod_spec(spec)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": 300})
    obj["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


def _default_crd(obj: Obj) -> None:
    names = obj["spec"]["names"]
    obj["status"] = {
        "acceptedNames": copy.deepcopy(names),
        "conditions": [{"type": t, "status": "True", "reason": r, "message": m,
                        "lastTransitionTime": obj["metadata"]["creationTimestamp"]}
                       for t, r, m in (("NamesAccepted", "NoConflicts", "no conflicts found"),
                                       ("Established", "InitialNamesAccepted",
                                        "the initial names have been accepted"))],
        "storedVersions": [v["name"] for v in obj["spec"].get("versions", [])
                           if v.get("storage")]}


def default_builtin(rt: ResourceType, obj: Obj, old: Obj | None) -> Obj:
    if rt.key == ("", "secrets") and "stringData" in obj:  # written as base64 data
        data = obj.setdefault("data", {})
        for key, value in (obj.pop("stringData") or {}).items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        obj.setdefault("type", "Opaque")
    if old is not None:
        return obj
    if rt.key == ("batch", "jobs"):
        _default_job(obj)
    elif rt.key == ("", "pods"):
        _default_pod(obj)
    elif rt.key == ("", "namespaces"):
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = \
            obj["metadata"]["name"]
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
    elif rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        _default_crd(obj)
    elif rt.has_status and rt.key != ("", "nodes"):
        obj.pop("status", None)
    return obj


# --- Built-in validation --------------------------------------------------------------------


@functools.cache
def _builtin_validator(api_version: str, kind: str, strict: bool = False
                       ) -> tuple[Any, Any] | None:
    """kubernetes-validate's schema for a kind, loaded once (its `validate` reads and
    decodes the whole definitions file on every call), as two validators of the same
    schema: jsonschema_rs (compiled, fifty times faster) answers whether an object is
    valid; jsonschema words the error, the way kubernetes-validate does, when it is not.
    ``strict``: its variant that refuses unknown fields."""
    import jsonschema
    import jsonschema_rs
    from kubernetes_validate import utils
    from referencing import Registry, Resource

    version = [v for v in utils.all_versions()
               if utils.major_minor(v) <= utils.major_minor(KUBERNETES_VERSION)][-1]
    folder = f"kubernetes-json-schema/v{version}-local" + ("-strict" if strict else "")
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = utils.schema_contents(f"{folder}/{kind.lower()}-{group_version}.json", version)
    except FileNotFoundError:
        return None  # not a kind it knows
    definitions = utils.schema_contents(f"{folder}/_definitions.json", version)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    fast = jsonschema_rs.Draft202012Validator(schema, registry=jsonschema_rs.Registry(
        [(definitions["$id"], definitions)]))
    return fast, jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _schema_causes(obj: Obj) -> list[tuple[str, str]]:
    """What the kind's OpenAPI schema (Kubernetes KUBERNETES_VERSION) says is wrong."""
    import jsonschema

    validators = _builtin_validator(obj.get("apiVersion", ""), obj.get("kind", ""))
    if validators is None or validators[0].is_valid(obj):
        return []
    error = jsonschema.exceptions.best_match(validators[1].iter_errors(obj))
    if error is None:
        return []
    path = ".".join(str(p) for p in error.absolute_path)
    return [(path, error.message)]


def unknown_builtin_fields(obj: Obj) -> list[str]:
    """The fields of a built-in object (or of a patch of one) that its kind's schema does
    not know, by their path: what ``fieldValidation=Strict`` refuses. A strategic merge
    patch's directives (``$patch``, ``$setElementOrder/...``) are not fields."""
    validators = _builtin_validator(obj.get("apiVersion", ""), obj.get("kind", ""), True)
    if validators is None or validators[0].is_valid(obj):
        return []
    found = []
    for error in validators[1].iter_errors(obj):
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            base = ".".join(str(p) for p in error.absolute_path)
            known = set(error.schema.get("properties") or {})
            found += [f"{base}.{key}" if base else key for key in error.instance
                      if key not in known and not key.startswith("$")]
    return found


_POD_MUTABLE = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")


def _pod_spec_without_mutable(spec: Mapping[str, Any]) -> Obj:
    out = {k: v for k, v in spec.items() if k not in _POD_MUTABLE}
    for key in ("initContainers", "containers"):
        out[key] = [{k: v for k, v in c.items() if k != "image"} for c in spec.get(key) or []]
    return out


def validate_builtin(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    meta = obj["metadata"]
    name = meta.get("name", "")
    validate_labels(rt.kind, rt.group, name, meta)
    causes = _schema_causes(obj)
    if rt.key == ("batch", "jobs"):
        if len(name) > 63:
            causes.append(("metadata.name", f"Invalid value: {name!r}: must be no more than 63 "
                                            f"characters"))
        policy = ((obj.get("spec") or {}).get("template") or {}).get("spec", {}).get(
            "restartPolicy")
        if policy not in ("Never", "OnFailure"):
            causes.append(("spec.template.spec.restartPolicy",
                           f'Unsupported value: "{policy}": supported values: "OnFailure", '
                           f'"Never"'))
        if old is not None:
            for field in ("template", "selector", "completions", "completionMode",
                          "podFailurePolicy", "manualSelector"):
                if (obj.get("spec") or {}).get(field) != (old.get("spec") or {}).get(field):
                    causes.append((f"spec.{field}", "Invalid value: field is immutable"))
    elif rt.key == ("", "pods") and old is not None:
        if _pod_spec_without_mutable(obj.get("spec") or {}) != \
                _pod_spec_without_mutable(old.get("spec") or {}):
            causes.append(("spec", "Forbidden: pod updates may not change fields other than "
                                   "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                                   "`spec.activeDeadlineSeconds`, `spec.tolerations` (only "
                                   "additions to existing tolerations), "
                                   "`spec.terminationGracePeriodSeconds`"))
    elif rt.key in (("", "configmaps"), ("", "secrets")):
        size = sum(len(k) + len(str(v)) for part in ("data", "binaryData")
                   for k, v in (obj.get(part) or {}).items())
        if size > CONFIGMAP_MAX:
            causes.append(("", f"Too long: must have at most {CONFIGMAP_MAX} bytes"))
        if old is not None and old.get("immutable"):
            for field in ("data", "binaryData", "immutable"):
                if obj.get(field) != old.get(field):
                    causes.append((field, "Forbidden: field is immutable when `immutable` is "
                                          "set"))
    if causes:
        raise ApiError.invalid(rt.kind, rt.group, name, causes)
