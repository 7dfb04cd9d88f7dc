"""`proctor green serve`: Proctor as an Agentbeats green agent, driven by a real a2a-sdk
client as the gateway drives one (one text part holding the JSON assessment request,
streamed; the results are the data of the artifacts' parts: data parts and text parts
that parse as JSON), against a reference agent on loopback."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.helpers import new_text_part
from a2a.types import Message, Role, SendMessageRequest, TaskState
from google.protobuf.json_format import MessageToDict

from proctor.agents.server import RunningServer, start_in_thread, start_reference_agent
from proctor.cli.demo import demo_manifests
from proctor.green.server import green_app
from proctor.local.engine import run_evaluation
from proctor.results import ResultsFolder
from proctor.sandboxes.choose import SandboxOptions
from support.json_shape import shape
from support.paths import SHARED_DATA, shared

REAL_RESULTS = SHARED_DATA / "agentbeats" / "results"
PROCESS = SandboxOptions(mode="process")


@dataclass
class Reply:
    """What the gateway keeps of an assessment: the final state, the progress it printed,
    and `results` as it builds them."""

    state: int = TaskState.TASK_STATE_UNSPECIFIED
    progress: list[str] = field(default_factory=list)
    artifacts: dict[str, Any] = field(default_factory=dict)

    @property
    def results(self) -> list[Any]:
        found: list[Any] = []
        for artifact in self.artifacts.values():
            for part in artifact.parts:
                kind = part.WhichOneof("content")
                if kind == "data":
                    found.append(MessageToDict(part.data))
                elif kind == "text":
                    try:
                        found.append(json.loads(part.text))
                    except json.JSONDecodeError:
                        continue
        return found


async def assess(green_url: str, text: str) -> Reply:
    """One message with one text part, streamed, as the gateway sends it."""
    reply = Reply()
    async with httpx.AsyncClient(timeout=300) as http:
        card = await A2ACardResolver(http, green_url).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
        message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex,
                          parts=[new_text_part(text)])
        async for event in client.send_message(SendMessageRequest(message=message),
                                               context=ClientCallContext(timeout=300)):
            kind = event.WhichOneof("payload")
            if kind == "status_update":
                status = event.status_update.status
                reply.state = status.state
                reply.progress += [p.text for p in status.message.parts if p.text]
            elif kind == "artifact_update":
                artifact = event.artifact_update.artifact
                reply.artifacts[artifact.artifact_id] = artifact
            elif kind == "task":
                reply.state = event.task.status.state
                reply.artifacts |= {a.artifact_id: a for a in event.task.artifacts}
    return reply


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> tuple[RunningServer, RunningServer, Path]:
    out = tmp_path_factory.mktemp("green")
    with start_reference_agent("mixed") as agent, \
            start_in_thread(lambda url: green_app(url, out, PROCESS)) as green:
        yield agent, green, out


def request(agent_url: str, **config: Any) -> str:
    return json.dumps({"participants": {"agent": agent_url},
                       "config": {"dataset": "proctor-demo", "max_rows": -1,
                                  "max_concurrent_rows": 2, **config}})


def folder_of(out: Path, **dataset: Any) -> ResultsFolder:
    """The results folder of the assessment whose dataset spec holds `dataset`."""
    for spec in sorted(out.glob("*/spec.json")):
        ds = json.loads(spec.read_text())["spec"]["dataset"]
        if all(ds.get(k) == v for k, v in dataset.items()):
            return ResultsFolder(spec.parent)
    raise AssertionError(f"no assessment with {dataset}")


async def test_an_assessment_equals_proctor_run(servers, tmp_path: Path) -> None:
    agent, green, _ = servers
    reply = await assess(green.url, request(agent.url))
    assert reply.state == TaskState.TASK_STATE_COMPLETED, reply.progress
    assert any(" done: " in line for line in reply.progress), reply.progress
    (result,) = reply.results
    real = json.loads(next(shared(REAL_RESULTS).glob("*.json")).read_text())
    assert shape(result) == shape(real["results"][0])
    # proctor run on the same inputs (the same agent, dataset and rows)
    evaluation, agent_manifest = demo_manifests("mixed", agent.url, 2)
    summary = await asyncio.to_thread(run_evaluation, evaluation, tmp_path / "run",
                                      progress=False, agents=[agent_manifest], sandbox=PROCESS)
    assert {k: v for k, v in result.items() if k != "green_agent_model"} == \
        summary.results.model_dump()
    assert result["green_agent_model"] == evaluation.spec.green_agent_model
    # Proctor's summary rides along as a file, which the gateway's results leave out
    files = [p for a in reply.artifacts.values() for p in a.parts if p.WhichOneof("content")
             == "raw"]
    assert [f.filename for f in files] == ["summary.json"]
    assert json.loads(files[0].raw)["results"] == summary.results.model_dump()


async def test_shards_unioned_equal_the_unsharded_run(servers) -> None:
    agent, green, out = servers
    for index in (0, 1, 2):
        reply = await assess(green.url, request(agent.url, shard_index=index, num_shards=3))
        assert reply.state == TaskState.TASK_STATE_COMPLETED, reply.progress
    whole = await assess(green.url, request(agent.url, max_concurrent_rows=3))
    assert whole.state == TaskState.TASK_STATE_COMPLETED
    shards = [folder_of(out, shard={"index": i, "count": 3}).load() for i in (0, 1, 2)]
    unsharded = folder_of(out, shard=None).load()
    ids = [r.instance_id for s in shards for r in s]
    assert len(ids) == len(set(ids)) == len(unsharded) == 10
    outcomes = {r.instance_id: (r.item_id, r.outcome) for s in shards for r in s}
    assert outcomes == {r.instance_id: (r.item_id, r.outcome) for r in unsharded}


@pytest.mark.parametrize(("text", "said"), [
    ("please evaluate my agent", "no assessment request"),
    (json.dumps({"participants": {"a": "http://127.0.0.1:9/", "b": "http://127.0.0.1:9/"}}),
     "one agent per request"),
    (json.dumps({"participants": {"agent": "http://127.0.0.1:9/"},
                 "config": {"shard_index": 3, "num_shards": 2}}), "below num_shards"),
])
async def test_a_bad_request_fails_the_task_with_one_line(servers, text: str,
                                                          said: str) -> None:
    _, green, _ = servers
    reply = await assess(green.url, text)
    assert reply.state == TaskState.TASK_STATE_FAILED
    assert said in reply.progress[-1] and "\n" not in reply.progress[-1]
    assert reply.results == []


async def test_an_unreachable_participant_fails_the_task(servers) -> None:
    _, green, _ = servers
    reply = await assess(green.url, request("http://127.0.0.1:9/"))
    assert reply.state == TaskState.TASK_STATE_FAILED
    assert "unreachable" in reply.progress[-1]
