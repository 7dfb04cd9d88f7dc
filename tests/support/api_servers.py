"""A loopback HTTP server standing in for the Kubernetes API server, for the tests that run
the operator's shell (`act.Pass`) against a real `Kube` client: each test file's subclass
says how it answers (`handle`), and what it records.

Why not the real API server: these tests check each call the shell makes and what it does
with each answer (a Job's solve-step log, a write's body) in states a real cluster reaches
only by running pods for minutes (a Job Kueue preempted mid-solve, a NetworkPolicy of an
Evaluation whose items are done); and they run where no cluster can start. The real API
server runs the same shell in tests/cluster/ (the operator's own tests).

Used as a context manager, it stops when the block ends, whatever the test asserted.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from kubernetes import client

from proctor.k8s.machinery.api import Kube


def answer(request: BaseHTTPRequestHandler, code: int, body: bytes,
           kind: str = "application/json") -> None:
    request.send_response(code)
    request.send_header("Content-Type", kind)
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    request.wfile.write(body)


def read_json(request: BaseHTTPRequestHandler) -> dict[str, Any]:
    """The request's JSON body."""
    body: dict[str, Any] = json.loads(request.rfile.read(int(request.headers["Content-Length"])))
    return body


class StandInApi:
    """Serves the HTTP ``methods`` given (others: 501, as a server without them) by calling
    `handle` with each request."""

    def __init__(self, methods: tuple[str, ...]) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def _handle(self) -> None:
                outer.handle(self)

        for method in methods:
            setattr(Handler, f"do_{method}", Handler._handle)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    def kube(self) -> Kube:
        """A Kube whose calls go to this server."""
        configuration = client.Configuration()
        configuration.host = f"http://127.0.0.1:{self.server.server_port}"
        return Kube(client.ApiClient(configuration))

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
