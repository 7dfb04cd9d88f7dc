"""A Kubernetes API server over real HTTP, built on kmock, close enough for kopf and the
official ``kubernetes`` client (see ``store`` for the semantics).

``ClusterEmulator`` is a ``kmock.KubernetesScaffold``: kmock serves ``/version`` and renders
errors; discovery and OpenAPI v3 are served from the kinds the store knows (``discovery``),
and every resource path from ``Store``, because kmock's own emulator lacks what kubectl and
the operator need (see the module ``cluster`` docstring for the list of its quirks). A
resource read asked for as a Table gets one (``tables``); a watch with
``sendInitialEvents=true`` ends its initial events with the bookmark that says so; a write
with ``fieldValidation=Strict`` naming a field its schema does not know is refused (400).

``Cluster`` runs it on a free loopback port in a thread of its own, with a kubelet (Job
controller, scheduler, kubelet: ``cluster.kubelet``), and writes a kubeconfig for it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import kmock
import orjson
import yaml
from aiohttp.web_request import BaseRequest

from cluster import discovery, tables
from cluster.errors import ApiError
from cluster.resources import unknown_fields
from cluster.store import Store

log = logging.getLogger("cluster.emulator")
MAX_REQUEST_BYTES = 3 * 1024 * 1024
"""The apiserver accepts request bodies up to 3 MiB (etcd then refuses objects over 1.5)."""
_LOGGED = aiohttp.web.RequestKey("logged", bool)
SERVER_VERSION = {"major": "1", "minor": "33", "gitVersion": "v1.33.0-proctor-emulator",
                  "gitCommit": "0000000000000000000000000000000000000000",
                  "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                  "goVersion": "go1.24.0", "compiler": "gc", "platform": "linux/amd64"}


@dataclass(frozen=True)
class Route:
    group: str
    version: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None


def parse_route(path: str) -> Route | None:
    """A resource path (``/api/v1/namespaces/ns/pods/name/log``), or None for any other."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    return Route(group, version, rest[0], namespace, rest[1] if len(rest) > 1 else None,
                 "/".join(rest[2:]) or None)


def _json(body: Any, status: int = 200) -> aiohttp.web.Response:
    return aiohttp.web.Response(body=orjson.dumps(body), status=status,
                                content_type="application/json")


def _line(event: Any) -> bytes:
    """One watch event as its line of the stream. orjson: a test cluster in one process
    encodes every object it serves; the standard library's encoder took a fifth of its CPU
    in the operator's benchmark."""
    return orjson.dumps(event, option=orjson.OPT_APPEND_NEWLINE)


def _table_line(rt: Any, include: str | None, event: Any) -> bytes:
    """A watch event whose object is shown as a one-row Table."""
    if event.get("type") in ("ERROR", "BOOKMARK"):
        return _line(event)
    return _line({**event, "object": tables.table(rt, [event["object"]], include)})


class _Mailbox:
    """A watch's events, from the threads that write (under the store's lock) to the event
    loop that streams them (None: the watch ends). One wake-up of the loop per batch, not
    one per event: under load a write wakes nothing while the batch before it is unread,
    which keeps the loop's queue short for the requests waiting behind it."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 defer: Callable[[Callable[[], None]], None]) -> None:
        self._loop = loop
        self._defer = defer  # the store's: wake the loop once the writer lets go of it
        self._events: collections.deque[dict[str, Any] | None] = collections.deque()
        self._ready = asyncio.Event()
        self._armed = False
        """A wake-up is on its way (set before it is sent, cleared before a batch is
        taken: an event put in between is in that batch or sends a wake-up of its own)."""

    def put(self, event: dict[str, Any] | None) -> None:
        self._events.append(event)
        if not self._armed:
            self._armed = True
            self._defer(self._wake)

    def _wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: the watch is gone
            self._loop.call_soon_threadsafe(self._ready.set)

    async def take(self) -> list[dict[str, Any] | None]:
        """The events put since the last batch (at least one, waiting for it)."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            self._armed = False
            taken = []
            while self._events:
                taken.append(self._events.popleft())
            if taken:
                return taken


@attrs.define(kw_only=True)
class ClusterEmulator(kmock.KubernetesScaffold):
    """kmock's scaffold (discovery, errors) over the ``Store`` (objects and semantics)."""

    store: Store = attrs.field(factory=Store)
    calls: list[tuple[str, str, int]] = attrs.field(factory=list, init=False)
    """(method, path with query, status) of every resource request, for assertions."""
    served: collections.Counter[str] = attrs.field(factory=collections.Counter, init=False)
    """Resource requests served so far, by method (a watch counts once, when it opens):
    the request counter, which unlike ``calls`` is never trimmed."""
    _closing: list[Callable[[], None]] = attrs.field(factory=list, init=False)
    _refusals: list[list[Any]] = attrs.field(factory=list, init=False)
    _refusals_lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)

    async def _serve_server_version(self, request: Any) -> dict[str, str]:
        return dict(SERVER_VERSION)

    async def __call__(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if raw.path in ("/healthz", "/livez", "/readyz"):
            return aiohttp.web.Response(text="ok")
        document = self._document(raw.path)
        if document is not None:
            return _json(document)
        route = parse_route(raw.path)
        if route is None:
            return await super().__call__(raw)
        try:
            await self._check_refusals(raw)
            response = await self._serve(raw, route)
        except ApiError as exc:
            response = _json(exc.status(), exc.code)
        except Exception as exc:
            log.exception("The emulator failed to serve %s %s", raw.method, raw.path_qs)
            response = _json(ApiError(500, "InternalError", f"{exc!r}: "
                                      f"{traceback.format_exc()[-2000:]}").status(), 500)
        if not raw.get(_LOGGED):
            self._log_call(raw, response.status)
        return response

    def _document(self, path: str) -> dict[str, Any] | None:
        """The discovery or OpenAPI document at ``path``, if it is one (resource paths are
        longer: they are told apart without a look at the kinds)."""
        if path == "/":
            return {"paths": discovery.served_paths(self.store.types)}
        if path.startswith("/openapi/"):
            return discovery.serve_openapi(self.store.types, path)
        if path.startswith("/api") and path.rstrip("/").count("/") <= 3:
            return discovery.serve_discovery(self.store.types, path)
        return None

    def refuse(self, method: str, contains: str, times: int = 1, body_contains: str = ""
               ) -> None:
        """Answer the next ``times`` requests of ``method`` whose path contains ``contains``
        (and whose body ``body_contains``) as an API server whose etcd times out does
        (500 InternalError), changing nothing."""
        with self._refusals_lock:
            self._refusals.append([method, contains, body_contains, times])

    async def _check_refusals(self, raw: aiohttp.web.BaseRequest) -> None:
        if not self._refusals:
            return
        body = (await raw.text()) if raw.can_read_body else ""  # kept for _body to read
        with self._refusals_lock:
            for refusal in self._refusals:
                method, contains, body_contains, left = refusal
                if left > 0 and raw.method == method and contains in raw.path \
                        and body_contains in body:
                    refusal[3] -= 1
                    raise ApiError(500, "InternalError", "etcdserver: request timed out")

    def _log_call(self, raw: aiohttp.web.BaseRequest, status: int) -> None:
        self.calls.append((raw.method, raw.path_qs, status))
        self.served[raw.method] += 1
        del self.calls[:-20000]

    # --- Serving ----------------------------------------------------------------------------

    async def _body(self, raw: aiohttp.web.BaseRequest) -> Any:
        content_type = raw.headers.get("Content-Type") or ""
        if "protobuf" in content_type or "cbor" in content_type:
            raise ApiError(415, "UnsupportedMediaType", f"the test cluster reads JSON and YAML "
                                                        f"bodies, not {content_type}")
        text = await raw.text()
        if not text:
            return None
        try:
            if "yaml" in content_type:
                return yaml.safe_load(text)
            return orjson.loads(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError.bad_request(f"the request body is not valid JSON: {exc}") from exc

    async def _serve(self, raw: aiohttp.web.BaseRequest, route: Route
                     ) -> aiohttp.web.StreamResponse:
        store, query = self.store, raw.query
        rt = store.resource(route.group, route.version, route.plural)
        if route.namespace is not None and not rt.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ns, name, sub = route.namespace, route.name, route.subresource
        if sub not in (None, "status", "log"):
            raise ApiError(405, "MethodNotAllowed", f"the emulator does not serve "
                                                   f"{rt.plural}/{sub}")
        method = raw.method.upper()
        if method == "GET":
            if sub == "log":
                return self._serve_log(rt, ns, name or "", query)
            if query.get("watch") in ("true", "1"):
                return await self._serve_watch(raw, rt, ns, name)
            as_table = tables.wants_table(raw.headers.get("Accept"))
            if name:
                obj = store.get(rt, ns, name)
                return _json(tables.table(rt, [obj], query.get("includeObject"))
                             if as_table else obj)
            limit = int(query["limit"]) if query.get("limit") else None
            items, rv, token = store.list(rt, ns, query.get("labelSelector"),
                                          query.get("fieldSelector"), limit,
                                          query.get("continue"))
            meta: dict[str, Any] = {"resourceVersion": rv}
            if token:
                meta["continue"] = token
            if as_table:
                return _json(tables.table(rt, items, query.get("includeObject"), meta))
            if not rt.custom:  # built-in lists leave kind and apiVersion out of their items
                items = [{k: v for k, v in i.items() if k not in ("kind", "apiVersion")}
                         for i in items]
            return _json({"apiVersion": rt.api_version, "kind": f"{rt.kind}List",
                          "metadata": meta, "items": items})
        body = await self._body(raw)
        if method in ("POST", "PUT", "PATCH") and sub is None:
            self._check_fields(rt, body, query.get("fieldValidation"), raw.headers)
        if method == "POST" and not name:
            if query.get("dryRun"):
                raise ApiError.bad_request("the emulator does not serve dry runs")
            return _json(store.create(rt, ns, body, given=True), 201)  # just decoded
        if method == "PUT" and name:
            return _json(store.replace(rt, ns, name, body, sub))
        if method == "PATCH" and name:
            content_type = raw.headers.get("Content-Type") or ""
            return _json(store.patch(rt, ns, name, body, content_type, sub))
        if method == "DELETE":
            return self._serve_delete(rt, ns, name, body or {}, query)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on {raw.path}")

    @staticmethod
    def _check_fields(rt: Any, body: Any, validation: str | None,
                      headers: Mapping[str, str]) -> None:
        """``fieldValidation=Strict``: a body naming a field its kind's schema does not know
        is refused (400), as the apiserver's strict decoding does; a JSON patch's paths are
        not looked into. Warn and Ignore (and no value) let it through (a custom resource is
        pruned to its schema)."""
        if validation != "Strict" or not isinstance(body, dict) \
                or "json-patch" in (headers.get("Content-Type") or ""):
            return
        if rt.custom:
            unknown = unknown_fields({k: v for k, v in body.items()
                                      if k not in ("apiVersion", "kind", "metadata")},
                                     rt.schema) if rt.schema else []
        else:
            from cluster.admission import unknown_builtin_fields

            unknown = unknown_builtin_fields({"apiVersion": rt.api_version, "kind": rt.kind,
                                              **body})
        if unknown:
            raise ApiError.bad_request(
                f"{rt.kind} in version \"{rt.version}\" cannot be handled as a {rt.kind}: "
                "strict decoding error: " + ", ".join(f'unknown field "{f}"' for f in unknown))

    def _serve_delete(self, rt: Any, ns: str | None, name: str | None,
                      options: Mapping[str, Any], query: Mapping[str, str]
                      ) -> aiohttp.web.Response:
        policy = options.get("propagationPolicy") or query.get("propagationPolicy")
        orphan = options.get("orphanDependents", query.get("orphanDependents"))
        if policy is None and orphan is not None:
            policy = "Orphan" if str(orphan).lower() == "true" else "Background"
        grace = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        grace = int(grace) if grace is not None else None
        if not name:
            gone = self.store.delete_collection(rt, ns, query.get("labelSelector"),
                                                query.get("fieldSelector"), policy)
            return _json({"apiVersion": rt.api_version, "kind": f"{rt.kind}List",
                          "metadata": {}, "items": gone})
        obj, gone = self.store.delete(rt, ns, name, propagation=policy, grace_seconds=grace,
                                      preconditions=options.get("preconditions"))
        # Pods and custom resources answer with the object; other kinds, once gone, with a
        # Status (the apiserver's ReturnDeletedObject).
        if gone and not rt.custom and rt.key != ("", "pods"):
            return _json({"kind": "Status", "apiVersion": "v1", "metadata": {},
                          "status": "Success", "details": {
                              "name": name, **({"group": rt.group} if rt.group else {}),
                              "kind": rt.plural, "uid": obj["metadata"]["uid"]}})
        return _json(obj)

    def _serve_log(self, rt: Any, ns: str | None, name: str,
                   query: Mapping[str, str]) -> aiohttp.web.Response:
        if rt.key != ("", "pods"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        pod = self.store.peek(rt, ns, name)  # only read
        if pod is None:
            raise ApiError.not_found(rt.group, rt.plural, name)
        spec = pod.get("spec") or {}
        mains = [c["name"] for c in spec.get("containers") or []]
        inits = [c["name"] for c in spec.get("initContainers") or []]
        container = query.get("container")
        if not container:
            if len(mains) != 1:
                raise ApiError.bad_request(
                    f"a container name must be specified for pod {name}, choose one of: "
                    f"[{' '.join(mains)}] or one of the init containers: [{' '.join(inits)}]")
            container = mains[0]
        if container not in mains + inits:
            raise ApiError.bad_request(f"container {container} is not valid for pod {name}")
        status = pod.get("status") or {}
        statuses = {s["name"]: s for key in ("initContainerStatuses", "containerStatuses")
                    for s in status.get(key) or []}
        state = (statuses.get(container) or {}).get("state") or {}
        if "running" not in state and "terminated" not in state:
            reason = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
            raise ApiError.bad_request(f'container "{container}" in pod "{name}" is waiting '
                                       f'to start: {reason}')
        text = self.store.container_log(ns or "", name, container)
        if query.get("tailLines"):
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(query["tailLines"]):]) if int(query["tailLines"]) else ""
        if query.get("limitBytes"):
            text = text.encode()[:int(query["limitBytes"])].decode(errors="ignore")
        return aiohttp.web.Response(text=text, content_type="text/plain")

    async def _serve_watch(self, raw: aiohttp.web.BaseRequest, rt: Any, ns: str | None,
                           name: str | None) -> aiohttp.web.StreamResponse:
        query = raw.query
        loop = asyncio.get_running_loop()
        mailbox = _Mailbox(loop, self.store.lock.defer)
        send = mailbox.put

        field_selector = query.get("fieldSelector")
        if name:
            name_part = f"metadata.name={name}"
            field_selector = f"{field_selector},{name_part}" if field_selector else name_part
        response = aiohttp.web.StreamResponse()
        response.content_type = "application/json"
        # A watch-list (client-go's informers, kubectl wait and delete): the current objects,
        # then a bookmark saying they are all there, then the changes.
        initial = query.get("sendInitialEvents") == "true"
        try:
            watcher, first = self.store.watch(rt, ns, None, query.get("labelSelector"),
                                              field_selector, None if initial else
                                              query.get("resourceVersion"), send)
        except ApiError as exc:
            if exc.code != 410:
                raise
            # A watch too old opens, then ends with an ERROR event, as in Kubernetes.
            await response.prepare(raw)
            await response.write(_line({"type": "ERROR", "object": exc.status()}))
            await response.write_eof()
            return response
        if initial:
            first.append({"type": "BOOKMARK", "object": {
                "kind": rt.kind, "apiVersion": rt.api_version, "metadata": {
                    "resourceVersion": str(self.store.resource_version),
                    "annotations": {"k8s.io/initial-events-end": "true"}}}})
        line = _line
        if tables.wants_table(raw.headers.get("Accept")):  # kubectl get --watch
            line = partial(_table_line, rt, query.get("includeObject"))
        self._closing.append(lambda: send(None))
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        deadline = None if timeout is None else loop.time() + timeout
        try:
            await response.prepare(raw)
            self._log_call(raw, response.status)  # a watch is logged once it is open
            raw[_LOGGED] = True
            if first:
                await response.write(b"".join(map(line, first)))
            while True:
                left = None if deadline is None else deadline - loop.time()
                if left is not None and left <= 0:
                    break
                try:
                    async with asyncio.timeout(left):
                        events = await mailbox.take()
                except TimeoutError:
                    break
                # What queued up meanwhile goes out in one write.
                ended = None in events
                if ended:
                    events = events[:events.index(None)]
                if events:
                    await response.write(b"".join(map(line, events)))
                if ended:
                    break
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.unwatch(watcher)
        return response

    def close_watches(self) -> None:
        """End every open watch (the server is stopping)."""
        for close in self._closing:
            close()
        self._closing.clear()


# --- Running it -----------------------------------------------------------------------------


def write_kubeconfig(path: Path, url: str, namespace: str = "default") -> Path:
    """A kubeconfig whose current context is the emulator (for kopf and the client)."""
    config = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "proctor-emulator", "cluster": {"server": url}}],
        "users": [{"name": "proctor-tester", "user": {"token": "emulator-token"}}],
        "contexts": [{"name": "proctor-emulator", "context": {
            "cluster": "proctor-emulator", "user": "proctor-tester", "namespace": namespace}}],
        "current-context": "proctor-emulator",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _request_factory(server: aiohttp.web.Server) -> Callable[..., BaseRequest]:
    def make(message: Any, payload: Any, protocol: Any, writer: Any, task: Any) -> BaseRequest:
        return BaseRequest(message, payload, protocol, writer, task, server._loop,
                           client_max_size=MAX_REQUEST_BYTES)
    return make


class Cluster:
    """The emulator on a loopback port (own thread and event loop), plus a kubelet.

    Use as a context manager (``running_cluster``) or ``start()`` / ``stop()``.
    """

    def __init__(self, *, namespaces: Iterable[str] = ("default",), crds: bool = True,
                 kubelet: bool = True, workdir: Path | None = None,
                 **kubelet_options: Any) -> None:
        from cluster.kubelet import Kubelet

        self.store = Store(namespaces=namespaces)
        if crds:
            register_proctor_crds(self.store)
        self._own_dir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="proctor-cluster-"))
        # Containers that run as another user (runAsUser) must reach their pod's folders.
        self.workdir.chmod(0o755)
        if self._own_dir:  # its pods' folders are reached by steps that run as other users
            self.workdir.chmod(0o755)
        self.kubeconfig = self.workdir / "kubeconfig"
        self.kubelet: Kubelet | None = Kubelet(self.store, self.workdir / "nodes",
                                               **kubelet_options) if kubelet else None
        self.emulator: ClusterEmulator | None = None
        self.port = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Cluster:
        self._thread = threading.Thread(target=self._run, name="k8s-emulator", daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or self._error:
            raise RuntimeError(f"the emulator did not start: {self._error!r}")
        write_kubeconfig(self.kubeconfig, self.url)
        if self.kubelet:
            self.kubelet.start()
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to start()
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self.emulator = ClusterEmulator(store=self.store)
        async with self.emulator:
            server = aiohttp.web.Server(self.emulator, handler_cancellation=True,
                                        access_log=None)
            server.request_factory = _request_factory(server)
            runner = aiohttp.web.ServerRunner(server)
            await runner.setup()
            site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self._ready.set()
            await self._stop.wait()
            self.emulator.close_watches()
            await asyncio.sleep(0.05)
            await runner.cleanup()

    def stop(self) -> None:
        if self.kubelet:
            self.kubelet.stop()
        if self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread:
            self._thread.join(30)
        if self._own_dir:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- Helpers for tests ------------------------------------------------------------------

    def api_client(self) -> Any:
        """An official ``kubernetes`` ApiClient talking to this cluster."""
        import kubernetes

        config = kubernetes.client.Configuration()
        config.host = self.url
        config.api_key = {"authorization": "Bearer emulator-token"}
        return kubernetes.client.ApiClient(config)

    @contextlib.contextmanager
    def kubeconfig_env(self) -> Iterator[Path]:
        """KUBECONFIG pointing here while inside, for kopf's login and ``load_kube_config()``.

        The ``kubernetes`` package reads KUBECONFIG once, when ``kubernetes.config`` is first
        imported; its default location is repointed too, so that kopf's default login
        (``login_via_client``) finds this cluster in a process that imported it earlier.
        """
        import kubernetes.config.kube_config as kube_config

        old_env = os.environ.get("KUBECONFIG")
        old_default = kube_config.KUBE_CONFIG_DEFAULT_LOCATION
        os.environ["KUBECONFIG"] = str(self.kubeconfig)
        kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(self.kubeconfig)
        try:
            yield self.kubeconfig
        finally:
            kube_config.KUBE_CONFIG_DEFAULT_LOCATION = old_default
            if old_env is None:
                os.environ.pop("KUBECONFIG", None)
            else:
                os.environ["KUBECONFIG"] = old_env

    def wait_for(self, what: Callable[[], Any], timeout: float = 30, interval: float = 0.05,
                 message: str = "") -> Any:
        """Poll ``what`` until it returns something truthy; that value."""
        deadline = time.monotonic() + timeout
        while True:
            value = what()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(message or f"waited {timeout}s in vain for {what!r}")
            time.sleep(interval)

    def calls(self, method: str | None = None, contains: str = "") -> list[tuple[str, str, int]]:
        """The resource requests served so far (method, path?query, status)."""
        found = list(self.emulator.calls) if self.emulator is not None else []
        return [c for c in found if (method is None or c[0] == method) and contains in c[1]]


def register_proctor_crds(store: Store) -> None:
    """Serve proctor.dev's kinds from the CRDs the package ships."""
    from proctor.formats import manifest

    for kind in ("Evaluation", "AgentUnderTest"):
        store.register_crd(manifest.crd(kind))


@contextlib.contextmanager
def running_cluster(**options: Any) -> Iterator[Cluster]:
    """A started ``Cluster`` (see its arguments), stopped on exit."""
    cluster = Cluster(**options)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
