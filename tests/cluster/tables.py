"""Server-side tables (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``), as
``kubectl get`` asks for them.

A custom resource's columns are its CRD's additionalPrinterColumns (after Name; a ``date``
column shows an age, as the apiserver writes it). Pods, Jobs and Events get the main
columns of the apiserver's printers for them (``PRINTERS``); other built-in kinds the
default ones, Name and Created At. ``includeObject`` (None, Metadata: the default, or
Object) says what each row carries besides its cells.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from cluster.resources import ResourceType

Obj = dict[str, Any]
_STEP = re.compile(r'\.([\w-]+)|\[(\d+|\*)\]|\[\?\(@\.([\w.-]+)\s*==\s*["\']([^"\']*)["\']\)\]')
_NAME = {"name": "Name", "type": "string", "format": "name", "priority": 0,
         "description": "Name must be unique within a namespace. Is required when creating "
                        "resources, although some resources may allow a client to request "
                        "the generation of an appropriate name automatically."}
_CREATED = {"name": "Created At", "type": "date", "format": "", "priority": 0,
            "description": "CreationTimestamp is a timestamp representing the server time "
                           "when this object was created."}


def wants_table(accept: str | None) -> bool:
    """Whether the Accept header asks for a Table first (kubectl get: as=Table, then JSON)."""
    first = (accept or "").split(",")[0]
    return "as=Table" in first.replace(" ", "")


def json_path(obj: Any, path: str) -> list[Any]:
    """The values a printer column's JSONPath finds (``.a.b``, ``[0]``, ``[*]``,
    ``[?(@.type=="Ready")]``), as the apiserver's jsonpath finds them."""
    path = path.strip().removeprefix("{").removesuffix("}").removeprefix("$")
    found, at = [obj], 0
    while at < len(path):
        m = _STEP.match(path, at)
        if m is None:
            return []  # not a path this subset knows: no value, as for a missing field
        at = m.end()
        key, index, field, value = m.groups()
        nxt: list[Any] = []
        for item in found:
            if key is not None and isinstance(item, Mapping) and key in item:
                nxt.append(item[key])
            elif index == "*" and isinstance(item, list):
                nxt.extend(item)
            elif index is not None and index != "*" and isinstance(item, list) \
                    and int(index) < len(item):
                nxt.append(item[int(index)])
            elif field is not None and isinstance(item, list):
                nxt.extend(e for e in item if str(_get(e, field)) == value)
        found = nxt
    return found


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = obj.get(part) if isinstance(obj, Mapping) else None
    return obj


def age(timestamp: str, now: datetime.datetime | None = None) -> str:
    """The time since a timestamp, roughly as the apiserver prints ages (``5s``, ``3m``)."""
    try:
        then = datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.UTC)
    except (TypeError, ValueError):
        return "<invalid>"
    seconds = int(((now or datetime.datetime.now(datetime.UTC)) - then).total_seconds())
    if seconds < 0:
        return "<invalid>"
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 3 * 3600:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h" if seconds < 48 * 3600 else f"{seconds // 86400}d"


def _cell(column: Mapping[str, Any], obj: Obj) -> Any:
    values = json_path(obj, column.get("jsonPath", ""))
    if not values:
        return None
    kind = column.get("type", "string")
    if kind == "date":
        return age(values[0])
    if kind in ("integer", "number", "boolean") and len(values) == 1:
        return values[0]
    return ",".join(v if isinstance(v, str) else _text(v) for v in values)


def _text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":")) if isinstance(value, dict | list) \
        else str(value).lower() if isinstance(value, bool) else str(value)


# --- Printers of built-in kinds (the main columns of the apiserver's) -----------------------


def _ended(prefix: str, ended: Obj) -> str:
    if ended.get("reason"):
        return prefix + ended["reason"]
    if ended.get("signal"):
        return f"{prefix}Signal:{ended['signal']}"
    return f"{prefix}ExitCode:{ended.get('exitCode')}"


def _pod_status(pod: Obj) -> str:
    """STATUS as kubectl shows a pod's (its printPod): the init step it is at, else the state
    of its first container that is waiting or ended, else its phase."""
    status, spec = pod.get("status") or {}, pod.get("spec") or {}
    sidecars = {c["name"] for c in spec.get("initContainers") or []
                if c.get("restartPolicy") == "Always"}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    inits = status.get("initContainerStatuses") or []
    for index, init in enumerate(inits):
        state = init.get("state") or {}
        ended = state.get("terminated")
        if (ended and ended.get("exitCode") == 0) or (init["name"] in sidecars
                                                      and init.get("started")):
            continue
        waiting = (state.get("waiting") or {}).get("reason")
        if ended:
            reason = _ended("Init:", ended)
        elif waiting and waiting != "PodInitializing":
            reason = f"Init:{waiting}"
        else:
            reason = f"Init:{index}/{len(spec.get('initContainers') or inits)}"
        break
    else:
        for container in status.get("containerStatuses") or []:
            state = container.get("state") or {}
            if (state.get("waiting") or {}).get("reason"):
                reason = state["waiting"]["reason"]
                break
            if state.get("terminated"):
                reason = _ended("", state["terminated"])
                break
    if (pod.get("metadata") or {}).get("deletionTimestamp") and status.get("phase") not in (
            "Succeeded", "Failed"):
        return "Terminating"
    return reason


def _ready(pod: Obj) -> str:
    containers = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{sum(bool(c.get('ready')) for c in containers)}/{total}"


def _job_status(job: Obj) -> str:
    true = {c.get("type") for c in (job.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"}
    for kind in ("Failed", "Complete", "FailureTarget", "SuccessCriteriaMet", "Suspended"):
        if kind in true:
            return kind
    return "Terminating" if (job.get("metadata") or {}).get("deletionTimestamp") else "Running"


def _duration(job: Obj) -> str | None:
    status = job.get("status") or {}
    if not status.get("startTime"):
        return None
    end = status.get("completionTime")
    now = datetime.datetime.strptime(end, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.UTC) if end else None
    return age(status["startTime"], now)


def _last_seen(event: Obj) -> str:
    """lastTimestamp, else eventTime (a MicroTime) to the second."""
    seen = event.get("lastTimestamp") or event.get("eventTime") or ""
    return seen[:19] + "Z" if seen else ""


def _column(name: str, kind: str = "string", priority: int = 0) -> Obj:
    return {"name": name, "type": kind, "format": "", "description": "", "priority": priority}


def _name(obj: Obj) -> Any:
    return obj["metadata"].get("name")


def _created(obj: Obj) -> str:
    return age(obj["metadata"].get("creationTimestamp", ""))


Cell = Callable[[Obj], Any]
PRINTERS: dict[tuple[str, str], list[tuple[Obj, Cell]]] = {
    ("", "pods"): [
        (_NAME, _name), (_column("Ready"), _ready), (_column("Status"), _pod_status),
        (_column("Restarts", "integer"), lambda p: sum(
            c.get("restartCount", 0) for c in (p.get("status") or {}).get(
                "containerStatuses") or [])),
        (_column("Age"), _created),
        (_column("IP", priority=1), lambda p: (p.get("status") or {}).get("podIP", "<none>")),
        (_column("Node", priority=1), lambda p: (p.get("spec") or {}).get("nodeName",
                                                                          "<none>"))],
    ("batch", "jobs"): [
        (_NAME, _name), (_column("Status"), _job_status),
        (_column("Completions"), lambda j: f"{(j.get('status') or {}).get('succeeded', 0)}/"
                                           f"{(j.get('spec') or {}).get('completions', 1)}"),
        (_column("Duration"), _duration),
        (_column("Age"), _created)],
    ("", "events"): [
        (_column("Last Seen"), lambda e: age(_last_seen(e))),
        (_column("Type"), lambda e: e.get("type")), (_column("Reason"), lambda e: e.get("reason")),
        (_column("Object"), lambda e: f"{(e.get('involvedObject') or {}).get('kind', '').lower()}"
                                      f"/{(e.get('involvedObject') or {}).get('name', '')}"),
        (_column("Message"), lambda e: e.get("message")),
        ({**_NAME, "priority": 1}, _name)],
}


def printer(rt: ResourceType) -> list[tuple[Obj, Cell]]:
    """A kind's columns, each with how its cell is read from an object."""
    if not rt.custom and (rt.group, rt.plural) in PRINTERS:
        return PRINTERS[(rt.group, rt.plural)]
    if not rt.custom or not rt.printer_columns:
        return [(_NAME, _name), ({**_CREATED, "name": "Age"} if rt.custom else _CREATED,
                                 _created)]
    return [(_NAME, _name), *(({"name": c["name"], "type": c.get("type", "string"),
                                "format": c.get("format", ""),
                                "description": c.get("description", ""),
                                "priority": c.get("priority", 0)}, partial(_cell, c))
                              for c in rt.printer_columns)]


def _row(cells: list[Cell], obj: Obj, include: str) -> Obj:
    row: Obj = {"cells": [cell(obj) for cell in cells]}
    if include == "Object":
        row["object"] = obj
    elif include != "None":
        row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                         "metadata": obj.get("metadata") or {}}
    return row


def table(rt: ResourceType, objects: Iterable[Obj], include: str | None = None,
          list_meta: Mapping[str, Any] | None = None) -> Obj:
    """A Table of ``objects`` (one or a list's items)."""
    columns = printer(rt)
    cells = [cell for _, cell in columns]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": dict(list_meta or {}),
            "columnDefinitions": [column for column, _ in columns],
            "rows": [_row(cells, o, include or "Metadata") for o in objects]}
