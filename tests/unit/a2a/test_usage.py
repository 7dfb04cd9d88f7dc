"""Usage from the frameworks agents are built with, and what report.md and summary.json
show of it: tokens, cost, agent latency (median, p90) and the run's wall time."""

from __future__ import annotations

import asyncio
import json

import pytest
from a2a.helpers import new_data_part, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Task, TaskState, TaskStatus
from google.protobuf.struct_pb2 import Struct

from proctor.a2a.client import solve
from proctor.a2a.extract import adk_call_usage, extract_usage
from proctor.a2a.message import TaskMessage
from proctor.agents.server import agent_card, build_app, start_in_thread
from proctor.cli.main import main
from proctor.core.model import Usage
from proctor.formats.harness_logs import results_dir
from proctor.results import ResultsFolder

# The shape Google ADK gives each event's usage (a model response's
# GenerateContentResponseUsageMetadata, dumped by alias), as an Agentbeats participant
# built on ADK sends it.
CALLS = [{"promptTokenCount": 1850, "candidatesTokenCount": 120, "totalTokenCount": 1970},
         {"promptTokenCount": 2100, "candidatesTokenCount": 310, "totalTokenCount": 2410,
          "thoughtsTokenCount": 40}]


def _adk_metadata(usage: dict, partial: bool = False, as_json: bool = False) -> dict:
    return {"adk_app_name": "swe_agent", "adk_user_id": "A2A_USER_ctx",
            "adk_session_id": "ctx", "adk_invocation_id": "e-1", "adk_author": "swe_agent",
            "adk_partial": partial,
            "adk_usage_metadata": json.dumps(usage) if as_json else usage}


def test_adk_usage_one_event_and_summed_over_events():
    assert extract_usage(_adk_metadata(CALLS[0])) == Usage(
        input_tokens=1850, output_tokens=120, total_tokens=1970)
    events = [_adk_metadata(CALLS[0]), _adk_metadata(CALLS[0], partial=True),
              _adk_metadata(CALLS[1], as_json=True), {"other": 1},
              {**_adk_metadata(CALLS[1]), "adk_event_id": "e2"},
              {**_adk_metadata(CALLS[1]), "adk_event_id": "e2"}]  # one event, two objects
    assert adk_call_usage(events) == Usage(input_tokens=6050, output_tokens=740,
                                           total_tokens=6790, steps=3)
    assert adk_call_usage([{"other": 1}]) is None


def test_langchain_usage_metadata_and_proctors_own_keys():
    lc = {"usage_metadata": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}
    assert extract_usage(lc) == Usage(input_tokens=10, output_tokens=5, total_tokens=15)
    own = {"usage": {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10,
                     "cost_usd": 0.01, "steps": 4.0}}
    assert extract_usage(own) == Usage(input_tokens=7, output_tokens=3, total_tokens=10,
                                       cost_usd=0.01, steps=4)


class AdkShaped(AgentExecutor):
    """Answers as an ADK agent served by ADK's A2A executor: a status update per model
    call, each with that call's usage in its metadata, then the answer as an artifact."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        await event_queue.enqueue_event(Task(id=task_id, context_id=context_id,
                                             status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)))
        updater = TaskUpdater(event_queue, task_id, context_id)
        for n, usage in enumerate(CALLS):
            metadata = Struct()
            metadata.update(_adk_metadata(usage))
            await updater.update_status(
                TaskState.TASK_STATE_WORKING,
                message=updater.new_agent_message([new_text_part(f"thinking {n}")]),
                metadata=metadata)
        await updater.add_artifact([new_data_part({"note": "no change"})], name="result")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


@pytest.fixture
def adk_agent():
    with start_in_thread(lambda url: build_app(AdkShaped(), agent_card("adk", url))) as server:
        yield server


def test_an_adk_participants_usage_is_recorded(adk_agent):
    message = TaskMessage(text="REPO_DIR:/nowhere\nProblem Statement:\nfix it")
    streamed = asyncio.run(solve(adk_agent.url, message, timeout_s=10))
    assert streamed.usage == Usage(input_tokens=3950, output_tokens=430, total_tokens=4380,
                                   steps=2)
    # Without streaming only the task remains, whose metadata the server merged: the
    # last call's usage is all an orchestrator can see.
    polled = asyncio.run(solve(adk_agent.url, message, timeout_s=10, streaming=False))
    assert polled.usage == Usage(input_tokens=2100, output_tokens=310, total_tokens=2410)


def test_report_and_summary_show_tokens_cost_latency_and_wall_time(tmp_path):
    from proctor.agents.server import start_reference_agent

    out = tmp_path / "o"
    with start_reference_agent("oracle") as agent:
        assert main(["eval", "--agent", agent.url, "-d", "proctor-demo", "-i",
                     "proctor-demo__textkit-1", "proctor-demo__textkit-2",
                     "proctor-demo__textkit-3", "-q", "--sandbox", "process",
                     "--output-dir", str(out)]) == 0
    out = results_dir(out, "run")  # proctor eval's results folder of the run
    results = ResultsFolder(out).load()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["usage_reported"] == 3
    assert summary["usage"]["total_tokens"] == sum(r.usage.total_tokens for r in results)
    assert summary["usage"]["cost_usd"] == pytest.approx(sum(r.usage.cost_usd for r in results))
    assert summary["usage"]["cost_usd"] > 0 and summary["usage"]["steps"] == 3
    solve_times = sorted(r.timings.solve_seconds for r in results)
    assert summary["agent_latency_seconds"]["median"] == pytest.approx(solve_times[1])
    assert summary["agent_latency_seconds"]["p90"] == pytest.approx(solve_times[2])
    # The wall time comes from the items' timestamps, kept to the millisecond.
    assert summary["wall_seconds"] >= max(r.timings.total_seconds for r in results) - 0.002
    report = (out / "report.md").read_text()
    total = f"{summary['usage']['total_tokens']:,}"
    assert "| Tokens (input / output / total) |" in report and f"/ {total} |" in report
    assert f"| Cost | ${summary['usage']['cost_usd']:.4f} |" in report
    assert f"| Run wall time | {summary['wall_seconds']:.1f} s |" in report
    assert "Usage reported by the agent for 3 of 3 items." in report
