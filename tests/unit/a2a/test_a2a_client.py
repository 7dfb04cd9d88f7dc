"""The A2A client against real agents: a2a-sdk 1.x servers in this process, 0.3.x servers
in a venv of their own, streaming and not. No part of the SDK is mocked.

Each scripted agent does what the message's `script` says (tests/support/a2a03/scripted.py)
and counts the message sends it receives, so the tests can check that a message
is never sent twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path

import httpx
import pytest
from a2a.helpers import new_data_part, new_raw_part, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Message, Part, Role, Task, TaskState, TaskStatus
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from proctor.a2a.client import SolveResult, pinned_url, resume, solve
from proctor.a2a.message import TaskMessage
from proctor.agents.server import agent_card, build_app, start_in_thread
from proctor.core.model import ErrorKind, Usage
from support.a2a03 import sdk03
from support.a2a03.scripted import PATCH, USAGE, CountingMiddleware, answer_parts, parse_script
from support.ports import free_port

STATES = {"completed": TaskState.TASK_STATE_COMPLETED, "failed": TaskState.TASK_STATE_FAILED,
          "canceled": TaskState.TASK_STATE_CANCELED, "rejected": TaskState.TASK_STATE_REJECTED,
          "input-required": TaskState.TASK_STATE_INPUT_REQUIRED,
          "auth-required": TaskState.TASK_STATE_AUTH_REQUIRED}
ELSEWHERE = "http://agent.invalid:9/"  # what a card says behind a Service or port-forward


def to_parts(pairs) -> list[Part]:
    parts = []
    for kind, value in pairs:
        if kind == "data":
            parts.append(new_data_part(value))
        elif kind == "file":
            parts.append(new_raw_part(value, media_type="text/x-diff", filename="answer.diff"))
        else:
            parts.append(new_text_part(value))
    return parts


def script_of(message: Message | None) -> dict[str, str]:
    for part in message.parts if message else []:
        data = MessageToDict(part.data) if part.WhichOneof("content") == "data" else None
        if isinstance(data, dict) and "script" in data:
            return parse_script(str(data["script"]))
    return parse_script("")


class ScriptedExecutor(AgentExecutor):
    """The 1.x twin of tests/support/a2a03/server03.py's agent."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        script = script_of(context.message)
        parts = to_parts(answer_parts(script["form"]))
        metadata = {"usage": USAGE} if script["usage"] else None
        if script["where"] == "message":
            await asyncio.sleep(float(script["delay"]))
            await event_queue.enqueue_event(Message(
                role=Role.ROLE_AGENT, message_id="reply", context_id=context.context_id,
                parts=parts, metadata=metadata))
            return
        await event_queue.enqueue_event(Task(
            id=context.task_id, context_id=context.context_id, history=[context.message],
            status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)))
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.start_work()
        await asyncio.sleep(float(script["delay"]))
        if script["where"] == "artifact" and script["form"] != "none":
            await updater.add_artifact(parts, name="answer", metadata=metadata)
        if script["where"] == "history":
            await updater.start_work(updater.new_agent_message(parts))
        final = parts if script["where"] == "status" else [new_text_part("done")]
        await updater.update_status(STATES[script["state"]],
                                    updater.new_agent_message(final, metadata=metadata))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


class Agent:
    """A running scripted agent: its URL, and how many sends it has had."""

    def __init__(self, url: str, counter):
        self.url, self._counter = url, counter

    @property
    def sends(self) -> int:
        return self._counter()


def start_1x(stack, streaming: bool, card_url: str | None = None,
             wrap=lambda app: app) -> Agent:
    holder: list[CountingMiddleware] = []

    def app_for(url: str):
        app = build_app(ScriptedExecutor(), agent_card("scripted", card_url or url, streaming))
        holder.append(CountingMiddleware(app))
        return wrap(holder[0])

    server = start_in_thread(app_for)
    stack.callback(server.stop)
    return Agent(server.url, lambda: holder[0].sends)


@pytest.fixture(scope="session")
def venv03(request) -> Path:
    """A venv with a2a-sdk 0.3 (made once, kept in pytest's cache folder)."""
    return sdk03.ensure_venv(request.config.cache.mkdir("a2a-sdk-0.3-venv"))


@pytest.fixture(scope="module")
def agents(venv03, tmp_path_factory):
    """Scripted agents on both SDK generations, streaming and not, and with a card
    that names another address."""
    from contextlib import ExitStack

    logs = tmp_path_factory.mktemp("a2a03-logs")
    with ExitStack() as stack:
        found = {"1.x-stream": start_1x(stack, True), "1.x-blocking": start_1x(stack, False),
                 "1.x-elsewhere": start_1x(stack, True, card_url=ELSEWHERE)}
        for name, kwargs in (("0.3-stream", {}), ("0.3-blocking", {"streaming": False}),
                             ("0.3-elsewhere", {"card_url": ELSEWHERE})):
            proc, url = sdk03.start_server03(venv03, logs / f"{name}.log", **kwargs)
            stack.callback(sdk03.stop, proc)
            found[name] = Agent(url, lambda url=url: sdk03.sends(url))
        yield found


SERVERS = ["1.x-stream", "1.x-blocking", "0.3-stream", "0.3-blocking"]
STREAMING = ["1.x-stream", "0.3-stream"]


def ask(agent: Agent, script: str, timeout_s: float = 30, **kw) -> SolveResult:
    return asyncio.run(solve(agent.url, TaskMessage("Fix add().", {"script": script}),
                             timeout_s=timeout_s, **kw))


def assert_patch(result: SolveResult) -> None:
    assert result.patch == PATCH, result.summary
    assert result.error_kind is None and result.error is None
    assert result.state == "completed"


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("form", ["data", "data-diff", "data-model_patch", "file", "fence",
                                  "tag", "bare"])
def test_patch_in_an_artifact(agents, server, form):
    result = ask(agents[server], f"form={form}")
    assert_patch(result)
    assert "patch from artifact answer" in result.summary
    assert result.task_id and result.latency_s > 0


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize(("where", "form", "found_in"), [
    ("status", "fence", "status message"), ("message", "tag", "final message"),
    ("history", "bare", "history"), ("status", "data", "status message")])
def test_patch_elsewhere_in_the_reply(agents, server, where, form, found_in):
    result = ask(agents[server], f"where={where};form={form}")
    assert_patch(result)
    assert f"patch from {found_in}" in result.summary


@pytest.mark.parametrize("server", SERVERS)
def test_usage_from_metadata(agents, server):
    result = ask(agents[server], "form=file;usage=yes")
    assert_patch(result)
    assert result.usage == Usage(**USAGE)


@pytest.mark.parametrize("server", SERVERS)
def test_answer_without_patch_is_no_patch_and_no_error(agents, server):
    result = ask(agents[server], "form=none")
    assert (result.patch, result.state, result.error_kind) == ("", "completed", None)
    assert result.detail == "the agent answered without a patch"


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("state", ["rejected", "input-required"])
def test_rejected_or_input_required_is_no_patch_and_no_error(agents, server, state):
    # Even when the agent attached a patch: the table says no_op.
    result = ask(agents[server], f"state={state};form=data")
    assert (result.patch, result.state, result.error_kind) == ("", state, None)
    assert state in (result.detail or "")


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("state", ["failed", "canceled", "auth-required"])
def test_failed_canceled_or_auth_required_is_an_agent_error(agents, server, state):
    result = ask(agents[server], f"state={state};form=none")
    assert result.error_kind == ErrorKind.AGENT and result.patch == ""
    assert result.state == state and state in (result.error or "")


@pytest.mark.parametrize("server", STREAMING)
@pytest.mark.parametrize("mode", ["end", "abort"])
def test_dropped_stream_is_followed_without_sending_again(agents, server, mode):
    agent = agents[server]
    before = agent.sends
    result = ask(agent, f"delay=1;drop={mode}")
    assert_patch(result)
    assert "followed by polling" in result.summary
    assert agent.sends - before == 1


@pytest.mark.parametrize("server", SERVERS)
def test_the_task_id_is_told_once_as_the_agent_names_it(agents, server):
    named: list[str] = []
    result = ask(agents[server], "form=data", on_task_id=named.append)
    assert_patch(result)
    assert result.task_id and named == [result.task_id]


def test_a_message_reply_names_no_task(agents):
    named: list[str] = []
    assert_patch(ask(agents["1.x-stream"], "where=message", on_task_id=named.append))
    assert named == []


@pytest.mark.parametrize("server", STREAMING)
def test_a_task_whose_client_went_away_is_resumed_by_its_id_without_sending_again(agents,
                                                                                  server):
    """The client is gone (a preempted pod) once the agent named its task; the agent
    finishes the task anyway, and `resume` gets the answer by the id alone."""
    agent = agents[server]
    before = agent.sends

    async def leave_then_resume() -> tuple[list[str], SolveResult]:
        named: list[str] = []
        first = asyncio.ensure_future(solve(
            agent.url, TaskMessage("Fix add().", {"script": "delay=2;usage=yes"}),
            timeout_s=30, on_task_id=named.append))
        async with asyncio.timeout(20):
            while not named:
                await asyncio.sleep(0.01)
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        return named, await resume(agent.url, named[0], timeout_s=30)

    named, result = asyncio.run(leave_then_resume())
    assert_patch(result)
    assert result.task_id == named[0] and "resumed" in result.summary
    assert result.usage == Usage(**USAGE)
    assert agent.sends - before == 1


@pytest.mark.parametrize("server", SERVERS)
def test_resuming_a_task_the_agent_does_not_know_is_an_agent_error_naming_it(agents, server):
    result = asyncio.run(resume(agents[server].url, "no-such-task", timeout_s=30))
    assert result.error_kind == ErrorKind.AGENT and result.patch == ""
    assert "does not know the task no-such-task" in (result.error or ""), result.error


def library_default_timeout_s() -> float:
    """httpx's own read timeout, which a2a-sdk's client keeps unless told otherwise."""
    with httpx.Client() as http:
        return http.timeout.read or 0.0


def test_agent_answering_after_the_librarys_timeout_gets_its_patch_from_one_send(agents):
    # The library's own default request timeout is 5 s; SWE agents take minutes. An answer
    # a little after that default proves each request carries the agent's time limit
    # instead: the minutes themselves prove nothing more.
    delay = library_default_timeout_s() + 2
    names = SERVERS
    before = {name: agents[name].sends for name in names}
    message = TaskMessage("Fix add().", {"script": f"delay={delay};form=fence"})

    async def all_at_once() -> list[SolveResult]:
        return await asyncio.gather(*(solve(agents[n].url, message, timeout_s=180)
                                      for n in names))

    results = asyncio.run(all_at_once())
    for name, result in zip(names, results, strict=True):
        assert_patch(result)
        assert result.latency_s >= delay  # the agent sleeps that long: it was waited for
        assert agents[name].sends - before[name] == 1, name


@pytest.mark.parametrize("server", ["1.x-stream", "0.3-blocking"])
def test_agent_past_its_time_limit_is_an_agent_error(agents, server):
    # An agent that would answer after 30 s: the error with no patch shows that the client
    # stopped at its limit rather than waiting for the answer.
    result = ask(agents[server], "delay=30", timeout_s=1.5)
    assert result.error_kind == ErrorKind.AGENT and result.patch == ""
    assert "did not finish within 1.5 s" in (result.error or "")


def test_unreachable_agent_is_an_agent_error():
    url = f"http://127.0.0.1:{free_port()}/"
    result = asyncio.run(solve(url, TaskMessage("hi"), timeout_s=10))
    assert result.error_kind == ErrorKind.AGENT
    assert (result.error or "").startswith(f"agent unreachable at {url}")


@pytest.mark.parametrize("server", ["1.x-elsewhere", "0.3-elsewhere"])
@pytest.mark.parametrize("streaming", [True, False])
def test_requests_go_to_the_endpoint_not_the_url_on_the_card(agents, server, streaming):
    agent = agents[server]
    before = agent.sends
    result = ask(agent, "form=data", streaming=streaming)
    assert_patch(result)
    assert agent.sends - before == 1


def test_streaming_can_be_turned_off(agents):
    result = ask(agents["1.x-stream"], "form=data", streaming=False)
    assert_patch(result)
    assert "(not streaming)" in result.summary and "1 events" in result.summary


def test_auth_header_is_sent_with_every_request():
    from contextlib import ExitStack

    def guarded(app):
        async def guard(scope, receive, send):
            headers = dict(scope.get("headers") or [])
            if scope["type"] == "http" and headers.get(b"authorization") != b"Bearer s3cret":
                await Response(status_code=401)(scope, receive, send)
                return
            await app(scope, receive, send)
        return guard

    with ExitStack() as stack:
        agent = start_1x(stack, True, wrap=guarded)
        ok = asyncio.run(solve(agent.url, TaskMessage("x", {"script": "form=data"}),
                               timeout_s=10, auth_header=("Authorization", "Bearer s3cret")))
        assert_patch(ok)
        refused = asyncio.run(solve(agent.url, TaskMessage("x"), timeout_s=10))
        assert refused.error_kind == ErrorKind.AGENT and "401" in (refused.error or "")


def _not_an_agent(url: str) -> Starlette:
    async def card(_request):
        return JSONResponse({"name": "broken", "description": "d", "version": "1",
                             "url": url, "capabilities": {}, "skills": [],
                             "defaultInputModes": [], "defaultOutputModes": []})

    async def rpc(_request):
        return Response("upstream exploded", status_code=500)

    return Starlette(routes=[Route("/.well-known/agent-card.json", card),
                             Route("/", rpc, methods=["POST"])])


def test_protocol_error_is_an_agent_error():
    server = start_in_thread(_not_an_agent)
    try:
        result = asyncio.run(solve(server.url, TaskMessage("x"), timeout_s=10))
    finally:
        server.stop()
    assert result.error_kind == ErrorKind.AGENT
    assert "500" in (result.error or "")


def test_no_agent_card_is_an_agent_error():
    server = start_in_thread(lambda _url: Starlette(routes=[]))
    try:
        result = asyncio.run(solve(server.url, TaskMessage("x"), timeout_s=10))
    finally:
        server.stop()
    assert result.error_kind == ErrorKind.AGENT
    assert "serves no agent card" in (result.error or "")


def test_solve_works_on_worker_threads_each_with_its_own_loop(agents):
    results: list[SolveResult] = []

    def work() -> None:
        results.append(asyncio.run(solve(agents["0.3-stream"].url,
                                         TaskMessage("x", {"script": "form=tag"}),
                                         timeout_s=30)))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 3
    for result in results:
        assert_patch(result)


@pytest.mark.parametrize(("card", "endpoint", "expected"), [
    ("http://agent:9009/", "http://127.0.0.1:8080/", "http://127.0.0.1:8080/"),
    ("http://agent:9009", "http://127.0.0.1:8080/", "http://127.0.0.1:8080/"),
    ("http://agent:9009/a2a/jsonrpc", "http://localhost:8080/", "http://localhost:8080/a2a/jsonrpc"),
    ("http://agent:9009/a2a/", "http://localhost:8080/", "http://localhost:8080/a2a/"),
    ("http://svc/agents/x/rpc", "https://gw/agents/x/", "https://gw/agents/x/rpc"),
    ("http://svc/rpc", "https://gw/prefix", "https://gw/prefix/rpc"),
    ("http://svc/prefix", "https://gw/prefix/", "https://gw/prefix/"),
])
def test_pinned_url(card, endpoint, expected):
    assert pinned_url(card, endpoint) == expected
