"""The reference agents as real A2A servers (a2a-sdk 1.x, also serving 0.3 clients).

Started the way the Agentbeats platform starts agents: `--host`, `--port` and
`--card-url`, the card at `/.well-known/agent-card.json` (also at the pre-0.3
path `/.well-known/agent.json`), JSON-RPC at `/`. The card lists a 1.0 and a
0.3 JSON-RPC interface on the same URL, and the routes accept 0.3 requests,
so an orchestrator on either SDK generation can talk to it.

Each task runs the same way: the Task first (an a2a-sdk 1.x server insists on
it), `working`, then the answer as an artifact or in the final status message,
and the final state.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from a2a.helpers import new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, TransportProtocol
from starlette.applications import Starlette
from starlette.types import ASGIApp

from proctor import __version__
from proctor.a2a.extract import CONFIDENCE_KEY
from proctor.agents.answers import Answer, answer_parts, request_of
from proctor.agents.kinds import KINDS, Solver, Tasks, solver_for

if TYPE_CHECKING:
    from proctor.agents.llm import LlmSettings

log = logging.getLogger(__name__)

LEGACY_CARD_PATH = "/.well-known/agent.json"
_STATES = {"completed": TaskState.TASK_STATE_COMPLETED, "failed": TaskState.TASK_STATE_FAILED,
           "rejected": TaskState.TASK_STATE_REJECTED,
           "input-required": TaskState.TASK_STATE_INPUT_REQUIRED}
_DESCRIPTIONS = {
    "oracle": "Answers every known task with its gold patch.",
    "noop": "Answers every task without a patch.",
    "editor": "Edits the checkout at REPO_DIR and answers with its git diff.",
    "mixed": "Answers the demo tasks so that every outcome appears once or more.",
    "sensitive": "Solves known tasks with a chance that depends on the wording.",
    "llm": "Runs mini-swe-agent's loop on a litellm model in the checkout; answers its diff.",
}


def card_interfaces(card_url: str) -> list[AgentInterface]:
    """A 1.0 and a 0.3 JSON-RPC interface, both at `card_url` (agents in the wild still
    run 0.3 clients and servers)."""
    return [AgentInterface(url=card_url, protocol_binding=TransportProtocol.JSONRPC,
                           protocol_version=version)
            for version in (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3)]


def agent_card(kind: str, card_url: str, streaming: bool = True) -> AgentCard:
    """The card: a 1.0 and a 0.3 JSON-RPC interface, both at `card_url`."""
    interfaces = card_interfaces(card_url)
    skill = AgentSkill(id="swe-bench", name="Solve a SWE-bench task",
                       description="Takes a SWE-bench task and answers with a patch.",
                       tags=["swe-bench", "coding"])
    return AgentCard(name=f"proctor-{kind}", description=_DESCRIPTIONS.get(kind, kind),
                     version=__version__, supported_interfaces=interfaces,
                     capabilities=AgentCapabilities(streaming=streaming),
                     default_input_modes=["text/plain", "application/json"],
                     default_output_modes=["text/plain", "application/json", "text/x-diff"],
                     skills=[skill])


class SolverExecutor(AgentExecutor):
    """Runs a `Solver` for each task and reports its `Answer` as A2A events.

    `request_log`: a JSON line per task received (when, the task, the sha256 of its
    problem text), so a test can prove which tasks an orchestrator asked, and how often.
    `exit_after`: stop serving after that many answers (`stop_serving`), as an agent
    that dies mid-run does.
    """

    def __init__(self, solver: Solver, request_log: Path | None = None,
                 exit_after: int | None = None):
        self.solver = solver
        self.request_log, self.exit_after = request_log, exit_after
        self.answers = 0
        self.stop_serving: Callable[[], None] | None = None

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        if self.exit_after is not None and self.answers >= self.exit_after:
            return  # dying: no answer (the server is closing its doors)
        self._log_request(task_id, context)
        if context.current_task is None:
            await event_queue.enqueue_event(Task(
                id=task_id, context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[context.message] if context.message else []))
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.start_work()
        try:
            # In a thread: the editor runs git, and the server must keep serving meanwhile.
            answer = await asyncio.to_thread(self.solver, request_of(context.message))
        except Exception as exc:  # an agent's bug is the task's failure, not the server's
            log.exception("task %s failed", task_id)
            answer = Answer(state="failed", text=f"internal error: {type(exc).__name__}: {exc}")
        await report(updater, answer)
        self.answers += 1
        if self.exit_after is not None and self.answers >= self.exit_after \
                and self.stop_serving is not None:
            # Stop listening at once; the answer in flight is still delivered.
            asyncio.get_running_loop().call_later(0.1, self.stop_serving)

    def _log_request(self, task_id: str, context: RequestContext) -> None:
        if self.request_log is None:
            return
        request = request_of(context.message)
        line = {"time": time.time(), "task_id": task_id, "instance_id": request.instance_id,
                "problem_sha256": hashlib.sha256(request.problem_text.encode()).hexdigest()}
        with open(self.request_log, "a") as fh:
            fh.write(json.dumps(line) + "\n")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()


async def report(updater: TaskUpdater, answer: Answer) -> None:
    """Send the answer: the patch's parts, then the final status with the prose."""
    parts = answer_parts(answer)
    if parts and answer.where == "artifact":
        await updater.add_artifact(parts, name="answer")
    status_parts = [new_text_part(answer.text)] if answer.text else []
    if answer.where == "status":
        status_parts += parts
    metadata = _metadata(answer)
    message = updater.new_agent_message(status_parts, metadata=metadata) \
        if status_parts or metadata else None
    await updater.update_status(_STATES[answer.state], message=message)


def _metadata(answer: Answer) -> dict | None:
    """The status message's metadata: usage and confidence, in Proctor's own keys."""
    metadata: dict[str, Any] = {"usage": answer.usage} if answer.usage else {}
    if answer.confidence is not None:
        metadata[CONFIDENCE_KEY] = answer.confidence
    return metadata or None


def build_app(executor: AgentExecutor, card: AgentCard) -> Starlette:
    """The ASGI app: the card (new and legacy path) and JSON-RPC at `/`, 0.3 requests too."""
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(),
                                    agent_card=card)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await handler.aclose()

    routes = [*create_agent_card_routes(card),
              *create_agent_card_routes(card, card_url=LEGACY_CARD_PATH),
              *create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True)]
    return Starlette(routes=routes, lifespan=lifespan)


def require_token(app: ASGIApp, token: str) -> ASGIApp:
    """The app, answering 401 to every request (its card too) that lacks the header
    `Authorization: Bearer <token>`: an agent that checks who calls it."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        given = dict(scope.get("headers") or ()).get(b"authorization", b"")
        if scope["type"] == "http" and not hmac.compare_digest(given, expected):
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"a bearer token is required\n"})
            return
        await app(scope, receive, send)

    return guarded


def reference_app(kind: str, card_url: str, dataset_files: Iterable[str] = (),
                  streaming: bool = True, seed: int | None = None,
                  executor: SolverExecutor | None = None,
                  llm: LlmSettings | None = None) -> Starlette:
    """The app of one reference agent kind (`executor`: one made by the caller)."""
    executor = executor or SolverExecutor(
        solver_for(kind, Tasks.load(dataset_files), seed, llm))
    return build_app(executor, agent_card(kind, card_url, streaming))


def default_card_url(host: str, port: int) -> str:
    """Where the agent says it lives when no --card-url is given."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{shown}:{port}/"


def serve(kind: str, host: str = "127.0.0.1", port: int = 9009, card_url: str | None = None,
          dataset_files: Iterable[str] = (), seed: int | None = None,
          request_log: Path | None = None, exit_after: int | None = None,
          llm: LlmSettings | None = None, token: str | None = None) -> None:
    """Run a reference agent until interrupted (what `proctor agent serve` does);
    `token`: the bearer token every request must carry."""
    if kind not in KINDS:
        raise ValueError(f"unknown agent kind {kind!r}; choose one of {', '.join(KINDS)}")
    url = card_url or default_card_url(host, port)
    executor = SolverExecutor(solver_for(kind, Tasks.load(dataset_files), seed, llm),
                              request_log, exit_after)
    served: ASGIApp = reference_app(kind, url, executor=executor)
    app = require_token(served, token) if token else served
    log.info("Serving the %s agent on %s:%s, card URL %s", kind, host, port, url)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    executor.stop_serving = lambda: setattr(server, "should_exit", True)
    server.run()


@dataclass
class RunningServer:
    """An ASGI app served by uvicorn on a thread of this process (tests, demos)."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def bind_free_port(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening socket on a free port (or on `port`: an agent started again where it
    was), so the URL is known before the app is built."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def start_in_thread(app_for_url: Callable[[str], ASGIApp],
                    host: str = "127.0.0.1", port: int = 0) -> RunningServer:
    """Serve `app_for_url(url)` on a free port (or `port`) in a background thread; returns
    once it listens.

    `app_for_url` builds the app from the URL it will be served at (the card names it).
    """
    sock = bind_free_port(host, port)
    url = f"http://{host}:{sock.getsockname()[1]}/"
    config = uvicorn.Config(app_for_url(url), log_level="warning", lifespan="on",
                            timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                              name=f"a2a-server-{url}")
    thread.start()
    for _ in range(500):
        if server.started:
            break
        if not thread.is_alive():
            raise RuntimeError(f"the server at {url} did not start")
        threading.Event().wait(0.01)
    else:
        raise RuntimeError(f"the server at {url} did not start within 5 s")
    return RunningServer(url, server, thread)


def start_reference_agent(kind: str, dataset_files: Iterable[str] = (),
                          streaming: bool = True, seed: int | None = None,
                          llm: LlmSettings | None = None, token: str | None = None,
                          host: str = "127.0.0.1") -> RunningServer:
    """A reference agent on a free port of `host`, in this process; `token`: the bearer
    token every request must carry."""
    files = tuple(dataset_files)

    def app(url: str) -> ASGIApp:
        built = reference_app(kind, url, files, streaming, seed, llm=llm)
        return require_token(built, token) if token else built
    return start_in_thread(app, host)
