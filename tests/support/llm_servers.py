"""Two model servers on loopback for the `llm` variants strategy: one OpenAI-compatible
(`/v1/chat/completions`), one speaking Ollama's protocol (`/api/generate`, `/api/chat`),
each answering from a script of replies, so litellm's real client code is exercised.

Why not a real model: none can be reached from the machines the tests run on (no network,
no provider's key), a local model would take minutes per reply on two cores, and the
tests need replies no model gives on demand (a broken JSON, an echo of the key, a 500, a
reply after the client's timeout).

A script step is the reply text, or one of `HTTP500`, `SLOW` (answers after the client
gave up), an `HttpError` (a status and the provider's message), an assistant message
with tool calls (`bash_call`, for agent loops such as mini-swe-agent's), or a callable of
the request's prompt returning one of those.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HTTP500 = "<http 500>"
SLOW = "<slow>"
SLOW_S = 3.0

@dataclass(frozen=True)
class HttpError:
    """An OpenAI-style error answer: `status` with `message` (a 401 that echoes a masked
    key, as providers do)."""

    status: int
    message: str


Reply = str | dict[str, Any]
"""The reply's text, or the assistant message itself (`content`, `tool_calls`)."""
Step = Reply | HttpError | Callable[[str], Reply]
_call_ids = itertools.count(1)


def bash_call(command: str, thought: str = "") -> dict[str, Any]:
    """An assistant message that calls the `bash` tool (mini-swe-agent's one tool) once."""
    call = {"id": f"call_{next(_call_ids)}", "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": command})}}
    return {"content": thought or None, "tool_calls": [call]}


class ScriptedModel:
    """A model server on `host` (127.0.0.1; a cluster test gives the node's address):
    `base` is its address, `calls` the prompts it got."""

    def __init__(self, protocol: str, models: tuple[str, ...] = ("test-model",),
                 host: str = "127.0.0.1"):
        self.protocol, self.models = protocol, models
        self.script: list[Step] = []
        self.calls: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner._answer(self, self.path, body)

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://{host}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _answer(self, handler: BaseHTTPRequestHandler, path: str, body: dict) -> None:
        prompt = _prompt(body)
        self.calls.append({"path": path, "model": body.get("model"), "prompt": prompt,
                           "authorization": handler.headers.get("Authorization")})
        if body.get("model") not in self.models:
            message = f"model '{body.get('model')}' not found"
            error = ({"error": message} if self.protocol == "ollama" else
                     {"error": {"message": message, "type": "invalid_request_error",
                                "code": "model_not_found"}})
            return _send(handler, 404, error)
        step = self.script.pop(0) if self.script else ""
        if step == HTTP500:
            return _send(handler, 500, {"error": "internal error"})
        if isinstance(step, HttpError):
            return _send(handler, step.status, {"error": {
                "message": step.message, "type": "invalid_request_error", "code": None}})
        if step == SLOW:
            time.sleep(SLOW_S)
            step = ""
        reply = step(prompt) if callable(step) else step
        _send(handler, 200, self._reply(path, body["model"], reply))

    def _reply(self, path: str, model: str, reply: Reply) -> dict:
        text = reply if isinstance(reply, str) else str(reply.get("content") or "")
        usage = {"prompt_eval_count": 100, "eval_count": 50}
        if path.endswith("/api/generate"):
            return {"model": model, "response": text, "done": True, **usage}
        if path.endswith("/api/chat"):
            return {"model": model, "message": {"role": "assistant", "content": text},
                    "done": True, **usage}
        message = {"role": "assistant", "content": text} if isinstance(reply, str) else \
            {"role": "assistant", **reply}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return {"id": "x", "object": "chat.completion", "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}}


def _prompt(body: dict) -> str:
    if "prompt" in body:
        return body["prompt"]
    return "\n".join(m.get("content", "") for m in body.get("messages", [])
                     if isinstance(m.get("content"), str))


def _send(handler: BaseHTTPRequestHandler, status: int, payload: dict) -> None:
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    # The client may have given up first (a `SLOW` step): what a timeout test wants.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        handler.wfile.write(data)

