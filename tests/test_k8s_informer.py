"""proctor.k8s.informer: a list and a watch keep a cache of pods or events.

First the cache's reaction to watch events (no thread, no API), then the watch thread with
fake watches (errors, 410, stop), then the real thing against the test cluster over HTTP.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

import pytest

from cluster.emulator import Cluster
from proctor.k8s.api import Kube
from proctor.k8s.informer import Expired, Informer

pytest_plugins = ["cluster.fixtures"]

Obj = dict[str, Any]
POD_LABELS = {"app": "informer-test"}
WARNINGS = {"type": "Warning"}


def eventually(check: Callable[[], Any], timeout: float = 3.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what or check}")
        time.sleep(0.01)


# --- The cache (apply) ----------------------------------------------------------------------


def obj(name: str, group: str | None = "g1", rv: int = 1, **extra: Any) -> Obj:
    labels = {} if group is None else {"group": group}
    return {"metadata": {"name": name, "labels": labels, "resourceVersion": str(rv)}, **extra}


def by_label(o: Mapping[str, Any]) -> str | None:
    return (o["metadata"].get("labels") or {}).get("group")


def no_list() -> Mapping[str, Any]:
    raise AssertionError("not listed in this test")


def no_watch(since: str, timeout_s: int) -> Any:
    raise AssertionError("not watched in this test")


def bare() -> Informer:
    return Informer("test", no_list, no_watch, by_label)


def names(informer: Informer, group: str) -> list[str]:
    return sorted(o["metadata"]["name"] for o in informer.get(group))


def test_added_modified_and_deleted_objects() -> None:
    informer = bare()
    informer.apply([{"type": "ADDED", "object": obj("a", rv=2)},
                    {"type": "ADDED", "object": obj("b", rv=3)},
                    {"type": "ADDED", "object": obj("c", "g2", rv=4)}])
    assert names(informer, "g1") == ["a", "b"]
    assert names(informer, "g2") == ["c"]
    assert informer.resource_version == "4"

    changed = obj("a", rv=5, status={"phase": "Running"})
    informer.apply([{"type": "MODIFIED", "object": changed}])
    assert names(informer, "g1") == ["a", "b"]  # replaced, not added twice
    assert [o for o in informer.get("g1") if o["metadata"]["name"] == "a"] == [changed]
    assert informer.resource_version == "5"

    version = informer.version
    informer.apply([{"type": "DELETED", "object": obj("b", rv=6)},
                    {"type": "DELETED", "object": obj("c", "g2", rv=7)}])
    assert informer.version == version + 2  # what memos of the cache key on
    assert names(informer, "g1") == ["a"]
    assert informer.get("g2") == []
    assert "g2" not in informer._groups  # an emptied group is dropped, not kept empty
    assert informer.resource_version == "7"


def test_a_groups_version_moves_with_what_get_answers_for_it_and_no_other() -> None:
    informer = bare()
    assert informer.version_of("g1") == 0
    informer.apply([{"type": "ADDED", "object": obj("a", rv=2)},
                    {"type": "ADDED", "object": obj("c", "g2", rv=3)}])
    seen = {g: informer.version_of(g) for g in ("g1", "g2")}
    assert 0 not in seen.values()
    informer.apply([{"type": "MODIFIED", "object": obj("a", rv=4)}])
    assert informer.version_of("g1") > seen["g1"] and informer.version_of("g2") == seen["g2"]
    seen = {g: informer.version_of(g) for g in ("g1", "g2")}
    informer.apply([{"type": "MODIFIED", "object": obj("a", "g2", rv=5)}])  # moved across
    assert informer.version_of("g1") == 0 and informer.version_of("g2") > seen["g2"]
    moved = informer.version_of("g2")
    informer.apply([{"type": "DELETED", "object": obj("c", "g2", rv=6)}])
    assert informer.version_of("g2") > moved
    informer.apply([{"type": "DELETED", "object": obj("a", "g2", rv=7)}])
    assert informer.version_of("g2") == 0 and informer._group_versions == {}  # none kept


def test_a_relist_moves_every_groups_version() -> None:
    listed = {"items": [obj("a", rv=1), obj("c", "g2", rv=1)], "metadata": {"resourceVersion": "1"}}
    informer = Informer("test", lambda: listed, no_watch, by_label)
    informer._relist()
    first = {g: informer.version_of(g) for g in ("g1", "g2")}
    informer._relist()
    assert all(informer.version_of(g) > v > 0 for g, v in first.items())


def test_each_change_is_told_with_its_kind_after_the_cache_has_it() -> None:
    told: list[tuple[str, str, list[str]]] = []
    informer = Informer("test", no_list, no_watch, by_label, on_change=lambda kind, o: told.append(
        (kind, o["metadata"]["name"], names(informer, "g1"))))
    informer.apply([{"type": "ADDED", "object": obj("a", rv=2)},
                    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "3"}}},
                    {"type": "MODIFIED", "object": obj("a", rv=4)},
                    {"type": "DELETED", "object": obj("a", rv=5)}])
    assert told == [("ADDED", "a", ["a"]), ("MODIFIED", "a", ["a"]), ("DELETED", "a", [])]


def test_a_modified_object_never_seen_is_added() -> None:
    informer = bare()
    informer.apply([{"type": "MODIFIED", "object": obj("a")}])
    assert names(informer, "g1") == ["a"]


def test_deleting_an_unknown_object_is_harmless() -> None:
    informer = bare()
    informer.apply([{"type": "ADDED", "object": obj("a", rv=1)},
                    {"type": "DELETED", "object": obj("zzz", rv=2)},
                    {"type": "DELETED", "object": {}}])
    assert names(informer, "g1") == ["a"]
    assert informer.resource_version == "2"


def test_an_object_moves_between_groups() -> None:
    informer = bare()
    informer.apply([{"type": "ADDED", "object": obj("a", "g1")},
                    {"type": "ADDED", "object": obj("b", "g1")}])
    informer.apply([{"type": "MODIFIED", "object": obj("a", "g2")}])
    assert names(informer, "g1") == ["b"]
    assert names(informer, "g2") == ["a"]
    informer.apply([{"type": "MODIFIED", "object": obj("b", "g2")}])
    assert informer.get("g1") == []
    assert names(informer, "g2") == ["a", "b"]
    # Deleted from the group it is in now.
    informer.apply([{"type": "DELETED", "object": obj("a", "g2")}])
    assert names(informer, "g2") == ["b"]


def test_objects_without_a_group_are_not_kept() -> None:
    informer = bare()
    informer.apply([{"type": "ADDED", "object": obj("a", None)},
                    {"type": "ADDED", "object": obj("b", "g1")}])
    assert informer._groups == {"g1": {"b": obj("b", "g1")}}
    # One that leaves every group leaves the cache; one that joins one is kept.
    informer.apply([{"type": "MODIFIED", "object": obj("b", None)},
                    {"type": "MODIFIED", "object": obj("a", "g1")}])
    assert names(informer, "g1") == ["a"]
    assert informer._group_by_name == {"a": "g1"}
    assert informer.get(None) == []


def test_keep_holds_a_digest_of_each_object_and_leaves_out_what_it_cannot_read() -> None:
    def phase(o: Mapping[str, Any]) -> str | None:
        if o.get("status") == "garbled":
            raise ValueError("unreadable")
        return (o.get("status") or {}).get("phase")

    informer = Informer("test", no_list, no_watch, by_label, keep=phase)
    informer.apply([{"type": "ADDED", "object": obj("a", status={"phase": "Running"})},
                    {"type": "ADDED", "object": obj("b")},  # kept as None: not held
                    {"type": "ADDED", "object": obj("c", status="garbled")}])
    assert informer.get("g1") == ["Running"]
    informer.apply([{"type": "MODIFIED", "object": obj("a", status="garbled")},
                    {"type": "MODIFIED", "object": obj("c", status={"phase": "Done"})}])
    assert informer.get("g1") == ["Done"]  # the unreadable change dropped the old digest


def test_a_bookmark_only_moves_the_resource_version() -> None:
    informer = bare()
    informer.apply([{"type": "ADDED", "object": obj("a", rv=3)}])
    version = informer.version
    informer.apply([{"type": "BOOKMARK",
                     "object": {"kind": "Pod", "metadata": {"resourceVersion": "42"}}}])
    assert informer.resource_version == "42"
    assert informer.version == version  # the cache holds what it held
    assert informer._groups == {"g1": {"a": obj("a", rv=3)}}


def test_get_answers_a_snapshot() -> None:
    informer = bare()
    informer.apply([{"type": "ADDED", "object": obj("a")}])
    snapshot = informer.get("g1")
    informer.apply([{"type": "ADDED", "object": obj("b")}])
    snapshot.clear()
    assert names(informer, "g1") == ["a", "b"]
    assert informer.get("unknown") == []


def test_a_410_error_raises_expired() -> None:
    informer = bare()
    gone = {"type": "ERROR", "object": {"kind": "Status", "status": "Failure", "code": 410,
                                        "reason": "Expired",
                                        "message": "too old resource version: 1 (5)"}}
    with pytest.raises(Expired, match="too old resource version"):
        informer.apply([{"type": "ADDED", "object": obj("a", rv=2)}, gone,
                        {"type": "ADDED", "object": obj("never", rv=9)}])
    assert names(informer, "g1") == ["a"]  # what came before the error is taken
    assert informer.resource_version == "2"


def test_another_error_raises() -> None:
    informer = bare()
    error = {"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "boom"}}
    with pytest.raises(RuntimeError, match="boom") as raised:
        informer.apply([error])
    assert not isinstance(raised.value, Expired)
    with pytest.raises(RuntimeError):
        informer.apply([{"type": "ERROR"}])  # no object at all


def test_a_relist_replaces_the_cache() -> None:
    listed = {"items": [obj("a", rv=3), obj("b", "g2", rv=4), obj("n", None)],
              "metadata": {"resourceVersion": "10"}}
    informer = Informer("test", lambda: listed, no_watch, by_label)
    informer.apply([{"type": "ADDED", "object": obj("stale", rv=1)}])
    informer._relist()
    assert names(informer, "g1") == ["a"]
    assert names(informer, "g2") == ["b"]
    assert informer._group_by_name == {"a": "g1", "b": "g2"}
    assert informer.resource_version == "10"
    informer.apply([{"type": "MODIFIED", "object": obj("a", "g2", rv=11)}])
    assert names(informer, "g2") == ["a", "b"]


# --- The watch thread, with fake watches ----------------------------------------------------


class FakeStream:
    """A watch: the given events, then (if ``hang``) blocked until closed."""

    def __init__(self, events: list[Obj], hang: bool = False):
        self._queue: queue.Queue[Obj | None] = queue.Queue()
        for event in events:
            self._queue.put(event)
        if not hang:
            self._queue.put(None)
        self.closed = threading.Event()

    def __iter__(self) -> Iterator[Obj]:
        while (event := self._queue.get()) is not None:
            yield event

    def push(self, *events: Obj) -> None:
        for event in events:
            self._queue.put(event)

    def close(self) -> None:
        self.closed.set()
        self._queue.put(None)


class FakeApi:
    """A lister and a watcher answering scripted lists and watches, recording the calls."""

    def __init__(self, lists: list[Any], watches: list[Any]):
        self.lists, self.watches = lists, watches
        self.list_calls = 0
        self.watch_calls: list[tuple[str, int]] = []
        self.opened: list[FakeStream] = []

    def lister(self) -> Mapping[str, Any]:
        self.list_calls += 1
        answer = self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def watcher(self, since: str, timeout_s: int) -> FakeStream:
        self.watch_calls.append((since, timeout_s))
        answer = self.watches.pop(0) if self.watches else FakeStream([], hang=True)
        if isinstance(answer, Exception):
            raise answer
        self.opened.append(answer)
        return answer


def listing(rv: int, *objects: Obj) -> Obj:
    return {"items": list(objects), "metadata": {"resourceVersion": str(rv)}}


@pytest.fixture
def started() -> Iterator[list[Informer]]:
    informers: list[Informer] = []
    yield informers
    for informer in informers:
        if not informer._stopped.is_set():  # see test_stop_twice_is_harmless
            informer.stop()


def start(api: FakeApi, started: list[Informer], **options: Any) -> Informer:
    informer = Informer("fake", api.lister, api.watcher, by_label, **options)
    started.append(informer)
    informer.start()
    return informer


def test_the_watch_goes_on_from_where_the_list_and_each_watch_ended(
        started: list[Informer]) -> None:
    api = FakeApi([listing(5, obj("a", rv=4))],
                  [FakeStream([{"type": "ADDED", "object": obj("b", rv=6)}]),
                   FakeStream([]),  # ended with nothing: same place again
                   FakeStream([{"type": "DELETED", "object": obj("a", rv=8)}])])
    informer = start(api, started, timeout_s=7)
    eventually(lambda: len(api.watch_calls) == 4, what="the fourth watch")
    assert api.watch_calls == [("5", 7), ("6", 7), ("6", 7), ("8", 7)]
    assert names(informer, "g1") == ["b"]
    assert api.list_calls == 1


def test_a_410_lists_again_and_watches_from_the_new_list(started: list[Informer]) -> None:
    gone = {"type": "ERROR", "object": {"code": 410, "message": "too old"}}
    first = FakeStream([], hang=True)
    api = FakeApi([listing(5, obj("a", rv=4), obj("b", rv=5)),
                   listing(20, obj("b", rv=5), obj("c", rv=19))], [first])
    informer = start(api, started)
    assert names(informer, "g1") == ["a", "b"]
    first.push({"type": "ADDED", "object": obj("x", rv=6)}, gone)
    eventually(lambda: len(api.watch_calls) == 2, what="the watch after the relist")
    assert api.list_calls == 2
    assert api.watch_calls[1][0] == "20"
    assert names(informer, "g1") == ["b", "c"]  # "a" and "x" went while it was not watched


def test_a_server_that_keeps_answering_410_is_not_listed_in_a_tight_loop(
        started: list[Informer]) -> None:
    gone = {"type": "ERROR", "object": {"code": 410, "message": "too old"}}
    api = FakeApi([listing(5)], [FakeStream([gone]) for _ in range(1000)])
    start(api, started, retry_s=0.2)
    time.sleep(0.5)
    assert 2 <= api.list_calls <= 4  # a list every retry_s, not a thousand


def test_a_failed_relist_is_tried_again(started: list[Informer]) -> None:
    gone = {"type": "ERROR", "object": {"code": 410}}
    api = FakeApi([listing(5), OSError("refused"), OSError("refused"), listing(9, obj("a"))],
                  [FakeStream([gone])])
    informer = start(api, started, retry_s=0.01)
    eventually(lambda: len(api.watch_calls) == 2, what="the watch after the relist")
    assert api.list_calls == 4
    assert api.watch_calls[1][0] == "9"
    assert names(informer, "g1") == ["a"]


def test_a_failed_watch_is_retried_from_the_same_place(started: list[Informer]) -> None:
    error = {"type": "ERROR", "object": {"code": 500, "message": "internal"}}
    api = FakeApi([listing(5)],
                  [FakeStream([{"type": "ADDED", "object": obj("a", rv=6)}, error]),
                   ConnectionError("reset"),
                   FakeStream([{"type": "ADDED", "object": obj("b", rv=7)}])])
    informer = start(api, started, retry_s=0.01)
    eventually(lambda: len(api.watch_calls) == 4, what="the watch after the failures")
    assert [since for since, _ in api.watch_calls] == ["5", "6", "6", "7"]
    assert api.list_calls == 1  # only a 410 lists again
    assert names(informer, "g1") == ["a", "b"]


def test_stop_closes_an_idle_watch_and_ends_the_thread() -> None:
    api = FakeApi([listing(5)], [FakeStream([], hang=True)])
    informer = Informer("fake", api.lister, api.watcher, by_label)
    informer.start()
    eventually(lambda: api.opened, what="the watch")
    began = time.monotonic()
    informer.stop()
    assert time.monotonic() - began < 2
    assert api.opened[0].closed.is_set()
    assert informer._thread is not None and not informer._thread.is_alive()
    assert len(api.watch_calls) == 1  # not reopened


def test_stop_ends_the_thread_while_it_waits_to_retry() -> None:
    api = FakeApi([listing(5)], [ConnectionError("refused")])
    informer = Informer("fake", api.lister, api.watcher, by_label, retry_s=60)
    informer.start()
    eventually(lambda: api.watch_calls, what="the failed watch")
    began = time.monotonic()
    informer.stop()
    assert time.monotonic() - began < 2
    assert informer._thread is not None and not informer._thread.is_alive()
    assert len(api.watch_calls) == 1


def test_stop_ends_the_thread_while_a_relist_keeps_failing() -> None:
    gone = {"type": "ERROR", "object": {"code": 410}}
    api = FakeApi([listing(5), OSError("refused")], [FakeStream([gone])])
    informer = Informer("fake", api.lister, api.watcher, by_label, retry_s=60)
    informer.start()
    eventually(lambda: api.list_calls == 2, what="the failed relist")
    began = time.monotonic()
    informer.stop()
    assert time.monotonic() - began < 2
    assert informer._thread is not None and not informer._thread.is_alive()


def test_a_watch_that_opens_as_stop_is_called_is_closed() -> None:
    informer: Informer
    stream = FakeStream([], hang=True)

    def watcher(since: str, timeout_s: int) -> FakeStream:
        informer._stopped.set()  # stop() came while the request was on its way
        return stream

    informer = Informer("fake", lambda: listing(5), watcher, by_label)
    informer.start()
    assert informer._thread is not None
    informer._thread.join(2)
    assert not informer._thread.is_alive()
    assert stream.closed.is_set()


def test_a_failed_first_list_raises_from_start() -> None:
    api = FakeApi([OSError("refused")], [])
    informer = Informer("fake", api.lister, api.watcher, by_label)
    with pytest.raises(OSError):
        informer.start()
    assert informer._thread is None
    informer.stop()  # harmless


# --- Against the test cluster, over HTTP ----------------------------------------------------


@pytest.fixture
def kube(kube_client: Any) -> Kube:
    return Kube(kube_client)


def event(namespace: str, name: str, about: str, kind: str = "Warning",
          reason: str = "Failed") -> Obj:
    return {"metadata": {"name": name, "namespace": namespace},
            "involvedObject": {"kind": "Pod", "name": about, "namespace": namespace},
            "type": kind, "reason": reason, "message": f"{name} about {about}"}


def pod(name: str, group: str, **labels: str) -> Obj:
    # Bound to a node no kubelet runs: the test cluster leaves it alone (never scheduled,
    # never run, never changed), so only this test writes it.
    return {"metadata": {"name": name, "labels": {**POD_LABELS, "group": group, **labels}},
            "spec": {"nodeName": "no-such-node",
                     "containers": [{"name": "main", "image": "busybox"}]}}


def event_names(informer: Informer, about: str) -> set[str]:
    return {e["metadata"]["name"] for e in informer.get(about)}


def about(e: Mapping[str, Any]) -> str:
    return e["involvedObject"]["name"]


def warnings_informer(kube: Kube, namespace: str, started: list[Informer],
                      watcher: Callable[[str, int], Any] | None = None,
                      lister: Callable[[], Mapping[str, Any]] | None = None,
                      **options: Any) -> Informer:
    informer = Informer(f"Warning events of {namespace}",
                        lister or partial(kube.list_events, namespace, WARNINGS),
                        watcher or partial(kube.watch_events, namespace, WARNINGS),
                        about, **options)
    started.append(informer)
    informer.start()
    return informer


def test_the_cache_follows_pods(kube: Kube, k8s_namespace: str,
                                started: list[Informer]) -> None:
    ns, core = k8s_namespace, kube.core
    core.create_namespaced_pod(ns, pod("a1", "a"))
    core.create_namespaced_pod(ns, pod("b1", "b"))
    core.create_namespaced_pod(ns, {"metadata": {"name": "other", "labels": {"group": "a"}},
                                    "spec": {"nodeName": "no-such-node",
                                             "containers": [{"name": "c", "image": "x"}]}})
    informer = Informer(f"pods of {ns}", partial(kube.list_pods, ns, POD_LABELS),
                        partial(kube.watch_pods, ns, POD_LABELS),
                        lambda p: (p["metadata"].get("labels") or {}).get("group"))
    started.append(informer)
    informer.start()
    # Complete as start() returns; the pod outside the label selector is not there.
    assert names(informer, "a") == ["a1"]
    assert names(informer, "b") == ["b1"]
    assert informer._thread is not None and informer._thread.is_alive()

    core.create_namespaced_pod(ns, pod("a2", "a"))
    eventually(lambda: names(informer, "a") == ["a1", "a2"], what="the created pod")

    core.patch_namespaced_pod("a1", ns, {"metadata": {"annotations": {"seen": "yes"}}})
    eventually(lambda: [p["metadata"].get("annotations") for p in informer.get("a")
                        if p["metadata"]["name"] == "a1"] == [{"seen": "yes"}],
               what="the changed pod")

    core.patch_namespaced_pod("b1", ns, {"metadata": {"labels": {"group": "a"}}})
    eventually(lambda: names(informer, "a") == ["a1", "a2", "b1"], what="the moved pod")
    assert informer.get("b") == []

    core.delete_namespaced_pod("a2", ns)
    eventually(lambda: names(informer, "a") == ["a1", "b1"], what="the deleted pod")

    # A pod whose labels leave the selector leaves the cache (the watch says DELETED).
    left = core.patch_namespaced_pod("a1", ns,
                                     {"metadata": {"labels": {"app": "something-else"}}})
    eventually(lambda: names(informer, "a") == ["b1"], what="the pod out of the selector")
    assert informer.resource_version == left.metadata.resource_version


def test_only_warning_events_are_kept(kube: Kube, k8s_namespace: str,
                                      started: list[Informer]) -> None:
    ns, core = k8s_namespace, kube.core
    core.create_namespaced_event(ns, event(ns, "w1", "p1"))
    core.create_namespaced_event(ns, event(ns, "n1", "p1", "Normal", "Pulled"))
    core.create_namespaced_event(ns, event(ns, "w2", "p2"))
    informer = warnings_informer(kube, ns, started)
    assert event_names(informer, "p1") == {"w1"}
    assert event_names(informer, "p2") == {"w2"}

    core.create_namespaced_event(ns, event(ns, "n2", "p1", "Normal", "Started"))
    core.create_namespaced_event(ns, event(ns, "w3", "p1"))
    eventually(lambda: event_names(informer, "p1") == {"w1", "w3"}, what="the new Warning")
    # The Normal one, created before it, was never sent: the watch is in order.
    assert all(e["type"] == "Warning" for e in informer.get("p1"))

    core.patch_namespaced_event("w1", ns, {"message": "again", "count": 2})
    eventually(lambda: [e.get("count") for e in informer.get("p1")
                        if e["metadata"]["name"] == "w1"] == [2], what="the changed event")

    # A Warning that turns Normal leaves; a Normal that turns Warning comes in.
    core.patch_namespaced_event("w1", ns, {"type": "Normal"})
    core.patch_namespaced_event("n1", ns, {"type": "Warning"})
    eventually(lambda: event_names(informer, "p1") == {"n1", "w3"}, what="the retyped events")

    core.delete_namespaced_event("w2", ns)
    eventually(lambda: informer.get("p2") == [], what="the deleted event")


def test_stop_ends_an_idle_watch_promptly(kube: Kube, k8s_namespace: str,
                                          started: list[Informer]) -> None:
    informer = warnings_informer(kube, k8s_namespace, started, timeout_s=300)
    thread = informer._thread
    assert thread is not None
    eventually(lambda: informer._stream is not None, what="the watch")
    time.sleep(0.2)  # the watch is open and idle: its thread is blocked reading it
    assert thread.is_alive()
    began = time.monotonic()
    informer.stop()
    thread.join(5)
    assert not thread.is_alive()
    assert time.monotonic() - began < 2


def two_warnings_and_a_watcher(kube: Kube, ns: str, calls: list[str],
                               between: Callable[[], None]) -> Callable[[str, int], Any]:
    """Warning events w1 and w2 about pod p, and a watcher of them that records where
    each watch starts and calls ``between`` before the second one."""
    for name in ("w1", "w2"):
        kube.core.create_namespaced_event(ns, event(ns, name, "p"))

    def watcher(since: str, timeout_s: int) -> Any:
        calls.append(since)
        if len(calls) == 2:
            between()
        return kube.watch_events(ns, WARNINGS, since, timeout_s)
    return watcher


def test_a_watch_that_ends_is_reopened_without_losing_changes(
        test_cluster: Cluster, kube: Kube, k8s_namespace: str,
        started: list[Informer]) -> None:
    ns, store = k8s_namespace, test_cluster.store
    events_rt = store.resource("", "v1", "events")
    calls: list[str] = []

    def between() -> None:
        # Between two watches: changes no open watch sees, only a resumed one.
        store.create(events_rt, ns, event(ns, "w3", "p"))
        store.patch(events_rt, ns, "w1", {"message": "changed"})
        store.delete(events_rt, ns, "w2")

    watcher = two_warnings_and_a_watcher(kube, ns, calls, between)
    informer = warnings_informer(kube, ns, started, watcher=watcher, timeout_s=1)
    listed_at = informer.resource_version
    eventually(lambda: len(calls) >= 2, timeout=4, what="the second watch")
    assert calls[:2] == [listed_at, listed_at]  # nothing happened in the first one
    eventually(lambda: event_names(informer, "p") == {"w1", "w3"}, what="the missed changes")
    assert [e["message"] for e in informer.get("p") if e["metadata"]["name"] == "w1"] == [
        "changed"]
    assert int(informer.resource_version) > int(listed_at)


def test_a_too_old_resource_version_lists_again(
        test_cluster: Cluster, kube: Kube, k8s_namespace: str,
        started: list[Informer]) -> None:
    ns, core, store = k8s_namespace, kube.core, test_cluster.store
    events_rt = store.resource("", "v1", "events")
    calls: list[str] = []
    lists: list[str] = []

    def lister() -> Mapping[str, Any]:
        listed = kube.list_events(ns, WARNINGS)
        lists.append(listed["metadata"]["resourceVersion"])
        return listed

    def between() -> None:
        # Changes while no watch is open, and the server's history trimmed past them:
        # resuming from `since` is no longer possible (410 Expired).
        store.create(events_rt, ns, event(ns, "w3", "p"))
        store.delete(events_rt, ns, "w2")
        with store.lock:
            store._log.clear()

    watcher = two_warnings_and_a_watcher(kube, ns, calls, between)
    informer = warnings_informer(kube, ns, started, watcher=watcher, lister=lister,
                                 timeout_s=1)
    assert event_names(informer, "p") == {"w1", "w2"}
    eventually(lambda: len(calls) >= 3, timeout=4, what="the watch after the relist")
    assert len(lists) == 2
    assert calls[2] == lists[1]  # resumed from the new list, not from the expired version
    assert int(lists[1]) > int(lists[0])
    assert event_names(informer, "p") == {"w1", "w3"}
    # And it goes on following.
    core.create_namespaced_event(ns, event(ns, "w4", "p"))
    eventually(lambda: event_names(informer, "p") == {"w1", "w3", "w4"}, what="a later event")


# stop() closes the last watch even when that watch has ended already: a response that
# urllib3 closed (a connection that broke, or an earlier stop()) must not make it raise, or
# the operator's close(), which stops its informers in turn, would leave the others running.


def test_stop_after_the_watch_connection_broke(kube: Kube, k8s_namespace: str,
                                               started: list[Informer]) -> None:
    informer = warnings_informer(kube, k8s_namespace, started, retry_s=30)
    eventually(lambda: informer._stream is not None, what="the watch")
    time.sleep(0.2)
    # The connection goes away under the open watch (an apiserver restarting, a reset):
    # the thread logs it and waits retry_s before watching again.
    informer._stream._response._connection.sock.shutdown(socket.SHUT_RDWR)  # type: ignore
    time.sleep(0.3)
    began = time.monotonic()
    informer.stop()
    assert informer._thread is not None and not informer._thread.is_alive()
    assert time.monotonic() - began < 2


def test_stop_twice_is_harmless(kube: Kube, k8s_namespace: str,
                                started: list[Informer]) -> None:
    informer = warnings_informer(kube, k8s_namespace, started)
    eventually(lambda: informer._stream is not None, what="the watch")
    time.sleep(0.2)
    informer.stop()
    informer.stop()
    assert informer._thread is not None and not informer._thread.is_alive()
