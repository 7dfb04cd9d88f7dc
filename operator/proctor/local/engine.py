"""The embedded engine: an Evaluation run on this machine, no cluster.

plan -> for each item (maxConcurrentRows at a time): get the patch, write the
work folder, run the test step in its sandbox (Docker or a process, see
`sandboxes/choose.py`), grade -> results.jsonl,
then summary.json and report.md. The steps are the ones a Kubernetes Job runs
(`proctor runner ...`); only the way they are started differs.

One event loop per run: each item is a task of one task group, rows and the agent's
slots are semaphores, the agent is awaited on the loop, and blocking work (the test
step, a checkout, grading) runs in threads only at the edges. Whatever ends a run early
(Ctrl-C, a full disk, the dead-agent rule) cancels that group (`scope.RunScope`).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from proctor import __version__, datasets
from proctor.a2a.client import AgentProblem, SolveResult, fetch_card
from proctor.core import exits
from proctor.core.exits import (
    BudgetSpent,
    DiskFull,
    Interrupted,
    NotRun,
    is_disk_full,
)
from proctor.core.model import ErrorKind, Instance, Outcome, RunResult, Summary, WorkItem
from proctor.core.patches import check_patch
from proctor.core.plan import Variant
from proctor.core.provenance import AgentCardProvenance, card_provenance
from proctor.core.spec import AgentUnderTest, Evaluation
from proctor.formats import agentbeats
from proctor.formats.predictions import Predictions, load_predictions, patch_for
from proctor.local import provenance
from proctor.local.agent_watch import DEFAULT_WAIT_S, AgentWatch
from proctor.local.budget import BudgetGuard, combined
from proctor.local.progress import progress_for
from proctor.local.resume import Todo, resume_message, resume_plan
from proctor.local.scope import RunScope
from proctor.prepare import (
    Refusal,
    agent_label,
    check_runnable,
    load_selection,
    plan_items,
    prompt_variants,
)
from proctor.results import FOLDER_ADVICE, ResultsFolder, write_outputs
from proctor.runner.grade import ItemClock, grade_step
from proctor.runner.solve import AgentTarget, read_solve, solve_error, solve_item, write_prompt
from proctor.runner.workdir import WorkDir, write_patch, write_task, write_test_step
from proctor.sandboxes.choose import Sandbox, Sandboxes, SandboxOptions, assign
from proctor.variants import write_variants

_LOOPBACK = ("localhost", "127.0.0.1", "::1")
NO_SPACE = "No space left on device"  # how a full disk shows in a test step's error
LOW_DISK_BYTES = 1 << 20


class EngineError(Refusal):
    """The evaluation cannot start on this machine; the message says why and what to do."""

    def __init__(self, message: str):
        super().__init__("NotRunnableHere", message)


class AgentUnreachable(NotRun):
    """The agent did not answer the pre-flight request for its card."""


@dataclass(frozen=True)
class RunContext:
    """What every item of one run shares."""

    evaluation: Evaluation
    instances: dict[str, Instance]
    predictions: Predictions | None = None
    agent: AgentTarget | None = None
    agent_slots: asyncio.Semaphore | None = None
    """The agent's maxConcurrentTasks, across the run (one event loop)."""
    stop: threading.Event = field(default_factory=threading.Event)
    """Set when the run is stopping (Ctrl-C, a full disk): the dead-agent rule's waits end
    at once (the sandboxes' test steps end by their `stop_all`)."""
    watch: AgentWatch | None = None
    """The dead-agent rule (`agent_watch`), when an agent is asked."""
    budget: BudgetGuard | None = None
    """The agent's budget (`budget`), when an agent is asked."""

    @property
    def label(self) -> str:
        """Whom the results belong to: the agent, or the predictions file's model."""
        return self.predictions.model if self.predictions else agent_label(self.evaluation)
    @property
    def participant_id(self) -> str:
        """The participant's id in agentbeats-results.json: the agent's endpoint, or where
        the patches came from (the predictions file's name, gold, empty)."""
        if self.agent:
            return self.agent.endpoint
        path = self.evaluation.spec.predictions.path
        return Path(path).name if self.source == "file" and path else self.source

    sandboxes: Sandboxes | None = None
    """The sandbox that runs each row's tests."""
    variants: Mapping[str, Sequence[Variant]] = field(default_factory=dict)
    """Each task's reworded problem statements, by instance id (promptSensitivity)."""

    def sandbox_of(self, instance: Instance) -> Sandbox:
        """The sandbox of a row: `run_evaluation` chose them all before any row runs."""
        if self.sandboxes is None:
            raise RuntimeError("no sandboxes were chosen before the rows ran")
        return self.sandboxes.of(instance)

    def problem_text(self, item: WorkItem) -> str:
        """The problem text the item asks: the original, or its variant's rewording."""
        for variant in self.variants.get(item.instance_id, ()):
            if variant.variant_id == item.variant_id:
                return variant.text
        return self.instances[item.instance_id].problem_statement

    @property
    def shares_filesystem(self) -> bool:
        """An agent on this machine gets the task's checkout (REPO_DIR)."""
        host = urlparse(self.agent.endpoint).hostname if self.agent else None
        return host is not None and (host in _LOOPBACK or host.startswith("127."))

    @property
    def source(self) -> str:
        return self.evaluation.spec.predictions.source


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


AGENT_TOKEN_ENV = "PROCTOR_AGENT_TOKEN"
"""Where `proctor run` reads the token of an agent whose spec.auth names a Secret (or from
--agent-token-file): on one machine there is no Secret to read."""


def agent_target(evaluation: Evaluation, agents: Sequence[AgentUnderTest],
                 token: str | None = None) -> AgentTarget:
    """The agent the evaluation names, reachable from this machine, or a clear refusal.
    `token`: the value spec.auth's Secret holds on a cluster (unused without spec.auth)."""
    ref = evaluation.spec.agent_ref
    name = ref.name if ref else ""
    found = [a for a in agents if a.name == name]
    if not found:
        raise EngineError(f"Evaluation {evaluation.name!r} evaluates agent {name!r}: pass its "
                          f"AgentUnderTest manifest too (proctor run -f evaluation.yaml "
                          f"-f agent.yaml)")
    spec = found[0].spec
    if not spec.endpoint:
        raise EngineError(f"AgentUnderTest {name!r} runs as a service or sidecar, which needs a "
                          f"cluster; on one machine, start the agent yourself and give its "
                          f"endpoint")
    if spec.auth and not token:
        raise EngineError(f"AgentUnderTest {name!r} sends a token (spec.auth): on one machine "
                          f"set {AGENT_TOKEN_ENV} or pass --agent-token-file FILE")
    budget = combined(evaluation.spec.budget, spec.budget)
    timeout = min(spec.request_timeout_seconds,
                  (budget.item_seconds if budget else None) or spec.request_timeout_seconds)
    header = spec.auth.header_for(token) if spec.auth and token else None
    return AgentTarget(endpoint=spec.endpoint, timeout_s=timeout, auth_header=header,
                       task_data=spec.task_data, max_concurrent_tasks=spec.max_concurrent_tasks)


def agent_budget(evaluation: Evaluation, agents: Sequence[AgentUnderTest]) -> BudgetGuard:
    """The evaluation's and its agent's budget, the smaller of each cap."""
    ref = evaluation.spec.agent_ref
    own = [a.spec.budget for a in agents if ref and a.name == ref.name]
    return BudgetGuard(combined(evaluation.spec.budget, *own))


def prepare(evaluation: Evaluation, agents: Sequence[AgentUnderTest] = (),
            sandbox: SandboxOptions | None = None, selection: datasets.Selection | None = None,
            agent_wait_s: float = DEFAULT_WAIT_S, agent_token: str | None = None
            ) -> tuple[RunContext, datasets.Selection, list[WorkItem]]:
    """Load the rows (unless the caller has them) and plan the items; refuse early what
    cannot run here."""
    spec = evaluation.spec
    check_runnable(evaluation, on_cluster=False)
    agent, slots = None, None
    if spec.predictions.source == "agent":
        agent = agent_target(evaluation, agents, agent_token)
        slots = asyncio.Semaphore(agent.max_concurrent_tasks)
    selection = selection or load_selection(evaluation)
    # The cheap check of the input first: a bad predictions file is told before Docker is
    # asked anything (or a host's orphaned containers removed).
    predictions = (load_predictions(spec.predictions.path, selection.dataset_ids)
                   if spec.predictions.source == "file" and spec.predictions.path else None)
    sandboxes, refused = assign(sandbox or SandboxOptions(), evaluation, selection.instances)
    if refused:
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise EngineError(refused[0] + more)
    variants = prompt_variants(evaluation, selection, progress=_variants_progress)
    items = plan_items(evaluation, selection, variants)
    stop = threading.Event()
    watch = (AgentWatch(agent.endpoint, agent_wait_s, stop, auth_header=agent.auth_header)
             if agent else None)
    budget = agent_budget(evaluation, agents) if agent else None
    ctx = RunContext(evaluation, selection.by_id, predictions, agent, slots, stop=stop,
                     watch=watch, budget=budget, sandboxes=sandboxes, variants=variants)
    return ctx, selection, items


def _variants_progress(done: int, total: int, instance_id: str, what: str) -> None:
    """A line per model call of the llm variants (stored ones are silent)."""
    if what != "stored":
        print(f"variants {done}/{total}: {instance_id} {what}", file=sys.stderr)


async def _card(ctx: RunContext) -> AgentCardProvenance:
    """The agent's card as it answers now (raises AgentProblem when it does not)."""
    assert ctx.agent is not None
    card = await fetch_card(ctx.agent.endpoint, auth_header=ctx.agent.auth_header)
    return card_provenance(card, ctx.agent.endpoint)


async def preflight(ctx: RunContext) -> AgentCardProvenance | None:
    """Before the first item: can the agent be reached at all? If not, nothing runs.
    Its card, as it answered, is the run's record of which agent it was."""
    if ctx.agent is None:
        return None
    try:
        return await _card(ctx)
    except AgentProblem as exc:
        raise AgentUnreachable(f"{exc}; nothing was run (start the agent, or correct "
                               f"its AgentUnderTest's endpoint)") from None


async def card_if_up(ctx: RunContext) -> AgentCardProvenance | None:
    """The agent's card when nothing is left to ask it (a finished run resumed): recorded
    if it answers, and why not if it does not, which stops nothing."""
    if ctx.agent is None:
        return None
    try:
        return await _card(ctx)
    except AgentProblem as exc:
        return AgentCardProvenance(url=ctx.agent.endpoint, error=str(exc))


class NotAnswered(Exception):
    """The item is not stored, as if it had never been sent: its request failed after the
    agent was already declared down, or the budget was spent before it was sent."""


async def _obtain_patch(ctx: RunContext, scope: RunScope, instance: Instance, work: WorkDir,
                        problem_text: str, kept_patch: str | None = None) -> float | None:
    """Write the item's patch into its work folder; the agent's time when one was asked."""
    if ctx.agent is None:
        write_patch(work, patch_for(ctx.source, instance,
                                    ctx.predictions.patches if ctx.predictions else None))
        return None
    if kept_patch is not None:  # obtained by an earlier attempt: the agent is not asked
        write_patch(work, kept_patch)
        return None
    write_prompt(work, problem_text)
    async with contextlib.AsyncExitStack() as stack:
        repo_dir = None
        if ctx.shares_filesystem:
            tmp = Path(await scope.at_edge(tempfile.mkdtemp, "", "proctor-agent-"))
            # removed in a thread too: a checkout can be large
            stack.push_async_callback(scope.at_edge, shutil.rmtree, tmp, True)
            await scope.at_edge(ctx.sandbox_of(instance).checkout, instance, tmp / "repo")
            repo_dir = str(tmp / "repo")
        if ctx.agent_slots:
            await stack.enter_async_context(ctx.agent_slots)
        if ctx.budget and not ctx.budget.may_send():  # past the budget: no new task
            raise NotAnswered(ctx.budget.reason or "the budget is spent")
        if ctx.watch:  # an agent that stopped answering is sent no new task
            await ctx.watch.admitted()
        result = await solve_item(work, ctx.agent, ctx.evaluation.spec.dataset.include_hints,
                                  repo_dir)
        _watch(ctx, result)
        return result.latency_s


def _watch(ctx: RunContext, result: SolveResult) -> None:
    if ctx.watch and not ctx.watch.report(result.transport_failure, result.error or ""):
        raise NotAnswered(result.error or "the agent did not answer")


async def execute_item(ctx: RunContext, scope: RunScope, item: WorkItem, work: WorkDir,
                       kept_patch: str | None = None, attempts: int = 1) -> RunResult:
    """One item from patch to grade, in the row's sandbox: the solve step (`solve_item`,
    or the given patch), the test step (the sandbox's `run_test_step`) and the grade step
    (`grade_step`): the same ones a Kubernetes Job's containers run (`proctor runner
    solve|grade`, and run.sh in the task's image)."""
    started, start = _now(), time.perf_counter()
    instance = ctx.instances[item.instance_id]
    write_task(work, instance, item)
    solve_seconds = await _obtain_patch(ctx, scope, instance, work, ctx.problem_text(item),
                                        kept_patch)
    limit = ctx.evaluation.spec.timeouts.test_seconds
    write_test_step(work, instance, limit, test_without_patch=ctx.source == "empty")
    # When the agent failed there is nothing to test: the item is an agent error.
    agent_failed = solve_error(read_solve(work)) is not None
    run = None if agent_failed else await scope.at_edge(
        ctx.sandbox_of(instance).run_test_step, work, instance, limit)
    clock = ItemClock(started_at=started, start=start, solve_seconds=solve_seconds,
                      test_seconds=run.seconds if run else None)
    return await scope.at_edge(partial(
        grade_step, work, clock, include_hints=ctx.evaluation.spec.dataset.include_hints,
        predictions=ctx.source, attempts=attempts,
        network_isolated=run.network_isolated if run else None))


async def run_items(ctx: RunContext, scope: RunScope, folder: ResultsFolder,
                    items: Sequence[WorkItem | Todo], workers: int, progress: bool,
                    on_result: Callable[[RunResult], None] | None = None,
                    desc: str | None = None) -> None:
    """Run the items, `workers` at a time, appending each result as it finishes.

    Each item is a task of one task group. When the run ends early (`scope.end`: Ctrl-C,
    a full disk, the agent gone) the group is cancelled: in-flight items are stopped at
    once (their test processes killed, their agent requests abandoned) and nothing of
    them is kept, what finished is; then the reason is raised.
    """
    todo = [t if isinstance(t, Todo) else Todo(t) for t in items]
    bar = progress_for(len(todo), progress, desc, sys.stderr)
    rows = asyncio.Semaphore(max(1, workers))

    def record(todo: Todo, result: RunResult | None) -> None:
        if result is None:  # not answered, not stored: it runs again on the next run
            bar.update()
            return
        folder.append(result)
        bar.set_postfix_str(f"{todo.item.instance_id}: {result.outcome.value}")
        bar.update()
        if on_result:
            on_result(result)

    async def one(todo: Todo) -> None:
        ended: BaseException | None = None
        async with rows:
            scope.running += 1
            try:
                result = await _execute_safely(ctx, scope, todo, folder.work_dir(todo.item))
            except (Interrupted, NotRun) as exc:  # the run ends (the item is not its cause)
                ended = exc
            finally:
                scope.running -= 1
        try:
            if ended is None:
                record(todo, result)
        except Exception as exc:  # results.jsonl cannot be written (a full disk)
            ended = exc
        if ended is not None:
            scope.end(ended)

    with bar:
        async with asyncio.TaskGroup() as group:
            for t in todo:
                group.create_task(one(t))


async def _execute_safely(ctx: RunContext, scope: RunScope, todo: Todo,
                          work: WorkDir) -> RunResult | None:
    """An unexpected failure of one item becomes its error result, not the run's end;
    a full disk stops the run instead (it says nothing about the item). None: the item
    is not stored (`NotAnswered`)."""
    item = todo.item
    try:
        result = await execute_item(ctx, scope, item, work, todo.kept_patch, todo.attempts)
    except NotAnswered:
        return None
    except (Interrupted, NotRun):
        raise
    except Exception as exc:
        if is_disk_full(exc):
            raise DiskFull(exits.message_for(exc)) from exc
        result = RunResult(item_id=item.id, instance_id=item.instance_id,
                           variant_id=item.variant_id, repeat=item.repeat,
                           repo=ctx.instances[item.instance_id].repo, predictions=ctx.source,
                           outcome=Outcome.ERROR, error_kind=ErrorKind.SANDBOX,
                           error_message=f"{type(exc).__name__}: {exc}",
                           runner_version=__version__, attempts=todo.attempts)
    if result.error_kind == ErrorKind.SANDBOX and _disk_full_sign(work, result):
        raise DiskFull(f"the disk is full ({item.key}: {(result.error_message or '')[:200]}); "
                       f"finished items are kept: free some space and run again to resume")
    if ctx.budget:  # counted at once, so the next task is not sent past the cap
        ctx.budget.record(result.usage)
    return result


def _disk_full_sign(work: WorkDir, result: RunResult) -> bool:
    """Whether a sandbox error looks like a full disk rather than a broken task: the
    error or the test step's log says so, or the work folder's disk has almost no room
    left (an eval script that could not write its log shows only as a log without
    markers)."""
    said = f"{result.error_message or ''}\n{work.read('run.log') or ''}"
    try:
        room = shutil.disk_usage(work.root).free
    except OSError:
        room = 0
    return NO_SPACE in said or room < LOW_DISK_BYTES


def _kept_patch(ctx: RunContext, work: WorkDir, before: RunResult) -> str | None:
    """The patch an earlier attempt obtained ("" for none), or None when it is gone."""
    if ctx.agent is None or not before.patch.present:
        return ""  # the patch comes from the predictions source again, or there was none
    text = work.read("patch.diff")
    if text is None or check_patch(text).sha256 != before.patch.sha256:
        return None
    return text


def run_evaluation(evaluation: Evaluation, output_dir: Path, progress: bool = True,
                   agents: Sequence[AgentUnderTest] = (), retry_errors: bool = False,
                   sandbox: SandboxOptions | None = None,
                   selection: datasets.Selection | None = None,
                   agent_wait_s: float = DEFAULT_WAIT_S,
                   on_result: Callable[[RunResult], None] | None = None,
                   inputs: Mapping[str, Any] | None = None,
                   advice: str = FOLDER_ADVICE, agent_token: str | None = None) -> Summary:
    """Run (or resume, or extend) an evaluation into `output_dir`; returns its summary.
    `selection`: its rows, when the caller has loaded them already. `agent_wait_s`: how
    long an agent that stopped answering is waited for (`agent_watch`). `on_result` is
    called (on the run's event loop, in this thread) with each item's result as it is
    recorded. `inputs`:
    more of what the folder's results depend on (a predictions file's content, say), so
    that a run with others is refused with `advice`, as one with another spec is.
    `agent_token`: the agent's token when its spec.auth asks for one (never written down)."""
    ctx, selection, items = prepare(evaluation, agents, sandbox, selection, agent_wait_s,
                                    agent_token)
    # hashed now, beside the rows just read: a file changed during the run is not theirs
    dataset = provenance.dataset_provenance(evaluation, selection.fingerprint)
    folder = ResultsFolder(output_dir)
    with folder.locked():
        folder.claim({"evaluation": evaluation.name,
                      "dataset_fingerprint": selection.fingerprint,
                      "spec": evaluation.spec.model_dump(mode="json", by_alias=True),
                      **(inputs or {})}, advice)
        if ctx.variants:
            write_variants(folder.root, selection.instances, ctx.variants)
        previous = {r.item_id: r for r in folder.load()}
        planned = {i.id for i in items}
        if ctx.budget:  # what earlier runs spent counts against the budget too
            for r in previous.values():
                if r.item_id in planned:
                    ctx.budget.record(r.usage)
        plan = resume_plan(items, previous,
                           lambda item, r: _kept_patch(ctx, folder.work_dir(item), r),
                           retry_errors)
        line = resume_message(plan, len(items), asks_agent=ctx.agent is not None)
        if line:
            print(line, file=sys.stderr)

        def outputs(card: AgentCardProvenance | None, stopped_by: str | None = None) -> Summary:
            origin = provenance.gather(evaluation, dataset, ctx.sandboxes,
                                       selection.instances, card)
            summary = write_outputs(folder, evaluation, ctx.instances, len(items),
                                    planned_ids=planned, agent=ctx.label, stopped_by=stopped_by,
                                    provenance=origin)
            agentbeats.write_results(folder.root, summary, evaluation, ctx.participant_id)
            return summary

        async def steps(scope: RunScope) -> Summary:
            card = await (preflight(ctx) if any(t.kept_patch is None for t in plan.todo)
                          else card_if_up(ctx))
            try:
                await run_items(ctx, scope, folder, plan.todo,
                                evaluation.spec.max_concurrent_rows, progress,
                                on_result=on_result, desc=ctx.label)
            except BaseException:
                # Stopped: the (partial) figures of what finished, if the disk lets us.
                with contextlib.suppress(OSError):
                    outputs(card)
                raise
            if ctx.budget and ctx.budget.refused:
                summary = outputs(card, stopped_by=f"budget: {ctx.budget.reason}")
                raise BudgetSpent(f"stopped: {ctx.budget.reason}; {ctx.budget.refused} items "
                                  f"were not sent; {summary.items} finished items are kept "
                                  f"(raise the budget and run again to go on)")
            return outputs(card)

        return asyncio.run(_on_its_loop(ctx, evaluation.spec.max_concurrent_rows, steps))


async def _on_its_loop(ctx: RunContext, workers: int,
                       steps: Callable[[RunScope], Awaitable[Summary]]) -> Summary:
    """The run's steps on its one event loop, in one cancellation scope: what ends the
    run early (`RunScope.end`) is raised once every item has stopped."""
    # Threads at the edges: one per row in flight, and one for the sandboxes' stop_all.
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(max_workers=max(1, workers) + 2, thread_name_prefix="proctor-edge"))
    scope = RunScope(ctx.stop, ctx.sandboxes)
    task = asyncio.current_task()
    assert task is not None
    with scope.owning(task):
        try:
            return await steps(scope)
        except asyncio.CancelledError:
            if scope.why is None:  # cancelled from outside the run
                raise
        await scope.stopped()
        raise scope.why
