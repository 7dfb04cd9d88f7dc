"""The embedded engine: an Evaluation run on this machine, no cluster.

plan -> for each item (maxConcurrentRows at a time): get the patch, write the
work folder, run the test step in the process sandbox, grade -> results.jsonl,
then summary.json and report.md. The steps are the ones a Kubernetes Job runs
(`proctor runner ...`); only the way they are started differs.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

from tqdm import tqdm

from proctor import __version__, dataset
from proctor.model import ErrorKind, Instance, Outcome, RunResult, Summary, Timings, WorkItem
from proctor.plan import Variant
from proctor.predictions import load_predictions, patch_for
from proctor.prepare import Refusal, check_runnable, load_selection, plan_items, prompt_variants
from proctor.results import ResultsFolder, write_outputs
from proctor.runner import sandbox
from proctor.runner.grade import grade_work_dir
from proctor.runner.solve import AgentTarget, read_solve, solve_error, solve_step, write_prompt
from proctor.runner.workdir import WorkDir, write_json, write_patch, write_task, write_test_step
from proctor.spec import AgentUnderTest, Evaluation
from proctor.variants import write_variants

_LOOPBACK = ("localhost", "127.0.0.1", "::1")


class EngineError(Refusal):
    """The evaluation cannot start on this machine; the message says why and what to do."""

    def __init__(self, message: str):
        super().__init__("NotRunnableHere", message)


@dataclass(frozen=True)
class RunContext:
    """What every item of one run shares."""

    evaluation: Evaluation
    instances: dict[str, Instance]
    predictions: dict[str, str] | None = None
    agent: AgentTarget | None = None
    agent_slots: threading.Semaphore | None = None
    """The agent's maxConcurrentTasks, across everything this process runs."""
    variants: Mapping[str, Sequence[Variant]] = field(default_factory=dict)
    """Each task's reworded problem statements, by instance id (promptSensitivity)."""

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
        return bool(host) and (host in _LOOPBACK or host.startswith("127."))

    @property
    def source(self) -> str:
        return self.evaluation.spec.predictions.source


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def agent_target(evaluation: Evaluation, agents: Sequence[AgentUnderTest]) -> AgentTarget:
    """The agent the evaluation names, reachable from this machine, or a clear refusal."""
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
    if spec.auth:
        raise EngineError(f"AgentUnderTest {name!r} reads its credentials from a Kubernetes "
                          f"Secret, which `proctor run` cannot read; use it on a cluster")
    return AgentTarget(endpoint=spec.endpoint, timeout_s=spec.request_timeout_seconds,
                       task_data=spec.task_data)


def prepare(evaluation: Evaluation, agents: Sequence[AgentUnderTest] = ()
            ) -> tuple[RunContext, dataset.Selection, list[WorkItem]]:
    """Load the rows and plan the items; refuse early what cannot run here."""
    spec = evaluation.spec
    check_runnable(evaluation, on_cluster=False)
    agent, slots = None, None
    if spec.predictions.source == "agent":
        agent = agent_target(evaluation, agents)
        limit = next(a.spec.max_concurrent_tasks for a in agents if a.name == spec.agent_ref.name)
        slots = threading.Semaphore(limit)
    selection = load_selection(evaluation)
    refused = [r for r in map(sandbox.needs_image, selection.instances) if r]
    if refused:
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise EngineError(refused[0] + more)
    predictions = (load_predictions(spec.predictions.path)
                   if spec.predictions.source == "file" and spec.predictions.path else None)
    variants = prompt_variants(evaluation, selection)
    items = plan_items(evaluation, selection, variants)
    ctx = RunContext(evaluation, selection.by_id, predictions, agent, slots, variants)
    return ctx, selection, items


def _obtain_patch(ctx: RunContext, instance: Instance, work: WorkDir,
                  problem_text: str) -> float | None:
    """Write the item's patch into its work folder; the agent's time when one was asked."""
    if ctx.agent is None:
        write_patch(work, patch_for(ctx.source, instance, ctx.predictions))
        return None
    write_prompt(work, problem_text)
    with contextlib.ExitStack() as stack:
        repo_dir = None
        if ctx.shares_filesystem:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="proctor-agent-")))
            sandbox.checkout(instance, tmp / "repo")
            repo_dir = str(tmp / "repo")
        if ctx.agent_slots:
            stack.enter_context(ctx.agent_slots)
        return solve_step(work, ctx.agent, ctx.evaluation.spec.dataset.include_hints,
                          repo_dir).latency_s


def execute_item(ctx: RunContext, item: WorkItem, work: WorkDir) -> RunResult:
    """One item from patch to grade, in the process sandbox."""
    started, clock = _now(), time.perf_counter()
    instance = ctx.instances[item.instance_id]
    write_task(work, instance, item)
    solve_seconds = _obtain_patch(ctx, instance, work, ctx.problem_text(item))
    limit = ctx.evaluation.spec.timeouts.test_seconds
    write_test_step(work, instance, limit, test_without_patch=ctx.source == "empty")
    # When the agent failed there is nothing to test: the item is an agent error.
    agent_failed = solve_error(read_solve(work)) is not None
    run = None if agent_failed else sandbox.run_test_step(work, instance, limit)
    graded_at = time.perf_counter()
    result = grade_work_dir(work, include_hints=ctx.evaluation.spec.dataset.include_hints,
                            predictions=ctx.source,
                            network_isolated=run.network_isolated if run else None)
    done = time.perf_counter()
    result.timings = Timings(solve_seconds=solve_seconds,
                             test_seconds=run.seconds if run else None,
                             eval_seconds=result.timings.eval_seconds,
                             grade_seconds=done - graded_at,
                             total_seconds=done - clock, started_at=started, finished_at=_now())
    write_json(work / "result.json", result.model_dump(mode="json"))
    write_json(work / "report.json", result.swebench_report())
    return result


def run_items(ctx: RunContext, folder: ResultsFolder, items: Sequence[WorkItem],
              workers: int, progress: bool,
              on_result: Callable[[RunResult], None] | None = None) -> None:
    """Run the items, `workers` at a time, appending each result as it finishes."""
    bar = tqdm(total=len(items), disable=not progress, unit="item", file=sys.stderr,
               mininterval=0.5, dynamic_ncols=True)
    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        with bar:
            futures = {pool.submit(_execute_safely, ctx, item, folder.work_dir(item)): item
                       for item in items}
            for future in as_completed(futures):
                result = future.result()
                folder.append(result)
                bar.set_postfix_str(f"{futures[future].instance_id}: {result.outcome.value}")
                bar.update()
                if on_result:
                    on_result(result)
    finally:
        # On Ctrl-C, start nothing new; what finished is already on disk.
        pool.shutdown(wait=True, cancel_futures=True)


def _execute_safely(ctx: RunContext, item: WorkItem, work: WorkDir) -> RunResult:
    """An unexpected failure of one item becomes its error result, not the run's end."""
    try:
        return execute_item(ctx, item, work)
    except Exception as exc:
        return RunResult(item_id=item.id, instance_id=item.instance_id,
                         variant_id=item.variant_id, repeat=item.repeat,
                         repo=ctx.instances[item.instance_id].repo, predictions=ctx.source,
                         outcome=Outcome.ERROR, error_kind=ErrorKind.SANDBOX,
                         error_message=f"{type(exc).__name__}: {exc}",
                         runner_version=__version__)


def run_evaluation(evaluation: Evaluation, output_dir: Path, progress: bool = True,
                   agents: Sequence[AgentUnderTest] = ()) -> Summary:
    """Run (or resume) an evaluation into `output_dir`; returns its summary."""
    ctx, selection, items = prepare(evaluation, agents)
    folder = ResultsFolder(output_dir)
    folder.claim({"evaluation": evaluation.name, "dataset_fingerprint": selection.fingerprint,
                  "spec": evaluation.spec.model_dump(mode="json", by_alias=True)})
    if ctx.variants:
        write_variants(folder.root, selection.instances, ctx.variants)
    done = {r.item_id for r in folder.load()}
    todo = [i for i in items if i.id not in done]
    try:
        run_items(ctx, folder, todo, evaluation.spec.max_concurrent_rows, progress)
    finally:
        # Also on Ctrl-C: the figures of what finished are written before leaving.
        summary = write_outputs(folder, evaluation, ctx.instances, len(items))
    return summary
