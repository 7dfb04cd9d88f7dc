"""Label and field selectors, parsed and matched as the apiserver does.

Label selectors take the whole grammar (``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``,
``a notin (x)``, ``a``, ``!a``); field selectors take ``=``, ``==`` and ``!=`` on the fields
the apiserver allows for each kind (others answer 400, as there).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cluster.errors import ApiError

Matcher = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str
    """=, !=, in, notin, exists, !exists"""
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        # != and notin also match objects without the label, as in Kubernetes.
        return not present or value not in self.values


def _split(text: str) -> list[str]:
    """Split at commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


_SET = re.compile(r"^(\S+)\s+(in|notin)\s+\((.*)\)$")
_EQ = re.compile(r"^([^!=\s]+)\s*(==|=|!=)\s*(\S*)$")


def parse_label_selector(text: str | None) -> list[Requirement]:
    """The requirements of a ``labelSelector`` query parameter (400 when malformed)."""
    requirements = []
    for part in _split(text or ""):
        if m := _SET.match(part):
            values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
            requirements.append(Requirement(m.group(1), m.group(2), values))
        elif m := _EQ.match(part):
            op = "!=" if m.group(2) == "!=" else "="
            requirements.append(Requirement(m.group(1), op, frozenset([m.group(3)])))
        elif re.fullmatch(r"!\s*[\w./-]+", part):
            requirements.append(Requirement(part[1:].strip(), "!exists"))
        elif re.fullmatch(r"[\w./-]+", part):
            requirements.append(Requirement(part, "exists"))
        else:
            raise ApiError.bad_request(f"unable to parse requirement: {part!r}")
    return requirements


def match_selector_object(selector: Mapping[str, Any] | None) -> list[Requirement]:
    """A LabelSelector object (``matchLabels`` / ``matchExpressions``) as requirements."""
    selector = selector or {}
    found = [Requirement(k, "=", frozenset([v])) for k, v in
             (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expr in selector.get("matchExpressions") or []:
        found.append(Requirement(expr["key"], ops[expr["operator"]],
                                 frozenset(expr.get("values") or [])))
    return found


def labels_match(requirements: list[Requirement], obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in requirements)


# Field selectors the apiserver supports, by (group, plural); metadata.name and
# metadata.namespace work for every kind.
FIELD_SELECTORS: dict[tuple[str, str], frozenset[str]] = {
    ("", "pods"): frozenset({"spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                             "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
                             "status.podIP", "status.podIPs", "status.nominatedNodeName"}),
    ("", "events"): frozenset({"involvedObject.kind", "involvedObject.namespace",
                               "involvedObject.name", "involvedObject.uid",
                               "involvedObject.apiVersion", "involvedObject.resourceVersion",
                               "involvedObject.fieldPath", "reason", "reportingComponent",
                               "source", "type"}),
    ("", "secrets"): frozenset({"type"}),
    ("", "namespaces"): frozenset({"status.phase"}),
    ("", "nodes"): frozenset({"spec.unschedulable"}),
    ("events.k8s.io", "events"): frozenset({
        "regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
        "regarding.apiVersion", "regarding.resourceVersion", "regarding.fieldPath", "reason",
        "reportingController", "type"}),
    ("batch", "jobs"): frozenset({"status.successful"}),
}


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    if path == "source":  # events: source.component
        return str(((obj.get("source") or {}).get("component")) or "")
    if path == "status.successful":  # jobs
        return str((obj.get("status") or {}).get("succeeded") or 0)
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def parse_field_selector(text: str | None, group: str, plural: str
                         ) -> list[tuple[str, bool, str]]:
    """(field, equal?, value) triples; 400 for a field the kind does not support."""
    allowed = FIELD_SELECTORS.get((group, plural), frozenset()) | {"metadata.name",
                                                                   "metadata.namespace"}
    found = []
    for part in _split(text or ""):
        m = re.fullmatch(r"([\w.]+)\s*(==|=|!=)\s*(.*)", part)
        if not m:
            raise ApiError.bad_request(f"invalid field selector: {part!r}")
        field = m.group(1)
        if field not in allowed:
            raise ApiError.bad_request(f'field label not supported: {field}')
        found.append((field, m.group(2) != "!=", m.group(3)))
    return found


def fields_match(selector: list[tuple[str, bool, str]], obj: Mapping[str, Any]) -> bool:
    return all((_field_value(obj, f) == v) == eq for f, eq, v in selector)
