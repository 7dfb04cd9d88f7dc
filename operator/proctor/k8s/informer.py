"""A cache of one kind of object in one namespace, kept current by a list and a watch.

The operator reads the items' Jobs, their pods, the Warning events of their namespace and
the kept results on every pass. kopf's indexes would keep them too, but kopf handles each
event with its whole handler machinery (diff-base, progress storage, a logger per object,
a batching window of 0.1 s per object), about a millisecond an event, and a Job and its pod
change some twenty times between them. These objects are only read, never handled, so a
plain list and watch keeps them for a small part of that cost and tells the operator at
once (`on_change`) that a Job ended (`benchmarks/operator_sim.py`). Of a kept result (a
ConfigMap with the logs) the cache holds only the RunResult (`keep`).

One thread per informer follows the watch; a pass reads a snapshot with `get`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, Protocol

log = logging.getLogger("proctor.informer")
Obj = dict[str, Any]


class Stream(Protocol):
    def __iter__(self) -> Any: ...

    def close(self) -> None: ...


class Expired(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class Informer:
    """Objects grouped by ``group_of`` (objects it maps to None are not kept).

    ``lister()`` answers a list (``items`` and ``metadata.resourceVersion``);
    ``watcher(resource_version, timeout_s)`` opens a watch from there;
    ``on_change(kind, obj)``, if given, is called from the watch thread with each object
    added, changed or deleted (``kind``: ADDED, MODIFIED or DELETED);
    ``keep(obj)``, if given, is what the cache holds of each object (objects it maps to
    None are not held): a digest where the whole object is large and only a part is read.
    """

    def __init__(self, name: str, lister: Callable[[], Mapping[str, Any]],
                 watcher: Callable[[str, int], Stream],
                 group_of: Callable[[Mapping[str, Any]], Hashable | None], *,
                 timeout_s: int = 300, retry_s: float = 1.0,
                 on_change: Callable[[str, Mapping[str, Any]], None] | None = None,
                 keep: Callable[[Mapping[str, Any]], Any] | None = None):
        self.name = name
        self._lister, self._watcher, self._group_of = lister, watcher, group_of
        self._on_change, self._keep = on_change, keep
        self.timeout_s, self.retry_s = timeout_s, retry_s
        self._lock = threading.Lock()
        self._groups: dict[Hashable, dict[str, Any]] = {}
        self._group_by_name: dict[str, Hashable] = {}
        self.resource_version = ""
        self.version = 0
        """Moves with every change the cache takes in (memos of what it holds key on it)."""
        self._group_versions: dict[Hashable, int] = {}
        self._stopped = threading.Event()
        self._stream: Stream | None = None
        self._expired_at = float("-inf")
        self._thread: threading.Thread | None = None

    # --- the operator's side --------------------------------------------------------------

    def start(self) -> None:
        """List (the cache is complete when this returns), then follow the watch."""
        self._relist()
        self._thread = threading.Thread(target=self._follow, name=f"informer-{self.name}",
                                        daemon=True)
        self._thread.start()

    def get(self, group: Hashable) -> list[Any]:
        with self._lock:
            return list(self._groups.get(group, {}).values())

    def version_of(self, group: Hashable) -> int:
        """Moves whenever what `get(group)` answers changes (0 while it answers nothing):
        a memo keyed on it need not copy the group to see that it is the same."""
        with self._lock:
            return self._group_versions.get(group, 0)

    def stop(self) -> None:
        self._stopped.set()
        stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    # --- the watch thread -----------------------------------------------------------------

    def _kept(self, obj: Obj) -> Any:
        if self._keep is None:
            return obj
        try:
            return self._keep(obj)
        except Exception:  # one unreadable object must not stop the watch
            log.warning("%s: cannot read %s; leaving it out", self.name,
                        (obj.get("metadata") or {}).get("name"), exc_info=True)
            return None

    def _relist(self) -> None:
        listed = self._lister()
        groups: dict[Hashable, dict[str, Any]] = {}
        names: dict[str, Hashable] = {}
        for obj in listed.get("items") or []:
            _put(groups, names, self._group_of(obj), obj["metadata"]["name"], self._kept(obj))
        with self._lock:
            self._groups, self._group_by_name = groups, names
            self.resource_version = listed["metadata"]["resourceVersion"]
            self.version += 1
            self._group_versions = dict.fromkeys(groups, self.version)

    def _follow(self) -> None:
        while not self._stopped.is_set():
            try:
                self._stream = self._watcher(self.resource_version, self.timeout_s)
                if self._stopped.is_set():
                    self._stream.close()
                    return
                self.apply(self._stream)
            except Expired:
                if time.monotonic() - self._expired_at < self.retry_s:
                    # Two in a row: a server that keeps answering 410 must not make this
                    # thread list it in a tight loop.
                    self._stopped.wait(self.retry_s)
                self._expired_at = time.monotonic()
                self._relist_soon()
            except Exception:
                if self._stopped.is_set():
                    return
                log.warning("The %s watch failed; resuming from %s", self.name,
                            self.resource_version, exc_info=True)
                self._stopped.wait(self.retry_s)

    def _relist_soon(self) -> None:
        while not self._stopped.is_set():
            try:
                self._relist()
                return
            except Exception:
                log.warning("Listing %s failed; trying again", self.name, exc_info=True)
                self._stopped.wait(self.retry_s)

    def apply(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Take watch events into the cache (raises Expired on a 410)."""
        for event in events:
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise Expired(obj.get("message", ""))
                raise RuntimeError(f"the {self.name} watch answered an error: {obj}")
            meta = obj.get("metadata") or {}
            kept = self._kept(obj) if kind in ("ADDED", "MODIFIED") else None
            with self._lock:
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    before = self._group_by_name.get(meta.get("name"))
                    if kind == "DELETED":
                        _drop(self._groups, self._group_by_name, meta.get("name"))
                    else:
                        _put(self._groups, self._group_by_name, self._group_of(obj),
                             meta["name"], kept)
                    self.version += 1
                    for group in (before, self._group_by_name.get(meta.get("name"))):
                        if group in self._groups:
                            self._group_versions[group] = self.version
                        else:
                            self._group_versions.pop(group, None)
                if meta.get("resourceVersion"):
                    self.resource_version = meta["resourceVersion"]
            if self._on_change is not None and kind in ("ADDED", "MODIFIED", "DELETED"):
                self._on_change(kind, obj)


def _drop(groups: dict[Hashable, dict[str, Any]], names: dict[str, Hashable],
          name: str | None) -> None:
    if name in names:
        group = names.pop(name)
        members = groups.get(group)
        if members is not None:
            members.pop(name, None)
            if not members:
                del groups[group]


def _put(groups: dict[Hashable, dict[str, Any]], names: dict[str, Hashable],
         group: Hashable | None, name: str, value: Any) -> None:
    _drop(groups, names, name)
    if group is not None and value is not None:
        groups.setdefault(group, {})[name] = value
        names[name] = group
