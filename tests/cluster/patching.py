"""The three patch formats of the Kubernetes API, applied to plain dicts.

* JSON merge patch (RFC 7386), ``application/merge-patch+json``: what kopf and the official
  client send for custom resources.
* JSON patch (RFC 6902), ``application/json-patch+json``: kopf's finalizer and annotation
  patches, led by a ``test`` of ``/metadata/resourceVersion``.
* Strategic merge patch, ``application/strategic-merge-patch+json``: the official client's
  default for built-in kinds. Lists of objects merge by their key (containers by name,
  conditions by type, ...), as the apiserver does for the fields used here; ``$patch:
  delete`` / ``replace`` and ``$deleteFromPrimitiveList`` are honoured. The apiserver
  refuses it for custom resources (415), and so does the emulator.
"""

from __future__ import annotations

import copy
from typing import Any

from cluster.errors import ApiError

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: dicts merge, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# --- JSON patch -----------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError.bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise ApiError.unprocessable(f"jsonpatch: path {path!r} does not exist")
    return node


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent, last = _parent(doc, parts, path), parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise ApiError.unprocessable(f"jsonpatch: path {path!r} does not exist")


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    parent, last = _parent(doc, parts, path), parts[-1] if parts else ""
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise ApiError.unprocessable(f"jsonpatch: cannot remove {path!r}: it does not exist")


def _add(doc: Any, path: str, value: Any, replace: bool = False) -> Any:
    parts = _pointer(path)
    if not parts:
        return copy.deepcopy(value)
    parent, last = _parent(doc, parts, path), parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise ApiError.unprocessable(f"jsonpatch: cannot replace {path!r}: missing")
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(copy.deepcopy(value))
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = copy.deepcopy(value)
            else:
                parent.insert(int(last), copy.deepcopy(value))
        else:
            raise ApiError.unprocessable(f"jsonpatch: index out of range in {path!r}")
    else:
        raise ApiError.unprocessable(f"jsonpatch: {path!r} is inside a scalar")
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902; a failed ``test`` answers 422, as kopf expects for a stale resourceVersion."""
    if not isinstance(ops, list):
        raise ApiError.bad_request("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "test":
            if _get(doc, path) != op.get("value"):
                raise ApiError.unprocessable(
                    f"the server rejected our request due to an error in our request: "
                    f"testing value {path} failed")
        elif kind == "add":
            doc = _add(doc, path, op.get("value"))
        elif kind == "replace":
            doc = _add(doc, path, op.get("value"), replace=True)
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "move":
            doc = _add(doc, path, _remove(doc, op["from"]))
        elif kind == "copy":
            doc = _add(doc, path, _get(doc, op["from"]))
        else:
            raise ApiError.bad_request(f"unknown JSON patch operation {kind!r}")
    return doc


# --- Strategic merge patch ------------------------------------------------------------------

# patchMergeKey of the list fields that merge (the rest are replaced whole).
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "volumes": "name", "env": "name", "volumeMounts": "mountPath", "ports": "containerPort",
    "conditions": "type", "ownerReferences": "uid", "imagePullSecrets": "name",
    "containerStatuses": "name", "initContainerStatuses": "name", "podIPs": "ip",
    "hostIPs": "ip", "addresses": "type", "envFrom": None,
}
PRIMITIVE_MERGE = {"finalizers"}


def _merge_list(key: str, target: list[Any], patch: list[Any]) -> list[Any]:
    merge_key = MERGE_KEYS.get(key)
    if key in PRIMITIVE_MERGE:
        return target + [v for v in patch if v not in target]
    if not merge_key or not all(isinstance(v, dict) for v in patch):
        if any(isinstance(v, dict) and v.get("$patch") == "replace" for v in patch):
            return [v for v in patch if not (isinstance(v, dict) and "$patch" in v)]
        return copy.deepcopy(patch)
    out = [copy.deepcopy(v) for v in target]
    if any(v.get("$patch") == "replace" for v in patch):
        out = []
    for item in patch:
        if item.get("$patch") == "replace":
            continue
        index = next((i for i, v in enumerate(out)
                      if isinstance(v, dict) and v.get(merge_key) == item.get(merge_key)), None)
        if item.get("$patch") == "delete":
            if index is not None:
                out.pop(index)
        elif index is None:
            out.append(strategic_merge_patch({}, item))
        else:
            out[index] = strategic_merge_patch(out[index], item)
    return out


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith(("$setElementOrder/", "$retainKeys", "$patch")):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            out[field] = [v for v in out.get(field) or [] if v not in value]
        elif value is None:
            out.pop(key, None)
        elif isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = _merge_list(key, out[key], value)
        elif isinstance(value, list):
            out[key] = _merge_list(key, [], value)
        else:
            out[key] = strategic_merge_patch(out.get(key), value)
    return out


def apply_patch(target: dict[str, Any], patch: Any, content_type: str,
                custom: bool) -> dict[str, Any]:
    """``target`` patched as the content type says; 415 for what the apiserver refuses."""
    kind = content_type.split(";")[0].strip().lower()
    if kind == MERGE:
        return merge_patch(target, patch)
    if kind == JSON_PATCH:
        return json_patch(target, patch)
    if kind == STRATEGIC:
        if custom:
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an "
                           "unknown format - accepted media types include: "
                           "application/json-patch+json, application/merge-patch+json, "
                           "application/apply-patch+yaml")
        return strategic_merge_patch(target, patch)
    raise ApiError(415, "UnsupportedMediaType",
                   f"the emulator does not serve patches of type {content_type!r} (server-side "
                   f"apply is not emulated); use merge, JSON or strategic merge patches")
