"""The emulated apiserver's storage and semantics, without HTTP (thread-safe, synchronous).

What a client of the real apiserver relies on, and this store does:

* metadata stamped by the server: ``uid``, ``resourceVersion`` (one increasing counter,
  changed on every write and never on a no-op write), ``creationTimestamp``,
  ``generation`` (kinds with a spec: bumped when anything but metadata/status changes),
  ``generateName``;
* 409 AlreadyExists on a create, 409 Conflict on a stale ``resourceVersion``, 404 in a
  namespace that does not exist, 403 in one being deleted, 422 Invalid with causes;
* the ``status`` subresource: a main-resource write keeps status as it was, a ``/status``
  write changes only status;
* custom resources pruned, defaulted and validated against their CRD's schema, CEL rules
  included (transition rules on updates);
* built-in kinds validated against the upstream OpenAPI schemas (kubernetes-validate), Job
  and Pod defaults, immutable ConfigMaps and Secrets, immutable Job templates;
* finalizers and ``deletionTimestamp``; ``propagationPolicy`` Foreground, Background and
  Orphan (Jobs default to Orphan through the API, as in Kubernetes); garbage collection of
  objects whose owners (by uid) are all gone, also of those written with owners that were
  already gone; namespaces deleted with their content;
* watches from a resourceVersion (410 Expired when too old), filtered by selectors, with
  ADDED / DELETED when an object enters or leaves the selection.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import datetime
import json
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster import patching
from cluster.errors import ApiError
from cluster.resources import BUILTINS, ResourceType, crd_types
from cluster.selectors import (
    Requirement,
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)

Obj = dict[str, Any]
Key = tuple[str, str]  # (group, plural) of the storage
LOG_SIZE = 50_000
"""Changes kept for watches that resume from a resourceVersion; older ones answer 410."""
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # what the apiserver uses for generateName
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
CONFIGMAP_MAX = 1024 * 1024
ANNOTATIONS_MAX = 256 * 1024


_STAMP = (0, "")


def now() -> str:
    """An API timestamp, to the second, as the apiserver writes them (formatted once a
    second: the cluster's controllers stamp a few hundred changes a second at scale)."""
    global _STAMP
    second = int(time.time())
    if _STAMP[0] != second:
        _STAMP = (second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second)))
    return _STAMP[1]


def now_micro() -> str:
    """A MicroTime (Event.eventTime)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def random_suffix(n: int = 5) -> str:
    return "".join(random.choice(_NAME_CHARS) for _ in range(n))


def random_hex(chars: int) -> str:
    """Random hex digits for names and ids (uids, container ids, Event names), from
    `random`: `uuid4` and `secrets` read the OS's entropy, a system call that lets every
    other thread of the test cluster in, some forty times per Job."""
    return f"{random.getrandbits(4 * chars):0{chars}x}"


def new_uid() -> str:
    """A uid shaped as the API server's (a version 4 UUID)."""
    return str(uuid.UUID(int=random.getrandbits(128), version=4))


@dataclass
class Watcher:
    """One open watch: what it selects and where its events go."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    labels: list[Requirement]
    fields: list[tuple[str, bool, str]]
    send: Callable[[dict[str, Any]], None]
    closed: bool = False

    def selects(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        return ((self.namespace is None or meta.get("namespace") == self.namespace)
                and (self.name is None or meta.get("name") == self.name)
                and labels_match(self.labels, obj) and fields_match(self.fields, obj))

    def offer(self, kind: str, new: Obj, old: Obj | None) -> dict[str, Any] | None:
        """The event this watch gets for a change, if any (entering/leaving the selection)."""
        view = _view(self.rt, new)
        now_in = self.selects(view)
        before = self.selects(_view(self.rt, old)) if old is not None else False
        if kind == "DELETED":
            return {"type": "DELETED", "object": view} if now_in else None
        if now_in and not before and kind == "MODIFIED":
            return {"type": "ADDED", "object": view}
        if before and not now_in:
            return {"type": "DELETED", "object": view}
        return {"type": kind, "object": view} if now_in else None


def clone(obj: Any) -> Any:
    """A deep copy of JSON data (dicts, lists, scalars): four times copy.deepcopy's speed,
    which matters in a store that copies every object it hands out or takes in."""
    if type(obj) is dict:
        return {key: clone(value) for key, value in obj.items()}
    if type(obj) is list:
        return [clone(value) for value in obj]
    return obj


def _view(rt: ResourceType, obj: Obj | None) -> Obj | None:
    """A stored object as ``rt`` shows it (events.k8s.io/v1 converts core Events)."""
    if obj is None:
        return None
    if rt.from_storage:
        return rt.from_storage(obj)
    if obj.get("apiVersion") != rt.api_version:
        return {**obj, "apiVersion": rt.api_version}
    return obj


class StoreLock:
    """The store's lock (re-entrant), which holds back the wake-ups asked for under it
    (`defer`) until the thread that holds it lets go. A thread woken under the lock (the
    event loop that streams a watch, the kubelet's controllers) takes the core from the
    lock's holder at once, only to wait for the lock or the GIL that the holder keeps; woken
    after, it finds both free. In the operator's benchmark, where the whole test cluster
    shares one core, freed slots were refilled a few milliseconds sooner."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # changed only by the thread that holds the lock: which let-go is last
        self._wakes: list[Callable[[], None]] = []

    def __enter__(self) -> StoreLock:
        self._lock.acquire()
        self._depth += 1
        return self

    def __exit__(self, *_: object) -> None:
        self._depth -= 1
        if self._depth:
            self._lock.release()
            return
        wakes, self._wakes = self._wakes, []
        self._lock.release()
        for wake in wakes:
            wake()

    def defer(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` once the lock is let go (now if this thread does not hold it:
        only the holder calls this, from under the lock)."""
        if self._lock._is_owned():  # type: ignore[attr-defined]
            self._wakes.append(wake)
        else:
            wake()


class Store:
    """All objects, the resourceVersion counter, the change log and the watches."""

    def __init__(self, *, namespaces: Iterable[str] = ("default",)) -> None:
        self.lock = StoreLock()
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._objects: dict[Key, dict[tuple[str, str], Obj]] = collections.defaultdict(dict)
        self._rv = 0
        self._log: collections.deque[tuple[int, Key, str, Obj, Obj | None]] = \
            collections.deque(maxlen=LOG_SIZE)
        self._watchers: list[Watcher] = []
        self._listeners: list[Callable[[str, Key, Obj, Obj | None], None]] = []
        self._owned: dict[str, set[tuple[Key, str, str]]] = collections.defaultdict(set)
        self._uids: dict[str, tuple[Key, str, str]] = {}
        self._logs: dict[tuple[str, str], dict[str, Path]] = {}
        self.on_types_changed: list[Callable[[], None]] = []
        self.graceful_pods = False
        """Pods on a node are deleted gracefully (a kubelet then removes them)."""
        for rt in BUILTINS:
            self._types[(rt.group, rt.version, rt.plural)] = rt
        for name in namespaces:
            self.ensure_namespace(name)

    # --- Kinds ------------------------------------------------------------------------------

    @property
    def types(self) -> list[ResourceType]:
        with self.lock:
            return list(self._types.values())

    def resource(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self._types.get((group, version, plural))  # one lookup: no lock to wait for
        if rt is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource",
                           {"group": group, "kind": plural})
        return rt

    def resource_for(self, api_version: str, kind: str) -> ResourceType:
        group, _, version = api_version.rpartition("/")
        with self.lock:
            for rt in self._types.values():
                if (rt.group, rt.version, rt.kind) == (group, version, kind):
                    return rt
        raise ApiError.bad_request(f"no kind {kind!r} is registered for version {api_version!r}")

    def register_crd(self, crd: Mapping[str, Any]) -> None:
        """Serve a CRD's kinds (also done when a CRD is created through the API)."""
        self._register_crd_types(crd)
        rt = self.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        name = crd["metadata"]["name"]
        with self.lock:
            if ("", name) not in self._objects[rt.key]:
                self.create(rt, None, clone(dict(crd)), internal=True)

    def _register_crd_types(self, crd: Mapping[str, Any]) -> None:
        with self.lock:
            for rt in crd_types(crd):
                self._types[(rt.group, rt.version, rt.plural)] = rt
        for hook in self.on_types_changed:
            hook()

    def _unregister_crd(self, crd: Obj) -> None:
        spec = crd["spec"]
        with self.lock:
            for version in spec.get("versions", []):
                rt = self._types.pop((spec["group"], version["name"], spec["names"]["plural"]),
                                     None)
                if rt is not None:
                    for (ns, name) in list(self._objects[rt.key]):
                        self._remove(rt, ns, name)
        for hook in self.on_types_changed:
            hook()

    # --- Reading ----------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        with self.lock:
            obj = self._objects[rt.key].get((namespace or "", name))
            if obj is None:
                raise ApiError.not_found(rt.group, rt.plural, name)
            return clone(_view(rt, obj))  # type: ignore[arg-type]

    def peek(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        """The stored object itself, uncopied (or None): to read, never to change."""
        with self.lock:
            return _view(rt, self._objects[rt.key].get((namespace or "", name)))

    def find(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        try:
            return self.get(rt, namespace, name)
        except ApiError:
            return None

    def list(self, rt: ResourceType, namespace: str | None = None,
             label_selector: str | None = None, field_selector: str | None = None,
             limit: int | None = None, continue_: str | None = None
             ) -> tuple[list[Obj], str, str | None]:
        """(items, resourceVersion, continue token) as a LIST answers them."""
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector, rt.group, rt.plural)
        watcher = Watcher(rt, namespace, None, labels, fields, lambda _: None)
        with self.lock:
            items = [_view(rt, self._objects[rt.key][k]) for k in sorted(self._objects[rt.key])]
            rv = str(self._rv)
        items = [clone(o) for o in items if watcher.selects(o)]
        start = 0
        if continue_:
            try:
                start = json.loads(base64.b64decode(continue_))["start"]
            except (ValueError, KeyError) as exc:
                raise ApiError.bad_request("invalid continue token") from exc
        token = None
        if limit and start + limit < len(items):
            token = base64.b64encode(json.dumps({"start": start + limit}).encode()).decode()
        return items[start:start + limit if limit else None], rv, token

    def objects(self, plural: str, group: str = "", namespace: str | None = None) -> list[Obj]:
        """Every stored object of a kind (for tests and the kubelet), oldest first."""
        with self.lock:
            found = [clone(o) for (ns, _), o in self._objects[(group, plural)].items()
                     if namespace is None or ns == namespace]
        return sorted(found, key=lambda o: int(o["metadata"]["resourceVersion"]))

    @property
    def resource_version(self) -> int:
        with self.lock:
            return self._rv

    def set_container_log(self, namespace: str, pod: str, container: str, path: Path) -> None:
        """Where a container's log is (the kubelet's side of the pod log endpoint)."""
        with self.lock:
            self._logs.setdefault((namespace, pod), {})[container] = path

    def container_log(self, namespace: str, pod: str, container: str) -> str:
        with self.lock:
            path = self._logs.get((namespace, pod), {}).get(container)
        return path.read_text(errors="replace") if path and path.exists() else ""

    # --- Watching ---------------------------------------------------------------------------

    def listen(self, callback: Callable[[str, Key, Obj, Obj | None], None]) -> None:
        """Call ``callback(type, (group, plural), new, old)`` on every change (under the
        store's lock: it must only queue the event, never change the objects, and wake
        whoever reads the queue through ``lock.defer``)."""
        with self.lock:
            self._listeners.append(callback)

    def unlisten(self, callback: Callable[[str, Key, Obj, Obj | None], None]) -> None:
        with self.lock:
            if callback in self._listeners:
                self._listeners.remove(callback)

    def watch(self, rt: ResourceType, namespace: str | None, name: str | None,
              label_selector: str | None, field_selector: str | None,
              resource_version: str | None, send: Callable[[dict[str, Any]], None]
              ) -> tuple[Watcher, list[dict[str, Any]]]:
        """Open a watch: the events before now that it must get first, then ``send`` gets
        each later one (called under the lock: it must only queue the event, never change
        it, and wake its reader through ``lock.defer``)."""
        watcher = Watcher(rt, namespace, name, parse_label_selector(label_selector),
                          parse_field_selector(field_selector, rt.group, rt.plural), send)
        with self.lock:
            if resource_version in (None, "", "0"):
                first = [{"type": "ADDED", "object": _view(rt, o)}
                         for _, o in sorted(self._objects[rt.key].items())]
                first = [e for e in first if watcher.selects(e["object"])]
            else:
                try:
                    since = int(resource_version)
                except ValueError as exc:
                    raise ApiError.bad_request(f"invalid resourceVersion {resource_version!r}"
                                               ) from exc
                oldest = self._log[0][0] if self._log else self._rv + 1
                if since < oldest - 1 and since < self._rv:
                    raise ApiError(410, "Expired", f"too old resource version: {since} "
                                                   f"({oldest - 1})")
                first = []
                for rv, key, kind, obj, old in self._log:
                    if rv > since and key == rt.key:
                        event = watcher.offer(kind, obj, old)
                        if event:
                            first.append(event)
            self._watchers.append(watcher)
        return watcher, clone(first)

    def unwatch(self, watcher: Watcher) -> None:
        with self.lock:
            watcher.closed = True
            if watcher in self._watchers:
                self._watchers.remove(watcher)

    def _emit(self, kind: str, rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        # Stored objects are never changed in place (a write stores a new one), so watches
        # and listeners get them as they are, uncopied: they must only read them.
        self._log.append((self._rv, rt.key, kind, obj, old))
        for watcher in list(self._watchers):
            if watcher.rt.key == rt.key and not watcher.closed:
                event = watcher.offer(kind, obj, old)
                if event:
                    watcher.send(event)
        for listener in list(self._listeners):
            listener(kind, rt.key, obj, old)

    # --- Creating ---------------------------------------------------------------------------

    def ensure_namespace(self, name: str) -> Obj:
        rt = self.resource("", "v1", "namespaces")
        with self.lock:
            existing = self._objects[rt.key].get(("", name))
            if existing:
                return clone(existing)
            return self.create(rt, None, {"metadata": {"name": name}}, internal=True)

    def create(self, rt: ResourceType, namespace: str | None, body: Obj, *,
               internal: bool = False, given: bool = False) -> Obj:
        """POST: the object as stored (409 if the name is taken). ``given``: the body is
        the caller's to give away (a request's, just decoded; a controller's, just built),
        so it is stored uncopied, and the answer is the stored object, only to be read."""
        if not isinstance(body, dict):
            raise ApiError.bad_request("the body of a create must be an object")
        srt = self._storage_type(rt)
        obj = body if given else clone(body)
        obj = rt.to_storage(obj) if rt.to_storage else obj
        meta = dict(obj.get("metadata") or {})
        obj.update(apiVersion=srt.api_version, kind=srt.kind, metadata=meta)
        if srt.namespaced:
            if namespace and meta.get("namespace") not in (None, "", namespace):
                raise ApiError.bad_request("the namespace of the provided object does not "
                                           "match the namespace sent on the request")
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        with self.lock:
            if not meta.get("name"):
                if not meta.get("generateName"):
                    raise ApiError.invalid(srt.kind, srt.group, "", [(
                        "metadata.name", "Required value: name or generateName is required")])
                meta["name"] = meta["generateName"][:58] + random_suffix()
            name, ns = meta["name"], meta.get("namespace", "")
            if srt.namespaced:
                self._check_namespace(ns)
            if (ns, name) in self._objects[srt.key]:
                raise ApiError.already_exists(rt.group, rt.plural, name)
            for stamp in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
                meta.pop(stamp, None)
            meta.update(uid=new_uid(), creationTimestamp=now())
            if srt.generation:
                meta["generation"] = 1
            obj = self._admit(srt, obj, None, internal)
            self._rv += 1
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self._objects[srt.key][(ns, name)] = obj
            self._uids[meta["uid"]] = (srt.key, ns, name)
            self._index_owners(srt.key, obj, None)
            self._emit("ADDED", srt, obj, None)
            if srt.plural == "customresourcedefinitions":
                self._register_crd_types(obj)
            shown = _view(rt, obj)
            self._collect_if_ownerless(srt, obj, None)
            return shown if given else clone(shown)  # type: ignore[return-value]

    def _storage_type(self, rt: ResourceType) -> ResourceType:
        return rt if rt.storage is None else self._type_of(rt.storage)

    def _type_of(self, key: Key) -> ResourceType:
        return next(t for t in self._types.values() if t.key == key and t.storage is None)

    def _check_namespace(self, ns: str) -> None:
        namespace = self._objects[("", "namespaces")].get(("", ns))
        if namespace is None:
            raise ApiError.not_found("", "namespaces", ns)
        if namespace["metadata"].get("deletionTimestamp"):
            raise ApiError(403, "Forbidden", f"unable to create new content in namespace {ns} "
                                             f"because it is being terminated")

    # --- Admission: defaults and validation per kind -----------------------------------------

    def _admit(self, rt: ResourceType, obj: Obj, old: Obj | None, internal: bool) -> Obj:
        """Defaults and validation of a write (create when ``old`` is None)."""
        from cluster import admission  # kind rules live beside the store

        if rt.custom:
            return admission.admit_custom(rt, obj, old)
        try:
            obj = admission.default_builtin(rt, obj, old)
        except (AttributeError, TypeError) as exc:
            # A field of the wrong type: the apiserver cannot decode the body into its
            # kind's struct and answers 400 before any defaulting or validation.
            raise ApiError.bad_request(f"the body of the {rt.kind} does not decode: a field "
                                       f"has the wrong type ({exc})") from exc
        if not internal:
            admission.validate_builtin(rt, obj, old)
        return obj

    # --- Updating ---------------------------------------------------------------------------

    def replace(self, rt: ResourceType, namespace: str | None, name: str, body: Obj,
                subresource: str | None = None, *, internal: bool = False) -> Obj:
        """PUT: the whole object (409 Conflict on a stale metadata.resourceVersion)."""
        if not isinstance(body, dict):
            raise ApiError.bad_request("the body of an update must be an object")
        return self._write(rt, namespace, name, lambda _: clone(body), subresource,
                           internal)

    def patch(self, rt: ResourceType, namespace: str | None, name: str, patch: Any,
              content_type: str = patching.MERGE, subresource: str | None = None, *,
              internal: bool = False) -> Obj:
        """PATCH: merge, JSON or strategic merge patch (see ``patching``)."""
        return self._write(rt, namespace, name, lambda current: patching.apply_patch(
            current, patch, content_type, rt.custom), subresource, internal)

    def mutate(self, rt: ResourceType, namespace: str | None, name: str,
               change: Callable[[Obj], Obj | None], subresource: str | None = None) -> Obj:
        """A read-modify-write as a controller does it: ``change`` edits the object in place
        (or returns a new one); a status write's ``change`` edits only its status. Answers
        the object as stored, which the caller must only read.

        The test cluster's own controllers write pod and Job status some thirty times per
        Job, so these writes copy only what they change (the status); the rest is shared
        with the previous version, which nothing changes in place either."""
        def apply(current: Obj) -> Obj:
            result = change(current)
            return result if isinstance(result, dict) else current
        return self._write(rt, namespace, name, apply, subresource, internal=True,
                           trusted=True)

    def bind(self, rt: ResourceType, namespace: str, name: str, node: str,
             condition: Callable[[Obj], Any]) -> Obj:
        """A pod's binding (pods/binding): ``spec.nodeName`` and its PodScheduled condition
        (``condition(status)`` sets it) in one write, as the API server makes it."""
        def change(current: Obj) -> Obj:
            condition(current.setdefault("status", {}))
            return {**current, "spec": {**current["spec"], "nodeName": node}}
        return self._write(rt, namespace, name, change, "binding", internal=True, trusted=True)

    def set_status(self, rt: ResourceType, namespace: str | None, name: str,
                   status: Obj) -> Obj:
        """A status write that replaces the whole status by ``status``, the caller's to give
        away (a kubelet publishing its pod's status): nothing of the old one is copied."""
        return self._write(rt, namespace, name, lambda current: {**current, "status": status},
                           "status", internal=True, trusted=True, fresh=True)

    def _write(self, rt: ResourceType, namespace: str | None, name: str,
               change: Callable[[Obj], Obj], subresource: str | None, internal: bool,
               trusted: bool = False, fresh: bool = False) -> Obj:
        """``internal``: no admission (the cluster's own writes); ``trusted``: a `mutate`,
        whose change keeps to its part and whose caller only reads the answer; ``fresh``:
        a trusted status write whose change brings a new status (`set_status`)."""
        if subresource not in (None, "status", "binding"):
            raise ApiError(405, "MethodNotAllowed", f"the emulator cannot write {rt.plural}/"
                                                   f"{subresource}")
        srt = self._storage_type(rt)
        with self.lock:
            key = (namespace or "", name)
            old = self._objects[srt.key].get(key)
            if old is None:
                raise ApiError.not_found(rt.group, rt.plural, name)
            shown = _view(rt, old)
            assert shown is not None
            if trusted and subresource in ("status", "binding"):  # see `mutate`, `bind`
                candidate = {**shown}
                if "status" in shown and not fresh:
                    candidate["status"] = clone(shown["status"])
                candidate = change(candidate)
            else:
                candidate = change(clone(shown))
            if not isinstance(candidate, dict):
                raise ApiError.bad_request("the result of the write is not an object")
            if rt.to_storage:
                candidate = rt.to_storage(candidate)
            new = self._merge_system_fields(srt, old, candidate, subresource, rt)
            if subresource is None:
                new = self._admit(srt, new, old, internal)
            if old["metadata"].get("deletionTimestamp"):
                added = set(new["metadata"].get("finalizers") or []) - set(
                    old["metadata"].get("finalizers") or [])
                if added:
                    raise ApiError.invalid(srt.kind, srt.group, name, [(
                        "metadata.finalizers", "Forbidden: no new finalizers can be added if "
                                               "the object is being deleted")])
            if new == old:
                return _view(rt, old) if trusted else clone(_view(rt, old))  # type: ignore
            if srt.generation and _spec_part(new) != _spec_part(old):
                new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
            self._rv += 1
            new["metadata"]["resourceVersion"] = str(self._rv)
            self._objects[srt.key][key] = new
            self._index_owners(srt.key, new, old)
            self._emit("MODIFIED", srt, new, old)
            if new["metadata"].get("deletionTimestamp") and not new["metadata"].get(
                    "finalizers") and srt.key != ("", "namespaces"):  # those empty first
                self._remove(srt, namespace, name)
            else:
                self._collect_if_ownerless(srt, new, old)
            return _view(rt, new) if trusted else clone(_view(rt, new))  # type: ignore

    def _merge_system_fields(self, rt: ResourceType, old: Obj, candidate: Obj,
                             subresource: str | None, view: ResourceType) -> Obj:
        """What a write may not change: identity, server-set metadata, and the other half of
        an object with a status subresource."""
        meta = dict(candidate.get("metadata") or {})
        old_meta = old["metadata"]
        sent_rv = meta.get("resourceVersion")
        if sent_rv not in (None, "") and sent_rv != old_meta["resourceVersion"]:
            raise ApiError.conflict(view.group, view.plural, old_meta["name"])
        for field in ("name", "namespace"):
            if meta.get(field, old_meta.get(field)) != old_meta.get(field):
                raise ApiError.bad_request(f"the {field} of the object does not match the "
                                           f"{field} on the URL")
        for field in ("uid", "creationTimestamp", "resourceVersion", "generation",
                      "deletionTimestamp", "deletionGracePeriodSeconds", "namespace",
                      "generateName"):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        meta.pop("managedFields", None)
        new = {**candidate, "metadata": meta, "apiVersion": rt.api_version, "kind": rt.kind}
        if subresource == "binding":  # the spec (its nodeName) and the status
            new = {**old, "metadata": dict(old["metadata"]), "spec": candidate["spec"],
                   "status": candidate["status"]}
        elif rt.has_status and subresource == "status":
            # Only the status is new; the rest is the stored object's, shared (stored
            # objects are never changed in place) but for the metadata a write stamps.
            new = {**old, "metadata": dict(old["metadata"]), "status": candidate.get("status")}
            if new["status"] is None:
                new.pop("status")
        elif rt.has_status:
            new.pop("status", None)
            if "status" in old:
                new["status"] = old["status"]  # shared, as above
        return new

    # --- Deleting ---------------------------------------------------------------------------

    def delete(self, rt: ResourceType, namespace: str | None, name: str, *,
               propagation: str | None = None, preconditions: Mapping[str, Any] | None = None,
               grace_seconds: int | None = None) -> tuple[Obj, bool]:
        """DELETE: (the object as last seen, whether it is gone already). An object that is
        gone is answered as it was stored, uncopied (nothing stores it any more; the caller
        only reads it)."""
        srt = self._storage_type(rt)
        with self.lock:
            key = (namespace or "", name)
            obj = self._objects[srt.key].get(key)
            if obj is None:
                raise ApiError.not_found(rt.group, rt.plural, name)
            meta = obj["metadata"]
            for field in ("uid", "resourceVersion"):
                wanted = (preconditions or {}).get(field)
                if wanted and wanted != meta.get(field):
                    raise ApiError.conflict(rt.group, rt.plural, name)
            # Jobs keep their pods unless told otherwise: batch/v1's default is orphan.
            policy = propagation or ("Orphan" if srt.key == ("batch", "jobs") else "Background")
            if policy not in ("Orphan", "Background", "Foreground"):
                raise ApiError.bad_request(f"invalid propagationPolicy {policy!r}")
            if policy == "Orphan":
                self._orphan(meta["uid"])
            if srt.key == ("", "namespaces"):
                return self._delete_namespace(srt, name), False
            if srt.key == ("", "pods") and self.graceful_pods and grace_seconds != 0 \
                    and (obj.get("spec") or {}).get("nodeName") \
                    and (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed") \
                    and not meta.get("deletionTimestamp"):
                grace = 30 if grace_seconds is None else grace_seconds
                return self._mark_deleting(srt, obj, [], grace), False
            if meta.get("deletionTimestamp"):  # already being deleted
                if grace_seconds == 0 and not meta.get("finalizers"):
                    last = _view(rt, obj)
                    self._remove(srt, namespace, name)
                    return last, True  # type: ignore[return-value]
                return clone(_view(rt, obj)), False  # type: ignore[arg-type]
            if policy == "Foreground" and self._owned.get(meta["uid"]):
                marked = self._mark_deleting(srt, obj, ["foregroundDeletion"])
                for dep_key, dep_ns, dep_name in list(self._owned[meta["uid"]]):
                    self._delete_quiet(dep_key, dep_ns, dep_name, "Foreground")
                self._release_foreground(meta["uid"])
                return marked, key not in self._objects[srt.key]
            if meta.get("finalizers"):
                return self._mark_deleting(srt, obj, []), False
            last = _view(rt, obj)
            self._remove(srt, namespace, name)
            return last, True  # type: ignore[return-value]

    def delete_collection(self, rt: ResourceType, namespace: str | None,
                          label_selector: str | None, field_selector: str | None,
                          propagation: str | None = None) -> list[Obj]:
        items, _, _ = self.list(rt, namespace, label_selector, field_selector)
        gone = []
        for item in items:
            meta = item["metadata"]
            with contextlib.suppress(ApiError):
                gone.append(self.delete(rt, meta.get("namespace"), meta["name"],
                                        propagation=propagation)[0])
        return gone

    def _mark_deleting(self, rt: ResourceType, obj: Obj, add_finalizers: list[str],
                       grace: int = 0) -> Obj:
        meta = obj["metadata"]
        new = clone(obj)
        new_meta = new["metadata"]
        new_meta.setdefault("deletionTimestamp", now())
        new_meta.setdefault("deletionGracePeriodSeconds", grace)
        finalizers = list(meta.get("finalizers") or [])
        new_meta["finalizers"] = finalizers + [f for f in add_finalizers if f not in finalizers]
        if not new_meta["finalizers"]:
            new_meta.pop("finalizers")
        if new == obj:
            return clone(obj)
        self._rv += 1
        new_meta["resourceVersion"] = str(self._rv)
        self._objects[rt.key][(meta.get("namespace", ""), meta["name"])] = new
        self._emit("MODIFIED", rt, new, obj)
        return clone(_view(rt, new))  # type: ignore[arg-type]

    def _remove(self, rt: ResourceType, namespace: str | None, name: str) -> None:
        """Take an object out of storage, then collect what it owned."""
        obj = self._objects[rt.key].pop((namespace or "", name), None)
        if obj is None:
            return
        self._rv += 1
        # Shares all but its metadata with the stored object, which nothing changes.
        gone = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self._rv)}}
        self._index_owners(rt.key, None, obj)
        uid = obj["metadata"]["uid"]
        self._uids.pop(uid, None)
        if rt.key == ("", "pods"):
            self._logs.pop((namespace or "", name), None)
        self._emit("DELETED", rt, gone, obj)
        for dep_key, dep_ns, dep_name in list(self._owned.pop(uid, set())):
            dependent = self._objects[dep_key].get((dep_ns, dep_name))
            if dependent is not None and not self._has_live_owner(dependent):
                self._delete_quiet(dep_key, dep_ns, dep_name, "Background")
        for ref in obj["metadata"].get("ownerReferences") or []:
            self._release_foreground(ref.get("uid"))
        if rt.plural == "customresourcedefinitions":
            self._unregister_crd(obj)
        if namespace:
            self._finish_namespace(namespace)

    def _delete_quiet(self, key: Key, namespace: str, name: str, policy: str) -> None:
        rt = self._type_of(key)
        with contextlib.suppress(ApiError):
            self.delete(rt, namespace or None, name, propagation=policy)

    def _collect_if_ownerless(self, rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        """Delete (propagation Background) an object just written with owners none of
        which exists, as Kubernetes' garbage collector does: an owner deleted before its
        dependent was created, or before an update named it, leaves the dependent nobody
        else would collect (`_remove` collects those that exist when their owner goes).
        Here it goes within the write that made it; Kubernetes' collector takes a moment."""
        refs = obj["metadata"].get("ownerReferences")
        if not refs or (old is not None and refs == old["metadata"].get("ownerReferences")):
            return
        if not self._has_live_owner(obj):
            meta = obj["metadata"]
            self._delete_quiet(rt.key, meta.get("namespace", ""), meta["name"], "Background")

    def _has_live_owner(self, obj: Obj) -> bool:
        owners = {ref.get("uid") for ref in obj["metadata"].get("ownerReferences") or []}
        return any(uid in self._uids for uid in owners)

    def _index_owners(self, key: Key, new: Obj | None, old: Obj | None) -> None:
        for obj, add in ((old, False), (new, True)):
            if obj is None:
                continue
            meta = obj["metadata"]
            entry = (key, meta.get("namespace", ""), meta["name"])
            for ref in meta.get("ownerReferences") or []:
                if add:
                    self._owned[ref["uid"]].add(entry)
                else:
                    self._owned.get(ref["uid"], set()).discard(entry)

    def _orphan(self, uid: str) -> None:
        for dep_key, dep_ns, dep_name in list(self._owned.get(uid, set())):
            rt = self._type_of(dep_key)

            def drop(obj: Obj, uid: str = uid) -> None:
                refs = [r for r in obj["metadata"].get("ownerReferences") or []
                        if r.get("uid") != uid]
                obj["metadata"]["ownerReferences"] = refs
                if not refs:
                    obj["metadata"].pop("ownerReferences")
            with contextlib.suppress(ApiError):
                self.mutate(rt, dep_ns or None, dep_name, drop)

    def _release_foreground(self, owner_uid: str | None) -> None:
        """Drop ``foregroundDeletion`` from an owner once none of its dependents is left."""
        if not owner_uid or self._owned.get(owner_uid) or owner_uid not in self._uids:
            return
        key, ns, name = self._uids[owner_uid]
        if "foregroundDeletion" in (self._objects[key][(ns, name)]["metadata"].get("finalizers")
                                    or []):
            rt = self._type_of(key)
            self.mutate(rt, ns or None, name, lambda o: o["metadata"].update(
                finalizers=[f for f in o["metadata"]["finalizers"] if f != "foregroundDeletion"]))

    def drop_finalizers(self, namespace: str) -> None:
        """Remove every finalizer in a namespace (a test's cleanup when no controller will)."""
        with self.lock:
            found = [(key, name) for key, objs in self._objects.items()
                     for (ns, name), obj in objs.items()
                     if ns == namespace and obj["metadata"].get("finalizers")]
            for key, name in found:
                with contextlib.suppress(ApiError):
                    self.mutate(self._type_of(key), namespace, name,
                                lambda o: o["metadata"].pop("finalizers", None))

    # --- Namespaces -------------------------------------------------------------------------

    def _delete_namespace(self, rt: ResourceType, name: str) -> Obj:
        obj = self._objects[rt.key][("", name)]
        marked = self._mark_deleting(rt, obj, [])
        self.mutate(rt, None, name, lambda o: o.setdefault("status", {}).update(
            phase="Terminating"), subresource="status")
        for key, objs in list(self._objects.items()):
            for (ns, obj_name) in list(objs):
                if ns == name:
                    self._delete_quiet(key, ns, obj_name, "Background")
        self._finish_namespace(name)
        return marked

    def _finish_namespace(self, name: str) -> None:
        ns = self._objects[("", "namespaces")].get(("", name))
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        if any(k[0] == name for objs in self._objects.values() for k in objs):
            return
        self._remove(self.resource("", "v1", "namespaces"), None, name)


def _spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def validate_labels(kind: str, group: str, name: str, meta: Mapping[str, Any]) -> None:
    """Label keys and values, and the size of annotations, as the apiserver checks them."""
    causes = []
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, label = key.rpartition("/")
        if not _LABEL_NAME.match(label) or len(label) > 63 or len(prefix) > 253:
            causes.append(("metadata.labels", f"Invalid value: {key!r}: name part must "
                                              "consist of alphanumeric characters"))
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            causes.append(("metadata.labels", f"Invalid value: {value!r}: a valid label "
                                              "must be an empty string or consist of "
                                              "alphanumeric characters, '-', '_' or '.', "
                                              "and must start and end with an alphanumeric "
                                              "character (at most 63)"))
    size = sum(len(k) + len(str(v)) for k, v in (meta.get("annotations") or {}).items())
    if size > ANNOTATIONS_MAX:
        causes.append(("metadata.annotations",
                       f"Too long: must have at most {ANNOTATIONS_MAX} bytes"))
    name_value = meta.get("name", "")
    if len(name_value) > 253 or not _SUBDOMAIN.match(name_value):
        causes.append(("metadata.name", f"Invalid value: {name_value!r}: a lowercase RFC 1123 "
                                        "subdomain must consist of lower case alphanumeric "
                                        "characters, '-' or '.'"))
    if causes:
        raise ApiError.invalid(kind, group, name, causes)
