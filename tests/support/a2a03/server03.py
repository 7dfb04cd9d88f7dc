"""A scripted agent on an a2a-sdk 0.3.x server: what many agents in the wild still run.

Runs in the separate 0.3 venv the tests make (never in Proctor's own):

    python server03.py --port 9123 [--card-url URL] [--no-streaming]

It does what the message's `script` says (see scripted.py, which says why a scripted
agent stands in for a real one), on the 0.3 SDK's own classes:
A2AStarletteApplication, DefaultRequestHandler, TaskUpdater.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
from typing import Any

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2AStarletteApplication
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentSkill,
    DataPart,
    FilePart,
    FileWithBytes,
    Part,
    TaskState,
    TextPart,
)
from a2a.utils import new_agent_parts_message, new_agent_text_message, new_task

# Run as a script, so its own folder is on sys.path.
from scripted import USAGE, CountingMiddleware, answer_parts, parse_script

STATES = {"completed": TaskState.completed, "failed": TaskState.failed,
          "canceled": TaskState.canceled, "rejected": TaskState.rejected,
          "input-required": TaskState.input_required, "auth-required": TaskState.auth_required}


def to_parts(pairs: list[tuple[str, Any]]) -> list[Part]:
    parts = []
    for kind, value in pairs:
        if kind == "data":
            parts.append(Part(root=DataPart(data=value)))
        elif kind == "file":
            parts.append(Part(root=FilePart(file=FileWithBytes(
                bytes=base64.b64encode(value).decode(), mime_type="text/x-diff",
                name="answer.diff"))))
        else:
            parts.append(Part(root=TextPart(text=value)))
    return parts


def script_of(context: RequestContext) -> dict[str, str]:
    for part in context.message.parts if context.message else []:
        if isinstance(part.root, DataPart) and "script" in part.root.data:
            return parse_script(str(part.root.data["script"]))
    return parse_script("")


class ScriptedExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        script = script_of(context)
        parts = to_parts(answer_parts(script["form"]))
        metadata = {"usage": USAGE} if script["usage"] else None
        if script["where"] == "message":
            await asyncio.sleep(float(script["delay"]))
            reply = new_agent_parts_message(parts, context.context_id)
            reply.metadata = metadata
            await event_queue.enqueue_event(reply)
            return
        task = context.current_task or new_task(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        await asyncio.sleep(float(script["delay"]))
        await self._answer(updater, script, parts, metadata)

    async def _answer(self, updater: TaskUpdater, script: dict[str, str], parts: list[Part],
                      metadata: dict | None) -> None:
        where = script["where"]
        if where == "artifact" and script["form"] != "none":
            await updater.add_artifact(parts, name="answer", metadata=metadata)
        if where == "history":
            await updater.update_status(TaskState.working, new_agent_parts_message(
                parts, updater.context_id, updater.task_id))
        final = parts if where == "status" else [Part(root=TextPart(text="done"))]
        message = new_agent_parts_message(final, updater.context_id, updater.task_id)
        message.metadata = metadata
        await updater.update_status(STATES[script["state"]], message, final=True)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.update_status(TaskState.canceled, new_agent_text_message("canceled"),
                                    final=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--card-url")
    parser.add_argument("--no-streaming", action="store_true")
    args = parser.parse_args()
    card = AgentCard(name="scripted-0.3", description="A scripted test agent on a2a-sdk 0.3",
                     url=args.card_url or f"http://{args.host}:{args.port}/", version="0.3",
                     default_input_modes=["text/plain"], default_output_modes=["text/plain"],
                     capabilities=AgentCapabilities(streaming=not args.no_streaming),
                     skills=[AgentSkill(id="patch", name="patch", description="answers",
                                        tags=["test"])])
    handler = DefaultRequestHandler(agent_executor=ScriptedExecutor(),
                                    task_store=InMemoryTaskStore())
    app = CountingMiddleware(A2AStarletteApplication(card, handler).build())
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
