"""The solve step: ask the agent under test for a patch, once, and record its answer.

Reads `instance.json`, `item.json` and `prompt.txt` (the problem text of the item's
variant) from the work folder; writes `patch.diff` (or `patch_refused`),
`solve.json` (how the exchange ended, usage, confidence, latency), `transcript.json.gz` (what the
agent sent back, bounded: `runner/transcript.py`) and prints the patch between
markers, so that a retry after an infrastructure failure can take it from this
step's log instead of asking the agent a second time.

As soon as the agent names its task, the step's log gets `solve: agent task <id>`
(`task_line`); a retry of a step killed before the answer came (a preempted pod) reads
it back with `task_id_from_log` and resumes that task (`solve_step(resume_task=...)`)
instead of sending the item again.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proctor.core.model import ErrorKind, Usage
from proctor.runner.transcript import write_transcript
from proctor.runner.workdir import WorkDir, write_json, write_patch

if TYPE_CHECKING:
    from proctor.a2a.client import SolveResult

PATCH_BEGIN = ">>>>> Proctor Patch Begin"
PATCH_END = ">>>>> Proctor Patch End"
TASK_LINE = "solve: agent task "
# A whole line: the solve summary (`solve: agent NAME (streaming); task …`) never matches.
# Ids outside this alphabet are not announced: the item is then sent again, as before.
_TASK_ID = r"[A-Za-z0-9][A-Za-z0-9._:-]{0,255}"
_TASK_LINE_RE = re.compile(rf"^{re.escape(TASK_LINE)}({_TASK_ID})$", re.MULTILINE)


@dataclass(frozen=True)
class AgentTarget:
    """Where and how to reach the agent under test."""

    endpoint: str
    timeout_s: float = 1800
    auth_header: tuple[str, str] | None = None
    streaming: bool = True
    task_data: bool = False
    """Send the data part naming the task (AgentUnderTest.spec.taskData)."""
    max_concurrent_tasks: int = 8
    """How many tasks the agent takes at once (AgentUnderTest.spec.maxConcurrentTasks)."""
    card_wait_s: float | None = None
    """A sidecar agent: fetch its card, retrying this long, before the task is sent (its
    port opens before its app may serve); None: send the task at once."""


CARD_RETRY_SECONDS = 1.0
CARD_FETCH_SECONDS = 5.0


async def wait_for_card(agent: AgentTarget, deadline_s: float) -> str | None:
    """Fetch the agent's card until it answers or `deadline_s` has passed: None when it
    answered, else why not, naming the agent's address."""
    from proctor.a2a.client import AgentProblem, fetch_card

    end = time.monotonic() + deadline_s
    while True:
        left = end - time.monotonic()
        try:
            await fetch_card(agent.endpoint, max(0.5, min(CARD_FETCH_SECONDS, left)),
                             auth_header=agent.auth_header)
            return None
        except AgentProblem as exc:
            left = end - time.monotonic()
            if left <= 0:
                return (f"the sidecar agent at {agent.endpoint} did not serve its card "
                        f"within {deadline_s:g} s of its start: {exc}")
        await asyncio.sleep(min(CARD_RETRY_SECONDS, left))


def write_prompt(work: WorkDir, problem_text: str) -> None:
    (work / "prompt.txt").write_text(problem_text)


def task_line(task_id: str) -> str:
    """The line the solve step logs once the agent has named its task."""
    return f"{TASK_LINE}{task_id}"


def task_id_from_log(log: str) -> str | None:
    """The agent's task id a solve step logged (the last one), or None when it logged
    none: the step died before the agent named its task, or never sent one."""
    found = _TASK_LINE_RE.findall(log)
    return found[-1] if found else None


async def solve_item(work: WorkDir, agent: AgentTarget, include_hints: bool,
                     repo_dir: str | None = None, *, resume_task: str | None = None,
                     on_task_id: Callable[[str], None] | None = None) -> SolveResult:
    """The solve step: send the item to the agent and keep its patch in the work folder.
    Cancelled (the run is stopping), the request is abandoned and nothing is written.

    `resume_task`: the id of the agent's task for this item, sent by an earlier attempt;
    its answer is followed instead of sending the item again. `on_task_id` is told the
    task's id as soon as it is known (at once when resuming).
    """
    # Imported here: the grade step reads solve.json without loading the A2A client.
    from proctor.a2a.client import SolveResult

    not_ready = await wait_for_card(agent, agent.card_wait_s) if agent.card_wait_s else None
    if not_ready:  # the agent's to fix (its image, its start): an agent error, not sent
        result = SolveResult(error_kind=ErrorKind.AGENT, error=not_ready,
                             summary=f"agent error: {not_ready}")
    else:
        result = await _ask(work, agent, include_hints, repo_dir, resume_task, on_task_id)
    _record(work, result, resume_task)
    return result


async def _ask(work: WorkDir, agent: AgentTarget, include_hints: bool, repo_dir: str | None,
               resume_task: str | None, on_task_id: Callable[[str], None] | None
               ) -> SolveResult:
    from proctor.a2a.client import resume, solve
    from proctor.a2a.message import build_message

    if resume_task is not None:
        if on_task_id is not None:  # a resumed attempt may be killed too: its log names it
            on_task_id(resume_task)
        return await resume(agent.endpoint, resume_task, timeout_s=agent.timeout_s,
                            auth_header=agent.auth_header)
    instance, item = work.instance(), work.item()
    problem = work.read("prompt.txt")
    message = build_message(instance, instance.problem_statement if problem is None else problem,
                            item.variant_id, include_hints, repo_dir, agent.task_data)
    return await solve(agent.endpoint, message, timeout_s=agent.timeout_s,
                       auth_header=agent.auth_header, streaming=agent.streaming,
                       on_task_id=on_task_id)


def _record(work: WorkDir, result: SolveResult, resume_task: str | None) -> None:
    """patch.diff, the transcript and solve.json (`resumed_task`: the task followed)."""
    write_patch(work, result.patch)
    if result.transcript is not None:
        write_transcript(work, result.transcript)
    record = asdict(result)
    record.pop("patch")
    record.pop("transcript")
    record["usage"] = result.usage.model_dump() if result.usage else None
    if resume_task is not None:
        record["resumed_task"] = resume_task
    write_json(work / "solve.json", record)


def solve_step(work: WorkDir, agent: AgentTarget, include_hints: bool,
               repo_dir: str | None = None, *, resume_task: str | None = None,
               on_task_id: Callable[[str], None] | None = None) -> SolveResult:
    """`solve_item` for a caller without an event loop (`proctor runner solve` in a Job's
    container); the embedded engine awaits `solve_item` on its run's loop."""
    return asyncio.run(solve_item(work, agent, include_hints, repo_dir,
                                  resume_task=resume_task, on_task_id=on_task_id))


TASK_FILES = ("instance.json", "item.json", "prompt.txt")


def init_from_task(work: WorkDir, task_dir: Path) -> None:
    """Start the work folder from the item's task files (a ConfigMap in a pod)."""
    work.root.mkdir(parents=True, exist_ok=True)
    for name in TASK_FILES:
        source = task_dir / name
        if source.exists():
            (work / name).write_bytes(source.read_bytes())
    if not (work / "instance.json").exists() or not (work / "item.json").exists():
        raise FileNotFoundError(f"{task_dir} lacks instance.json or item.json")


def patch_log(patch: str) -> str:
    """The patch as the solve step prints it, for a retry to find in the log."""
    if patch and not patch.endswith("\n"):
        patch += "\n"
    return f"{PATCH_BEGIN}\n{patch}{PATCH_END}\n"


def patch_from_log(log: str) -> str | None:
    """The patch a solve step printed, or None when the log holds none (or a torn one)."""
    start = log.rfind(PATCH_BEGIN + "\n")
    if start < 0:
        return None
    end = log.find(PATCH_END, start)
    return None if end < 0 else log[start + len(PATCH_BEGIN) + 1:end]


def read_solve(work: WorkDir) -> dict[str, Any] | None:
    """solve.json as a dict, or None when no agent was asked."""
    text = work.read("solve.json")
    return json.loads(text) if text else None


def solve_error(record: dict[str, Any] | None) -> str | None:
    """The agent failure recorded by the solve step, if there was one."""
    if record and record.get("error_kind") == ErrorKind.AGENT.value:
        return record.get("error") or "the agent failed"
    return None


def solve_usage(record: dict[str, Any] | None) -> Usage | None:
    return Usage(**record["usage"]) if record and record.get("usage") else None


def solve_confidence(record: dict[str, Any] | None) -> float | None:
    """The agent's confidence in its answer, when it reported one."""
    value = record.get("confidence") if record else None
    return float(value) if isinstance(value, int | float) else None
