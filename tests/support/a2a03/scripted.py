"""What the scripted test agents do, shared by the a2a-sdk 1.x and 0.3 servers.

Standard library only: this module runs in Proctor's own venv and in the
separate a2a-sdk 0.3 venv the tests make.

A test tells the agent what to do in the message's data part, as
`"script": "delay=2;state=completed;form=fence;where=artifact"`:

* delay: seconds before answering;
* state: completed, failed, canceled, rejected, input-required;
* form: data (`{"patch": …}`), data-diff / data-model_patch (other keys),
  file, fence, bare, tag, none;
* where: artifact, status (in the final status message), history (in an agent
  message of the task history: a status message that a later status replaces),
  message (a Message reply, no task at all);
* drop: end / abort: the server cuts a streamed reply after its first two
  events, cleanly or by closing the connection (the task goes on);
* usage: yes: report token usage in the metadata.

`CountingMiddleware` counts the message sends each server receives and answers
`GET /_sends` with them, so a test can check that a message was sent once.

Why scripted and not a real agent: the servers are the real SDKs' own (1.x and 0.3); what
an agent built on them answers, and when, is what the client must cope with, and no real
agent can be made to answer in each shape, state and timing on demand, nor to cut its
stream mid-task.
"""

from __future__ import annotations

import json
from typing import Any

# Blank context lines are a lone space: spelled out, so no editor strips them.
PATCH = ("diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n"
         "@@ -1,5 +1,5 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n \n \n"
         " def sub(a, b):\n")
USAGE = {"input_tokens": 1200, "output_tokens": 340, "total_tokens": 1540, "cost_usd": 0.0125}
SEND_METHODS = {"message/send", "message/stream", "SendMessage", "SendStreamingMessage"}
STREAM_METHODS = {"message/stream", "SendStreamingMessage"}
KEEP_EVENTS = 2


def parse_script(text: str) -> dict[str, str]:
    """`"a=1;b=2"` -> {"a": "1", "b": "2"}, over the defaults."""
    script = {"delay": "0", "state": "completed", "form": "data", "where": "artifact",
              "drop": "", "usage": ""}
    for item in filter(None, (s.strip() for s in text.split(";"))):
        key, _, value = item.partition("=")
        script[key.strip()] = value.strip()
    return script


def answer_parts(form: str) -> list[tuple[str, Any]]:
    """The parts that carry the patch, as (kind, value) pairs each SDK turns into Parts."""
    if form == "none":
        return [("text", "I looked into it and changed nothing.")]
    if form.startswith("data"):
        key = form.partition("-")[2] or "patch"
        return [("data", {key: PATCH, "note": "the fix"})]
    if form == "file":
        return [("file", PATCH.encode())]
    if form == "fence":
        return [("text", f"Here you go:\n\n```diff\n{PATCH}```\n\nThat should do it.")]
    if form == "tag":
        return [("text", f"<patch>\n{PATCH}</patch>")]
    return [("text", PATCH)]


def _script_of(body: bytes) -> tuple[str, dict[str, str]]:
    try:
        request = json.loads(body)
    except ValueError:
        return "", parse_script("")
    method = str(request.get("method", "")) if isinstance(request, dict) else ""
    message = (request.get("params") or {}).get("message") or {} if method else {}
    for part in message.get("parts") or []:
        data = part.get("data")
        if isinstance(data, dict) and "script" in data:
            return method, parse_script(str(data["script"]))
    return method, parse_script("")


class CountingMiddleware:
    """Plain ASGI: counts message sends; cuts streamed replies when the script says so."""

    def __init__(self, app: Any):
        self.app = app
        self.sends = 0
        self.methods: list[str] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["method"] == "GET" and scope["path"] == "/_sends":
            return await self._report(send)
        if scope["method"] != "POST":
            return await self.app(scope, receive, send)
        body = await _read_body(receive)
        method, script = _script_of(body)
        self.methods.append(method)
        self.sends += method in SEND_METHODS
        replay = [{"type": "http.request", "body": body, "more_body": False}]

        async def replayed() -> dict:
            return replay.pop() if replay else await receive()

        if method in STREAM_METHODS and script["drop"]:
            send = _cutting(send, script["drop"])
        await self.app(scope, replayed, send)

    async def _report(self, send: Any) -> None:
        body = json.dumps({"sends": self.sends, "methods": self.methods}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Any) -> bytes:
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


def _cutting(send: Any, mode: str) -> Any:
    """A `send` that lets KEEP_EVENTS body chunks through, then ends or aborts the reply."""
    seen, done = 0, False

    async def cut(message: dict) -> None:
        nonlocal seen, done
        if done:
            return  # the server goes on producing; the client just never hears it
        if message["type"] == "http.response.body" and message.get("body"):
            seen += 1
            if seen > KEEP_EVENTS:
                if mode == "abort":
                    raise ConnectionAbortedError("the test cut the stream")
                done = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
        await send(message)

    return cut
