"""`proctor green serve`: Proctor as an Agentbeats green agent.

The Agentbeats gateway (and the tutorial's client) drives a green agent with one A2A
message whose text part is the JSON assessment request
`{"participants": {role: url}, "config": {...}}`, follows the task's status updates, and
on `completed` takes the data of its artifacts' parts (data parts, and text parts that
parse as JSON) as the `results` of the platform's results file.

Here the request becomes an Evaluation and an AgentUnderTest (as `proctor scenario
import` reads a scenario's [config]), run by the embedded engine as `proctor run` runs
them, into `<output-dir>/<task id>/`. Each finished item is a `working` status update.
The answer is the artifact `Result`: a text summary (not JSON, so the gateway leaves it
out of the results) and the EvalResult as JSON text (integers stay integers, as in the
real results files; a protobuf data part would turn them into floats); then the
artifact `proctor-summary`, summary.json as a file part, which the gateway ignores.

Started as the SWE Verified green agent is: `--host`, `--port`, `--card-url`, the card
at `/.well-known/agent-card.json`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import uvicorn
from a2a.helpers import get_text_parts, new_raw_part, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentSkill,
    Task,
    TaskState,
    TaskStatus,
)
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette

from proctor import __version__
from proctor.agents.server import build_app, card_interfaces, default_card_url
from proctor.core.exits import BadInput, NotRun
from proctor.core.model import RunResult, Summary
from proctor.core.report import terminal_table
from proctor.core.spec import AgentUnderTest, Evaluation
from proctor.formats import agentbeats
from proctor.formats.manifest import parse_resource
from proctor.local.engine import run_evaluation
from proctor.sandboxes.choose import SandboxOptions

log = logging.getLogger(__name__)

EXAMPLE_REQUEST = {"participants": {"agent": "http://agent:9009/"},
                   "config": {"max_concurrent_rows": 2, "max_rows": 20}}


def green_card(card_url: str) -> AgentCard:
    """The card: a 1.0 and a 0.3 JSON-RPC interface at `card_url`, streaming."""
    interfaces = card_interfaces(card_url)
    skill = AgentSkill(id="swe-bench-verified", name="Evaluate an agent on SWE-bench Verified",
                       description="Sends each task to the participant over A2A, tests its "
                                   "patch and grades it; answers with the EvalResult.",
                       tags=["swe-bench", "evaluation", "green"],
                       examples=[json.dumps(EXAMPLE_REQUEST)])
    return AgentCard(name="proctor-green", version=__version__,
                     description="Proctor: SWE-bench Verified assessments of A2A agents.",
                     supported_interfaces=interfaces,
                     capabilities=AgentCapabilities(streaming=True),
                     default_input_modes=["text/plain", "application/json"],
                     default_output_modes=["text/plain", "application/json"], skills=[skill])


def _request_of(context: RequestContext) -> agentbeats.AssessmentRequest:
    parts = list(context.message.parts) if context.message else []
    data = [MessageToDict(p.data) for p in parts if p.WhichOneof("content") == "data"]
    return agentbeats.read_request(get_text_parts(parts), data)


def manifests_for(request: agentbeats.AssessmentRequest, name: str
                  ) -> tuple[Evaluation, AgentUnderTest]:
    """The request's Evaluation and AgentUnderTest, read through the CRDs."""
    docs = [parse_resource(doc, "assessment request")
            for doc in agentbeats.request_manifests(request, name)]
    agent = next(d for d in docs if isinstance(d, AgentUnderTest))
    evaluation = next(d for d in docs if isinstance(d, Evaluation))
    return evaluation, agent


class GreenExecutor(AgentExecutor):
    """Runs each assessment request on the embedded engine."""

    def __init__(self, output_dir: Path, sandbox: SandboxOptions | None = None):
        self.output_dir = output_dir
        self.sandbox = sandbox

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        if context.current_task is None:  # an a2a-sdk 1.x server wants the Task first
            await event_queue.enqueue_event(Task(
                id=task_id, context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[context.message] if context.message else []))
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.start_work()
        try:
            evaluation, agent = manifests_for(_request_of(context), f"green-{task_id[:8]}")
            summary = await self._run(evaluation, agent, updater, self.output_dir / task_id)
        except (BadInput, NotRun) as exc:
            log.info("Assessment %s refused: %s", task_id, exc)
            await updater.failed(updater.new_agent_message([new_text_part(str(exc))]))
            return
        except Exception as exc:  # the task fails; the server keeps serving
            log.exception("Assessment %s failed", task_id)
            await updater.failed(updater.new_agent_message(
                [new_text_part(f"internal error: {type(exc).__name__}: {exc}")]))
            return
        await _answer(updater, summary, evaluation)

    async def _run(self, evaluation: Evaluation, agent: AgentUnderTest, updater: TaskUpdater,
                   folder: Path) -> Summary:
        loop = asyncio.get_running_loop()
        done = 0

        def progress(result: RunResult) -> None:  # on the engine's thread
            nonlocal done
            done += 1
            text = f"{done} done: {result.instance_id} {result.outcome.value}"
            asyncio.run_coroutine_threadsafe(updater.update_status(
                TaskState.TASK_STATE_WORKING, updater.new_agent_message([new_text_part(text)])),
                loop)

        spec = evaluation.spec
        await updater.update_status(TaskState.TASK_STATE_WORKING, updater.new_agent_message(
            [new_text_part(f"Evaluating {agent.name} at {agent.spec.endpoint} on "
                           f"{spec.dataset.name} (results in {folder})")]))
        return await asyncio.to_thread(run_evaluation, evaluation, folder, False, [agent],
                                       sandbox=self.sandbox, on_result=progress)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()


async def _answer(updater: TaskUpdater, summary: Summary, evaluation: Evaluation) -> None:
    """The results artifact (the gateway's), Proctor's summary (a file), then completed."""
    result = agentbeats.eval_result(summary, evaluation).model_dump(mode="json")
    table = "\n".join(terminal_table([(summary.agent, summary.results)], "Agent"))
    await updater.add_artifact([new_text_part(table), new_text_part(json.dumps(result))],
                               name="Result")
    await updater.add_artifact(
        [new_raw_part(json.dumps(summary.model_dump(mode="json"), indent=2).encode(),
                      media_type="application/json", filename="summary.json")],
        name="proctor-summary")
    await updater.complete()


def green_app(card_url: str, output_dir: Path, sandbox: SandboxOptions | None = None
              ) -> Starlette:
    return build_app(GreenExecutor(output_dir, sandbox), green_card(card_url))


def serve(host: str, port: int, card_url: str | None, output_dir: Path,
          sandbox: SandboxOptions | None = None) -> None:
    """Serve until interrupted (what `proctor green serve` does)."""
    url = card_url or default_card_url(host, port)
    log.info("Serving Proctor's green agent on %s:%s, card URL %s, results in %s",
             host, port, url, output_dir)
    uvicorn.run(green_app(url, output_dir, sandbox), host=host, port=port,
                log_level="warning")
