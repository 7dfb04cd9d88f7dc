"""Ask an agent under test to solve one task over A2A, and follow it to its end.

`solve()` sends the task's message exactly once and then waits for the task to
end, however long the agent takes, up to `timeout_s`:

* the agent card is read from the endpoint, but every request goes to the
  configured endpoint: the URL the card names is often an address only valid
  inside the agent's own network (a Kubernetes Service name, a container
  name), not the port-forward or Service that Proctor reaches it by;
* streaming is used when the card offers it; a stream that ends or breaks
  before the task does is followed by polling `tasks/get`, never by sending
  the message again (an agent may already be editing files for it);
* every request carries the agent's own time limit: the library's default of
  5 s would cut off any real SWE agent;
* a2a-sdk 1.x reads 0.3 agent cards and speaks 0.3 to 0.3 servers by itself.

`resume()` follows a task sent earlier, by its id, with `tasks/get` alone: a solve
step that was killed while it waited (a preempted pod) asks for the answer of the
task it already sent instead of sending it again. `solve(on_task_id=...)` tells
the caller that id as soon as the agent names it.

How the task ended decides the result (the failure table of the architecture
note): `completed` (or a plain Message reply) gives the patch found in the
reply, or none; `rejected` and `input-required` give no patch and no error (the
item is then no_op); `failed`, `canceled`, `auth-required` (the credentials
Proctor was given are not enough), an unreachable agent, a protocol error and a
timeout are errors of kind `agent`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from functools import partial
from urllib.parse import urlsplit, urlunsplit

import httpx
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    A2AClientTimeoutError,
    AgentCardResolutionError,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
)
from a2a.helpers import new_data_part, new_text_part
from a2a.types import (
    AgentCard,
    Artifact,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import A2AError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict, ParseError

from proctor.a2a.extract import (
    adk_call_usage,
    agent_history,
    extract_confidence,
    extract_usage,
    find_patch,
    metadata_of,
)
from proctor.a2a.message import TaskMessage
from proctor.core.model import ErrorKind, Usage

log = logging.getLogger(__name__)

LEGACY_CARD_PATH = "/.well-known/agent.json"  # agents from before A2A 0.3
POLL_START_S = 0.5
POLL_MAX_S = 5.0
POLL_ERRORS_TOLERATED = 3  # consecutive failed polls before the agent counts as gone
CANCEL_GRACE_S = 2.0

_TERMINAL = {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED,
             TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED}
_INTERRUPTED = {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}
# auth-required is an error too: the credentials Proctor was given are not enough.
_ERROR_STATES = {TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED,
                 TaskState.TASK_STATE_AUTH_REQUIRED}


_NO_PATCH_STATES = {TaskState.TASK_STATE_REJECTED, TaskState.TASK_STATE_INPUT_REQUIRED}


class AgentProblem(Exception):
    """The agent could not be reached or broke the protocol; the message says how."""

    def __init__(self, message: str, transport: bool = False):
        super().__init__(message)
        self.transport = transport
        """Whether the transport failed (no connection, reset), not the agent's answer."""


@dataclass(frozen=True)
class SolveResult:
    """What asking the agent gave: the patch, or why there is none."""

    patch: str = ""
    """The patch text; "" when the agent gave none (or the item is an error)."""
    usage: Usage | None = None
    """Tokens and cost, when the agent reported them in metadata."""
    confidence: float | None = None
    """The agent's confidence in its answer (metadata `confidence`, 0 to 1), if given."""
    latency_s: float = 0.0
    """Seconds from the first request to the end of the task."""
    state: str | None = None
    """How the task ended, in A2A's words (`completed`, `rejected`, `input-required`…)."""
    error_kind: ErrorKind | None = None
    """`agent` when the agent failed, was unreachable, broke the protocol or timed out."""
    error: str | None = None
    """A human explanation of the error (set exactly when error_kind is)."""
    detail: str | None = None
    """Why there is no patch when that is not an error (`rejected`, no patch in the answer)."""
    summary: str = ""
    """One line about the exchange, for the solve log."""
    task_id: str | None = None
    """The agent's task id, when it made a task."""
    transport_failure: bool = False
    """The agent could not be talked to: no connection, a reset, or no reply within the
    time limit (what the dead-agent rule counts), as opposed to an answer it gave."""
    transcript: dict | None = None
    """What the agent sent back, as A2A delivered it (`transcript_of`)."""


def state_name(state: int) -> str:
    """`TASK_STATE_INPUT_REQUIRED` -> `input-required` (the A2A 0.3 wire name)."""
    return TaskState.Name(state).removeprefix("TASK_STATE_").lower().replace("_", "-")


def to_a2a_message(message: TaskMessage) -> Message:
    """The A2A message for a task: the text part, then the data part."""
    parts = [new_text_part(message.text, media_type="text/plain")]
    if message.data:
        parts.append(new_data_part(dict(message.data)))
    return Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()),
                   context_id=str(uuid.uuid4()), parts=parts)


def pinned_url(card_url: str, endpoint: str) -> str:
    """The URL to send to: the configured endpoint, keeping a path the card adds to it.

    The card's host is dropped (it is where the agent thinks it lives). A card
    path equal to the endpoint's, or empty, means the endpoint itself; another
    path (an agent serving JSON-RPC under `/a2a`, say) is kept, under the
    endpoint's own path when the card does not already start with it.
    """
    ep, card = urlsplit(endpoint), urlsplit(card_url)
    ep_path, card_path = ep.path.rstrip("/"), card.path.rstrip("/")
    if not card_path or card_path == ep_path:
        return endpoint
    if not (ep_path and card_path.startswith(ep_path + "/")):
        card_path = ep_path + card_path
    return urlunsplit((ep.scheme, ep.netloc, card_path + ("/" if card.path.endswith("/") else ""),
                       card.query, ""))


def pin_card(card: AgentCard, endpoint: str) -> AgentCard:
    """A copy of the card whose interfaces all point at the configured endpoint."""
    pinned = AgentCard()
    pinned.CopyFrom(card)
    for interface in pinned.supported_interfaces:
        interface.url = pinned_url(interface.url or endpoint, endpoint)
    return pinned


@dataclass
class _Reply:
    """Everything the agent said about the task so far."""

    task_id: str | None = None
    state: int = TaskState.TASK_STATE_UNSPECIFIED
    message: Message | None = None
    status_message: Message | None = None
    history: list[Message] = field(default_factory=list)
    """The agent's earlier messages, oldest first (as the server keeps them)."""
    artifacts: dict[str, Artifact] = field(default_factory=dict)
    metadata: list[dict] = field(default_factory=list)
    event_metadata: list[dict] = field(default_factory=list)
    """The metadata of each streamed update, of its status message and of its artifact
    (ADK puts a model call's usage on one of them, by release)."""
    events: int = 0
    polls: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.message is not None or self.state in _TERMINAL | _INTERRUPTED

    def add_task(self, task: Task) -> None:
        self.task_id = task.id or self.task_id
        self.history = agent_history(task)
        self.status_message = None  # the snapshot's status replaces what streamed before
        self._set_status(task.status)
        for artifact in task.artifacts:
            self.artifacts[artifact.artifact_id] = artifact
        self.metadata.append(metadata_of(task))

    def add(self, event: StreamResponse) -> None:
        self.events += 1
        kind = event.WhichOneof("payload")
        if kind == "task":
            self.add_task(event.task)
        elif kind == "message":
            self.message = event.message
            self.task_id = self.task_id or event.message.task_id or None
            self.metadata.append(metadata_of(event.message))
        elif kind == "status_update":
            self.task_id = self.task_id or event.status_update.task_id
            self._set_status(event.status_update.status)
            self.metadata.append(metadata_of(event.status_update))
            self.event_metadata.append(self.metadata[-1])
            if self.status_message is not None:
                self.event_metadata.append(metadata_of(self.status_message))
        elif kind == "artifact_update":
            self.task_id = self.task_id or event.artifact_update.task_id
            self._add_artifact(event.artifact_update.artifact, event.artifact_update.append)
            self.event_metadata.append(metadata_of(event.artifact_update.artifact))

    def _set_status(self, status: TaskStatus) -> None:
        # A new status pushes the previous status message into the history, as servers do.
        if self.status_message is not None:
            self.history.append(self.status_message)
        self.state = status.state
        self.status_message = status.message if status.HasField("message") else None
        if self.status_message is not None:
            self.metadata.append(metadata_of(self.status_message))

    def _add_artifact(self, artifact: Artifact, append: bool) -> None:
        known = self.artifacts.get(artifact.artifact_id)
        if append and known is not None:
            known.parts.extend(artifact.parts)
        else:
            self.artifacts[artifact.artifact_id] = artifact
        self.metadata.append(metadata_of(artifact))


def _context(deadline: float) -> ClientCallContext:
    remaining = max(0.1, deadline - asyncio.get_running_loop().time())
    return ClientCallContext(timeout=remaining)


async def _fetch_card(http: httpx.AsyncClient, endpoint: str) -> AgentCard:
    resolver = A2ACardResolver(http, endpoint)
    try:
        return await resolver.get_agent_card()
    except AgentCardResolutionError as exc:
        if isinstance(exc.__cause__, httpx.TransportError):
            raise AgentProblem(f"agent unreachable at {endpoint}: {_short(exc.__cause__)}",
                               transport=True) from exc
        if exc.status_code != 404:
            raise AgentProblem(f"cannot read the agent card at {endpoint}: {exc.message}") from exc
    try:
        return await resolver.get_agent_card(relative_card_path=LEGACY_CARD_PATH)
    except AgentCardResolutionError as exc:
        raise AgentProblem(f"the agent at {endpoint} serves no agent card "
                           f"(/.well-known/agent-card.json: 404; {exc.message})") from exc


def _make_client(card: AgentCard, endpoint: str, http: httpx.AsyncClient,
                 streaming: bool) -> Client:
    config = ClientConfig(streaming=streaming, httpx_client=http,
                          supported_protocol_bindings=[TransportProtocol.JSONRPC,
                                                       TransportProtocol.HTTP_JSON])
    try:
        return ClientFactory(config).create(pin_card(card, endpoint))
    except ValueError as exc:
        offered = ", ".join(f"{i.protocol_binding} {i.protocol_version}".strip()
                            for i in card.supported_interfaces) or "none"
        raise AgentProblem(f"the agent card offers no interface Proctor speaks "
                           f"(JSONRPC or HTTP+JSON; it offers {offered})") from exc


async def _follow(client: Client, reply: _Reply, deadline: float,
                  first_wait_s: float = POLL_START_S) -> None:
    """Poll the task until it ends: the answer of a stream that stopped short, or of a
    task sent by an earlier attempt."""
    wait, interval, failures = first_wait_s, POLL_START_S, 0
    while not reply.finished:
        await asyncio.sleep(min(wait, max(0.0, deadline - asyncio.get_running_loop().time())))
        wait = interval
        interval = min(interval * 1.5, POLL_MAX_S)
        try:
            task = await client.get_task(GetTaskRequest(id=reply.task_id or ""),
                                         context=_context(deadline))
        except A2AClientTimeoutError:
            raise
        except TaskNotFoundError as exc:  # a definite answer: asking again cannot help
            raise AgentProblem(f"the agent does not know the task {reply.task_id} "
                               f"(tasks/get: {_short(exc)})") from exc
        except (A2AClientError, httpx.HTTPError) as exc:
            failures += 1
            if failures >= POLL_ERRORS_TOLERATED:
                raise AgentProblem(f"lost the task {reply.task_id}: tasks/get failed "
                                   f"{failures} times, last: {exc}",
                                   transport=_is_transport(exc)) from exc
            continue
        failures = 0
        reply.polls += 1
        reply.add_task(task)


TaskIdCallback = Callable[[str], None]


async def _converse(client: Client, request: SendMessageRequest, reply: _Reply,
                    deadline: float, on_task_id: TaskIdCallback | None = None) -> None:
    """Send the message once; read the answer, streamed or not, to the task's end.
    `on_task_id` is told the task's id once, with the first event that names it."""
    events: AsyncIterator[StreamResponse] = client.send_message(request,
                                                                context=_context(deadline))
    try:
        # type-var: the SDK types the stream as an AsyncIterator, which has no aclose()
        async with aclosing(events) as stream:  # type: ignore[type-var]
            async for event in stream:
                known = reply.task_id
                reply.add(event)
                if on_task_id is not None and reply.task_id and not known:
                    on_task_id(reply.task_id)
                if reply.finished:
                    return
    except A2AClientTimeoutError:
        raise
    except (A2AClientError, httpx.HTTPError) as exc:
        # A broken connection after the task exists: the task itself may be fine.
        if not reply.task_id or isinstance(exc, AgentCardResolutionError):
            raise
        reply.notes.append(f"stream broke ({_short(exc)})")
    if not reply.task_id:
        raise AgentProblem("the agent's reply ended before it named a task or gave an answer")
    if not reply.finished:
        reply.notes.append("followed by polling")
        await _follow(client, reply, deadline)


async def _cancel_quietly(client: Client, task_id: str) -> None:
    """Tell a timed-out agent to stop; it may not listen, and that is fine."""
    try:
        async with asyncio.timeout(CANCEL_GRACE_S):
            await client.cancel_task(CancelTaskRequest(id=task_id),
                                     context=ClientCallContext(timeout=CANCEL_GRACE_S))
    except (TimeoutError, A2AError, httpx.HTTPError, ValueError):
        pass


def _short(exc: BaseException, limit: int = 300) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "…"


def _http_client(timeout_s: float, auth_header: tuple[str, str] | None) -> httpx.AsyncClient:
    headers = {auth_header[0]: auth_header[1]} if auth_header else {}
    return httpx.AsyncClient(headers=headers,
                             timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0)))


def _describe(reply: _Reply, card: AgentCard | None, streaming: bool, where: str | None,
              patch: str) -> str:
    bits = []
    if card is not None:
        used = card.capabilities.streaming and streaming
        bits.append(f"agent {card.name or '?'} ({'streaming' if used else 'not streaming'})")
    if reply.task_id:
        bits.append(f"task {reply.task_id}")
    if reply.message is not None:
        bits.append("answered with a message")
    elif reply.state:
        bits.append(f"state {state_name(reply.state)}")
    bits.append(f"{reply.events} events" + (f", {reply.polls} polls" if reply.polls else ""))
    bits += reply.notes
    bits.append(f"patch from {where} ({len(patch.encode())} bytes)" if patch else "no patch")
    text = _status_text(reply)
    if text:
        bits.append(f"status: {text[:200]}")
    return "; ".join(bits)


def _status_text(reply: _Reply) -> str:
    message = reply.message or reply.status_message or (reply.history[-1] if reply.history
                                                        else None)
    if message is None:
        return ""
    text = " ".join(p.text for p in message.parts if p.WhichOneof("content") == "text")
    return " ".join(text.split())  # one line, for logs


def transcript_of(reply: _Reply) -> dict:
    """The agent's side of the exchange, in A2A's JSON: its messages oldest first (the
    status message, then a Message reply, last), its artifacts, every event's metadata."""
    messages = [*reply.history, *(m for m in (reply.status_message, reply.message)
                                  if m is not None)]
    return {"task_id": reply.task_id,
            "state": state_name(reply.state) if reply.state else None,
            "messages": [MessageToDict(m) for m in messages],
            "artifacts": [MessageToDict(a) for a in reply.artifacts.values()],
            "metadata": [m for m in reply.metadata if m], "notes": list(reply.notes)}


def reply_usage(reply: _Reply) -> Usage | None:
    """The reply's usage: ADK's summed over its streamed events when it streamed them,
    else the latest figures reported anywhere in the reply."""
    return adk_call_usage(reply.event_metadata) or extract_usage(*reversed(reply.metadata))


def _outcome(reply: _Reply, card: AgentCard | None, streaming: bool,
             latency: float) -> SolveResult:
    """Map how the task ended onto the result (the architecture note's failure table)."""
    usage = reply_usage(reply)
    state = "completed" if reply.message is not None else state_name(reply.state)
    result = partial(SolveResult, usage=usage,
                     confidence=extract_confidence(*reversed(reply.metadata)),
                     latency_s=latency, state=state, task_id=reply.task_id,
                     transcript=transcript_of(reply))
    if reply.state in _ERROR_STATES and reply.message is None:
        why = _status_text(reply) or "no reason given"
        return result(error_kind=ErrorKind.AGENT, error=f"the agent's task {state}: {why}",
                      summary=_describe(reply, card, streaming, None, ""))
    if reply.message is None and reply.state in _NO_PATCH_STATES:
        why = _status_text(reply) or "no reason given"
        return result(detail=f"the agent ended in {state}: {why}",
                      summary=_describe(reply, card, streaming, None, ""))
    patch, where = find_patch(reply.artifacts.values(), reply.message, reply.status_message,
                              reply.history)
    return result(patch=patch, detail=None if patch else "the agent answered without a patch",
                  summary=_describe(reply, card, streaming, where, patch))


def _failure(reply: _Reply, card: AgentCard | None, streaming: bool, latency: float,
             error: str, transport: bool = False) -> SolveResult:
    summary = _describe(reply, card, streaming, None, "")
    return SolveResult(usage=reply_usage(reply), latency_s=latency,
                       state=state_name(reply.state) if reply.state else None,
                       error_kind=ErrorKind.AGENT, error=error, summary=summary,
                       task_id=reply.task_id, transport_failure=transport,
                       transcript=transcript_of(reply))


Talk = Callable[[Client, float], Awaitable[None]]
"""What to do once the client is made: given it and the deadline, fill the reply."""


async def _exchange(endpoint: str, reply: _Reply, talk: Talk, *, timeout_s: float,
                    auth_header: tuple[str, str] | None, streaming: bool) -> SolveResult:
    """Read the card, make the client, `talk`, and map how it ended onto a SolveResult:
    the one place where a failure to talk to the agent becomes an agent error."""
    started = time.monotonic()
    deadline = asyncio.get_running_loop().time() + timeout_s
    card, client = None, None

    def failed(error: str, transport: bool = False) -> SolveResult:
        return _failure(reply, card, streaming, time.monotonic() - started, error, transport)

    async with _http_client(timeout_s, auth_header) as http:
        try:
            async with asyncio.timeout_at(deadline):
                card = await _fetch_card(http, endpoint)
                client = _make_client(card, endpoint, http, streaming)
                await talk(client, deadline)
        except (TimeoutError, A2AClientTimeoutError):
            if client is not None and reply.task_id and not reply.finished:
                await _cancel_quietly(client, reply.task_id)
            return failed(f"the agent did not finish within {timeout_s:g} s", transport=True)
        except AgentProblem as exc:
            return failed(str(exc), transport=exc.transport)
        except (A2AError, httpx.HTTPError, ParseError, ValueError) as exc:
            return failed(_agent_error_text(endpoint, exc), transport=_is_transport(exc))
        except Exception as exc:  # an agent's odd reply must not end the whole evaluation
            log.exception("unexpected failure talking to the agent at %s", endpoint)
            return failed(f"unexpected failure talking to the agent at {endpoint}: "
                          f"{type(exc).__name__}: {_short(exc)}")
        finally:
            if client is not None:
                with contextlib.suppress(Exception):  # closing must not hide the answer
                    await client.close()
    return _outcome(reply, card, streaming, time.monotonic() - started)


async def solve(endpoint: str, message: TaskMessage | Message, *, timeout_s: float,
                auth_header: tuple[str, str] | None = None,
                streaming: bool = True,
                on_task_id: TaskIdCallback | None = None) -> SolveResult:
    """Send one task to the agent at `endpoint` and wait up to `timeout_s` for its answer.

    `auth_header` is sent with every request (e.g. `("Authorization", "Bearer …")`).
    `streaming=False` asks for a blocking answer even from an agent that streams (its
    task id then arrives with the answer). `on_task_id` is called once with the agent's
    task id as soon as a reply names it (not at all for a plain Message reply).
    Never raises for anything the agent does: every failure is in the result.
    """
    a2a_message = to_a2a_message(message) if isinstance(message, TaskMessage) else message
    request, reply = SendMessageRequest(message=a2a_message), _Reply()

    async def talk(client: Client, deadline: float) -> None:
        await _converse(client, request, reply, deadline, on_task_id)

    return await _exchange(endpoint, reply, talk, timeout_s=timeout_s,
                           auth_header=auth_header, streaming=streaming)


async def resume(endpoint: str, task_id: str, *, timeout_s: float,
                 auth_header: tuple[str, str] | None = None) -> SolveResult:
    """Follow the agent's task `task_id`, sent earlier, by `tasks/get` until it ends, and
    give its answer as `solve()` would have. Nothing is sent to the agent but reads; a
    task it does not know is an agent error naming the id. Never raises for anything the
    agent does."""
    reply = _Reply(task_id=task_id, notes=["resumed: followed by polling, not sent again"])

    async def talk(client: Client, deadline: float) -> None:
        await _follow(client, reply, deadline, first_wait_s=0.0)

    return await _exchange(endpoint, reply, talk, timeout_s=timeout_s,
                           auth_header=auth_header, streaming=False)


CARD_TIMEOUT_S = 15.0


async def fetch_card(endpoint: str, timeout_s: float = CARD_TIMEOUT_S,
                     auth_header: tuple[str, str] | None = None) -> AgentCard:
    """The agent's card: whether it can be reached at all. Raises AgentProblem, naming
    the endpoint, when it cannot."""
    async with _http_client(timeout_s, auth_header) as http:
        try:
            async with asyncio.timeout(timeout_s):
                return await _fetch_card(http, endpoint)
        except TimeoutError:
            raise AgentProblem(f"the agent at {endpoint} did not serve its card within "
                               f"{timeout_s:g} s") from None
        except (A2AError, httpx.HTTPError, ParseError, ValueError) as exc:
            raise AgentProblem(_agent_error_text(endpoint, exc),
                               transport=_is_transport(exc)) from None


def _is_transport(exc: BaseException) -> bool:
    """No connection, a reset, a read that never came: the wire failed, not the agent's
    answer. a2a-sdk wraps httpx's transport errors as 'Network communication error'."""
    return isinstance(exc, httpx.TransportError) or "Network communication error" in str(exc)


def _agent_error_text(endpoint: str, exc: Exception) -> str:
    text = _short(exc)
    if _is_transport(exc):
        return f"agent unreachable at {endpoint}: {text}"
    return f"protocol error from the agent at {endpoint}: {type(exc).__name__}: {text}"


