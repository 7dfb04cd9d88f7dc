"""One reconcile pass of an Evaluation, decided as a pure function of what is observed
(the controller's docstring shows the pass). Nothing here reads the previous status except
a condition's lastTransitionTime.

Per item, level-based:

* a kept result: done (its Job, if still there, is cleaned up);
* its latest attempt succeeded: harvest (read the grade log, keep the result);
* it failed for an infrastructure cause (image pull stuck past the limit, eviction,
  OOM kill, deadline, node lost, the node's disk full) with retries left: retry, reusing
  the patch the failed attempt already got, so the agent is never asked twice (after a
  full disk, on another node);
* it failed otherwise, or retries ran out: keep an `error` result;
* its latest attempt ended with the agent never answering (the transport failed: the agent
  went away) and retries are left: not final. It is asked again in a new attempt once the
  agent's card has answered since that attempt ended (`unanswered`); until then it waits,
  and once AGENT_FAILURES_IN_A_ROW items wait so, no new item starts either (the engine's
  dead-agent rule);
* its Job is suspended (Kueue's queue: not admitted yet): queued; it holds its row. One
  Kueue suspended again after its solve step started (preempted; `preempted`): its next
  attempt, with the patch kept when the solve step ended (`answered`: kept at once, as
  the preemption deletes the pod and its log), so the agent is not asked twice;
* no Job yet: start it, while fewer than maxConcurrentRows items hold a slot, the agent
  has a task slot free (maxConcurrentTasks, over every Evaluation that uses it) and the
  Evaluation is not suspended. An attempt holds its slot until its pod has ended or its
  Job is terminal, whichever comes first (a real Job controller marks a Job Complete about
  a second after its pod ends); an item about to be retried keeps its slot for the retry.

The agent's task slots: an attempt that asks the agent holds one of them from its Job's
creation (its solve step may start once the pull step is done) until its solve step ends
or its pod does (a Job queued in Kueue reserves its slot: `holds_agent_slot`), except
where its Workload carries the agent-slots AdmissionCheck (`kueue`): there a queued
Job holds none, and takes one when the check is marked Ready for it (`grant`), which
Kueue waits for to admit it. The controller passes the slots the agent's other
Evaluations leave free.
A finished item's Jobs are deleted unless the operator keeps finished Jobs for `kubectl
logs` (a ttlSecondsAfterFinished on each: Kubernetes' TTL controller deletes them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal, TypedDict

from proctor import __version__
from proctor.core.images import instance_image
from proctor.core.labels import KUEUE_QUEUE_NAME, LABEL_ATTEMPT, LABEL_ITEM
from proctor.core.model import (
    AGENT_FAILURES_IN_A_ROW,
    ErrorKind,
    Instance,
    Outcome,
    RunResult,
    Timings,
    WorkItem,
)
from proctor.core.spec import Evaluation
from proctor.k8s.children.manifests import job_asks_agent
from proctor.k8s.children.podstatus import (
    DISK_PRESSURE,
    ItemState,
    Phase,
    Step,
    parse_time,
    seconds_since,
)
from proctor.k8s.children.store import result_labels
from proctor.k8s.evaluation.figures import Reliability, status_of
from proctor.k8s.evaluation.status import ItemCounts, results_table, status_reason
from proctor.k8s.features.kueue import PENDING, READY, SlotCheck
from proctor.k8s.machinery.conditions import find_condition, set_condition
from proctor.k8s.machinery.names import selector
from proctor.k8s.machinery.objects import ConfigMap, Job, Obj


class EventNote(TypedDict):
    """An Event the shell posts about an Evaluation (kopf.warn or kopf.info)."""

    type: Literal["Normal", "Warning"]
    reason: str
    """One CamelCase word, as a condition's."""
    message: str


@dataclass(frozen=True)
class Settings:
    """Operator-wide knobs."""

    image_pull_timeout_s: float = 600.0
    """How long a pod may sit in ErrImagePull / ImagePullBackOff before Proctor gives up."""
    pod_grace_s: float = 60.0
    """How long a finished Job's pod may be missing from what was observed (watches of
    Jobs and pods arrive in any order) before its result counts as lost."""
    keep_finished_jobs: bool = False
    """Leave a finished item's Jobs to Kubernetes' TTL controller (they carry a
    ttlSecondsAfterFinished), so that `kubectl logs` of their steps works for a while;
    False: delete them once the result is kept."""


@dataclass(slots=True)
class ItemView:
    """One item as observed: its attempts (Jobs), the latest one's state, its result."""

    item: WorkItem
    jobs: list[Job] = field(default_factory=list)
    state: ItemState | None = None
    result: RunResult | None = None
    asked: bool = False
    """The latest attempt was seen asking the agent (its solve step started): Kueue
    suspending it again is a preemption to act on (`preempted`). Only kept for Jobs in a
    Kueue queue: the controller remembers it by the Job's uid."""
    kept_patch: Obj | None = None
    """The ConfigMap of the patch the agent gave the latest attempt, kept as soon as its
    solve step ended (`answered`): what its next attempt reuses; {} when its solve log was
    read and held none; None while not read."""
    slot_check: SlotCheck | None = None
    """The agent-slots AdmissionCheck on the latest attempt's Workload (`kueue`);
    None: no Workload seen for it (yet)."""
    agent_task: str | None = None
    """The id of the agent's task the latest attempt sent, read from its solve step's log
    while it waits (`awaiting_task`): what its next attempt follows if it is preempted
    before the answer (None: not read yet)."""

    @property
    def latest(self) -> Job | None:
        return self.jobs[-1] if self.jobs else None

    @property
    def attempt(self) -> int:
        return attempt_of(self.latest) if self.latest else -1


@dataclass
class Decision:
    """What the shell should do on this pass."""

    harvest: list[ItemView] = field(default_factory=list)
    """Attempts that succeeded: read the grade log and keep the result."""
    retry: list[ItemView] = field(default_factory=list)
    """Infrastructure failures with retries left: keep the patch, start the next attempt."""
    ask_again: list[ItemView] = field(default_factory=list)
    """Attempts the agent never answered, its card answering since: the next attempt asks
    it again (there is no patch to keep)."""
    awaiting_card: list[ItemView] = field(default_factory=list)
    """Attempts the agent never answered, waiting for its card to answer after they ended."""
    keep_patch: list[ItemView] = field(default_factory=list)
    """Attempts in a Kueue queue whose solve step just ended with the agent's answer: keep
    the patch at once (Kueue may preempt the Job, and its pod's log goes with it)."""
    read_task: list[ItemView] = field(default_factory=list)
    """Attempts in a Kueue queue waiting for the agent: note the id of the task they sent
    (`awaiting_task`), which their next attempt follows if Kueue preempts them."""
    preempted: list[ItemView] = field(default_factory=list)
    """Attempts Kueue suspended again after they asked the agent: delete, and start the
    next attempt with the kept patch (none kept: the answer never arrived, ask again)."""
    grant: list[ItemView] = field(default_factory=list)
    """Queued attempts whose Workload waits for the agent-slots check: mark it Ready (the
    agent has a slot for each), and Kueue admits them."""
    watch_workloads: bool = False
    """A queued attempt's Workload is not seen yet, or waits for the check: another pass
    soon (Kueue reserving quota, or a slot given back on another Evaluation's pass, comes
    with no event of this Evaluation's Jobs or pods)."""
    give_up: list[tuple[ItemView, RunResult]] = field(default_factory=list)
    """Failures to keep as error results."""
    start: list[WorkItem] = field(default_factory=list)
    """First attempts to create now: with the retries, never more than the free slots."""
    stop: list[Job] = field(default_factory=list)
    """Jobs to delete: stuck past their limit (before a retry) or done with."""
    degraded: tuple[str, str] | None = None
    """A reason and message a person should see (pods refused, images not pulled)."""
    agent_tasks: int = 0
    """The agent's task slots this Evaluation holds once the decision is carried out."""


def item_of(job: Job) -> str:
    """The id of the item a Job runs (its label; "" on a Job that is not an item's)."""
    return str((job.get("metadata", {}).get("labels") or {}).get(LABEL_ITEM, ""))


def attempt_of(job: Job) -> int:
    labels = job.get("metadata", {}).get("labels") or {}
    return int(labels.get(LABEL_ATTEMPT, "0"))


def observe(items: Sequence[WorkItem], jobs: Sequence[Job], kept: Mapping[str, RunResult],
            state_of: Callable[[Job], ItemState],
            answers: Mapping[str, Obj | None] | None = None,
            agent_tasks: Mapping[str, str] | None = None,
            checks: Mapping[str, SlotCheck] | None = None) -> list[ItemView]:
    """Each planned item with its Jobs (oldest attempt first), its kept result, and the
    state of its latest Job: ``state_of(job)``, `item_state` of the Job with its own pods
    and events. ``answers``: by Job uid, the queued Jobs seen asking the agent, with the
    ConfigMap of the patch kept from each (None: none yet); see `seen_asking`.
    ``agent_tasks``: by Job uid, the agent's task each sent (`awaiting_task`).
    ``checks``: by Job uid, the agent-slots check on its Workload (`kueue`)."""
    by_item: dict[str, list[Job]] = {}
    for job in sorted(jobs, key=attempt_of):
        by_item.setdefault(item_of(job), []).append(job)
    views = []
    for item in items:
        own, result = by_item.get(item.id, []), kept.get(item.id)
        # A kept result ends the item: its Jobs' state no longer matters (they are deleted).
        state = state_of(own[-1]) if own and result is None else None
        view = ItemView(item, own, state, result)
        uid = (view.latest or {}).get("metadata", {}).get("uid")
        view.slot_check = (checks or {}).get(uid) if uid else None
        if state is not None and uid and answers is not None:
            view.asked = uid in answers or seen_asking(view)
            view.kept_patch = answers.get(uid)
            view.agent_task = (agent_tasks or {}).get(uid)
        views.append(view)
    return views


def in_queue(job: Job) -> bool:
    """Whether Kueue manages the Job (it carries Kueue's queue-name label)."""
    return bool((job.get("metadata", {}).get("labels") or {}).get(KUEUE_QUEUE_NAME))


def _solve(state: ItemState) -> Step | None:
    return next((s for s in state.steps if s.name == "solve"), None)


def seen_asking(view: ItemView) -> bool:
    """Whether the latest attempt is a queued Job that asks the agent, and its solve step
    has started (the controller remembers it: Kueue's preemption deletes the pod)."""
    job, state = view.latest, view.state
    solve = _solve(state) if state is not None else None
    return (job is not None and in_queue(job) and job_asks_agent(job) and solve is not None
            and solve.state in ("running", "terminated"))


def restored_answers(jobs: Sequence[Job], patches: Sequence[ConfigMap]
                     ) -> dict[str, ConfigMap]:
    """What an operator that restarted knows again of the queued Jobs' answers, by Job
    uid: a Job in a queue that asks the agent, of an item with a kept patch, got that patch
    (a retry's attempt reuses a kept patch and asks nothing; an attempt asked again had
    none). A Job preempted mid-solve before the restart cannot be told this way."""
    by_item = {str((p.get("metadata", {}).get("labels") or {}).get(LABEL_ITEM)): p
               for p in patches}
    return {job["metadata"]["uid"]: by_item[item_of(job)] for job in jobs
            if job.get("metadata", {}).get("uid") and in_queue(job) and job_asks_agent(job)
            and item_of(job) in by_item}


def answered(view: ItemView) -> bool:
    """Whether the latest attempt's solve step ended with the agent's answer (exit 0: the
    patch is in its log) and the patch is not kept yet."""
    state = view.state
    solve = _solve(state) if state is not None else None
    return (view.asked and view.kept_patch is None and solve is not None
            and solve.state == "terminated" and solve.exit_code == 0 and bool(state and state.pod))


def awaiting_task(view: ItemView) -> bool:
    """Whether the latest attempt is a queued Job whose solve step waits for the agent and
    the id of the task it sent is not noted yet: its log names it as soon as the agent does
    (`runner.solve.task_id_from_log`). A preemption then loses only the pod: the next
    attempt follows that task rather than sending the item again."""
    state = view.state
    solve = _solve(state) if state is not None else None
    return (view.asked and view.agent_task is None and view.kept_patch is None
            and solve is not None and solve.state == "running" and bool(state and state.pod))


def preempted(view: ItemView) -> bool:
    """Whether Kueue suspended the latest attempt again after it asked the agent. Run
    again as it is, it would ask the agent a second time: the next attempt reuses the
    kept patch instead (one suspended before asking is left to Kueue to run again)."""
    return view.asked and view.state is not None and view.state.phase == Phase.QUEUED


def in_play(items: Sequence[WorkItem], jobs: Sequence[Job], kept: Set[str],
            rows: int) -> list[WorkItem]:
    """The items `decide` can act on or must count, in plan order: those with a Job and
    the next ``rows`` waiting (as many as it may start). On these alone it decides as on
    every item: an item that is done and has no Job, or is further down the line, changes
    nothing. A pass decides on these, and builds every item's view only for the status."""
    with_jobs = {item_of(job) for job in jobs}
    waiting = [item.id for item in items if item.id not in with_jobs and item.id not in kept]
    chosen = with_jobs | set(waiting[:rows])
    return [item for item in items if item.id in chosen]


def _stuck_too_long(state: ItemState, now: datetime, settings: Settings) -> bool:
    """A pull stuck past the limit; one that found the node's disk full at once (waiting
    will not free it: the retry goes to another node)."""
    return state.phase == Phase.PENDING and state.retryable and (
        state.reason == DISK_PRESSURE
        or seconds_since(state.since, now) > settings.image_pull_timeout_s)


def _pod_not_seen_yet(view: ItemView, now: datetime, settings: Settings) -> bool:
    state = view.state
    if state is None or state.pod is not None or state.reason not in ("ResultLost", "PodLost"):
        return False
    status = (view.latest or {}).get("status") or {}
    ended = status.get("completionTime") or next(
        (c.get("lastTransitionTime") for c in status.get("conditions") or []
         if c.get("type") in ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget")),
        None)
    return ended is not None and seconds_since(ended, now) < settings.pod_grace_s


def holds_agent_slot(view: ItemView, checked: bool = False) -> bool:
    """Whether the item's latest attempt holds one of the agent's task slots: it asks the
    agent, its pod has not ended, and its solve step has not ended.

    A Job queued in Kueue (suspended) holds one too. Kueue admits by its quota alone and
    knows nothing of the agent's maxConcurrentTasks, and an admitted Job cannot be taken
    back: were queued Jobs not to count, Kueue could admit more Jobs than the agent has
    slots, and all of them would ask it at once. So a slot is reserved when the Job is
    created and taken (the agent asked) once Kueue admits it; the created Jobs that ask
    the agent, queued or admitted, never outnumber its slots.

    Unless the queue has the agent-slots AdmissionCheck (``checked``: seen on a Workload
    of the Evaluation; `kueue`): Kueue then admits a Job only once the operator marks
    its check Ready, so a queued Job holds a slot only from then."""
    state = view.state
    if state is None or view.latest is None or state.phase not in (
            Phase.QUEUED, Phase.PENDING, Phase.RUNNING):
        return False
    check = view.slot_check
    if state.phase == Phase.QUEUED and (checked or (check is not None and check.state)):
        # Its queue has the agent-slots check: the slot is taken at admission (`_grant`).
        return check is not None and check.state == READY and job_asks_agent(view.latest)
    solve = _solve(state)
    return job_asks_agent(view.latest) and not (
        solve and solve.state == "terminated" and state.phase != Phase.QUEUED)


def unanswered(view: ItemView) -> bool:
    """Whether the item's latest attempt ended without the agent ever answering (its grade
    step's compact result says so): an agent that went away, not an answer to grade."""
    state = view.state
    return (view.result is None and state is not None and state.phase == Phase.SUCCEEDED
            and bool((state.result or {}).get("unanswered")))


def ended_at(view: ItemView) -> datetime | None:
    """When the item's latest attempt's last step finished (None: no step says)."""
    ends = [parse_time(s.finished_at) for s in (view.state.steps if view.state else ())
            if s.finished_at]
    return max(ends, default=None)


def answered_since(view: ItemView, card_at: datetime | None) -> bool:
    """Whether the agent's card answered after the item's latest attempt ended."""
    end = ended_at(view)
    return card_at is not None and (end is None or card_at > end)


def preferred_nodes(evaluation: Evaluation, instances: Mapping[str, Instance],
                    views: Sequence[ItemView], pulled: Mapping[str, str]) -> dict[str, str]:
    """The node each task's next pod prefers, by instance id: the one that ran the task
    before (its image is there), else the one its image was pre-pulled on (``pulled``, by
    image); none after an attempt that met a full disk there (`DISK_PRESSURE`): its retry
    goes elsewhere."""
    registry = evaluation.spec.runner.instance_image_registry
    nodes = {iid: pulled[image] for iid, instance in instances.items()
             if (image := instance_image(instance, registry)) in pulled}
    ran = [(v.item.instance_id, v.state) for v in views if v.state and v.state.node]
    nodes |= {iid: state.node for iid, state in ran if state.node}
    for iid, state in ran:  # after the others: a repeat of the task may have run there
        if state.reason == DISK_PRESSURE and nodes.get(iid) == state.node:
            del nodes[iid]
    return nodes


def decide(evaluation: Evaluation, views: Sequence[ItemView], now: datetime,
           settings: Settings = Settings(), agent_slots: int | None = None,
           agent_ready: bool = True, card_at: datetime | None = None) -> Decision:
    """This pass's actions, from the observed items. The slots: an attempt whose pod runs
    (or is pending) holds one; one whose pod ended, or whose Job is terminal, holds none,
    unless it is retried (its retry takes the slot). New items get the slots left, and no
    more than the agent's task slots left: ``agent_slots`` is what its other Evaluations
    leave of maxConcurrentTasks (None: no agent is asked). While the agent is not ready
    (``agent_ready`` False: its card cannot be fetched) no new item starts, rather than
    each ending as an agent error; those in flight go on, and are kept as they end.
    ``card_at``: when the agent's card last answered (None: not since the operator
    started); an attempt the agent never answered is asked again only once it has answered
    since (`unanswered`)."""
    spec = evaluation.spec
    decision = Decision()
    held = 0
    # The agent-slots check seen on a Workload of this Evaluation: its queue gates every
    # Job's admission on a slot (one whose Workload is not seen yet will carry it too).
    checked = any(v.slot_check is not None and v.slot_check.state for v in views)
    decision.agent_tasks = sum(holds_agent_slot(v, checked) for v in views if v.result is None)
    for view in views:
        state = view.state
        if view.result is not None:
            if not settings.keep_finished_jobs:
                decision.stop.extend(view.jobs)  # done: its Jobs (and their pods) go
        elif state is None:
            continue
        elif preempted(view):
            decision.preempted.append(view)
            held += 1  # its next attempt takes its row
        elif _pod_not_seen_yet(view, now, settings):
            held += 1  # the Job's news came before its pod's: wait for the pod
        elif unanswered(view) and view.attempt < spec.runner.infra_retries:
            if agent_ready and answered_since(view, card_at):
                decision.ask_again.append(view)  # in the free slots, below
            else:  # the agent went away: ask it again once it is back
                decision.awaiting_card.append(view)
        elif state.phase == Phase.SUCCEEDED:
            decision.harvest.append(view)
        elif state.phase == Phase.FAILED or _stuck_too_long(state, now, settings):
            if state.phase != Phase.FAILED and view.latest is not None:
                decision.stop.append(view.latest)
            if state.retryable and view.attempt < spec.runner.infra_retries:
                decision.retry.append(view)
                held += 1
            else:
                decision.give_up.append((view, failure_result(evaluation, view)))
        else:
            held += 1  # queued Jobs too: maxConcurrentRows caps what Proctor creates
            if answered(view):
                decision.keep_patch.append(view)
            elif awaiting_task(view):
                decision.read_task.append(view)
            if state.reason == "FailedCreate" or state.retryable:  # refused, or not pulled
                message = f"{view.item.key}: {state.reason}: {state.message}"
                decision.degraded = (state.reason, message[:1000])
    gone = len(decision.awaiting_card) >= AGENT_FAILURES_IN_A_ROW
    if not spec.suspend and agent_ready and not gone:
        free = max(0, spec.max_concurrent_rows - held)
        _grant(views, decision, agent_slots)
        # Without the check, a new Job takes its slot at creation, not at admission.
        bounded = agent_slots is not None and not checked
        if agent_slots is not None and bounded:
            free = min(free, max(0, agent_slots - decision.agent_tasks))
        # Those asked again first: they were started before any item still waiting.
        decision.ask_again = decision.ask_again[:free]
        fresh = [v.item for v in views if not v.jobs and v.result is None]
        decision.start = fresh[:free - len(decision.ask_again)]
        if bounded:
            decision.agent_tasks += len(decision.ask_again) + len(decision.start)
    else:
        decision.ask_again = []
    return decision


def _grant(views: Sequence[ItemView], decision: Decision, agent_slots: int | None) -> None:
    """The queued attempts whose Workload waits for the agent-slots check, in plan order,
    that the agent's free slots let Kueue admit now; one that asks nothing (it reuses a
    kept patch) needs no slot. They hold their slots from now (`decision.agent_tasks`).
    A preempted attempt is replaced, not admitted again."""
    replaced = {id(v) for v in decision.preempted}
    queued = [v for v in views if v.result is None and v.latest is not None
              and v.state is not None and v.state.phase == Phase.QUEUED
              and id(v) not in replaced]
    decision.watch_workloads = any(v.slot_check is None or v.slot_check.state == PENDING
                                   for v in queued)
    for view in queued:
        if view.slot_check is None or not view.slot_check.waiting or view.latest is None:
            continue
        asks = agent_slots is not None and job_asks_agent(view.latest)
        if asks and decision.agent_tasks >= (agent_slots or 0):
            continue
        decision.grant.append(view)
        decision.agent_tasks += int(asks)


def _new_result(evaluation: Evaluation, view: ItemView, **fields: Any) -> RunResult:
    item = view.item
    return RunResult(item_id=item.id, instance_id=item.instance_id, variant_id=item.variant_id,
                     repeat=item.repeat, runner_version=__version__,
                     **_of_attempts(evaluation, view), **fields)


def _of_attempts(evaluation: Evaluation, view: ItemView) -> dict[str, Any]:
    """What a kept result says that the operator knows and the pod does not."""
    assert view.state is not None
    return {"include_hints": evaluation.spec.dataset.include_hints,
            "predictions": evaluation.spec.predictions.source, "attempts": view.attempt + 1,
            "images": dict(view.state.images)}


def failure_result(evaluation: Evaluation, view: ItemView) -> RunResult:
    """The error result of an item whose last attempt failed and will not be retried."""
    state = view.state
    assert state is not None
    tries = view.attempt + 1
    message = f"{state.reason}: {state.message}".strip(": ")
    if state.retryable:
        message += f" (after {tries} attempt{'s' if tries > 1 else ''})"
    return _new_result(evaluation, view, outcome=Outcome.ERROR, error_message=message[:2000],
                       error_kind=state.error_kind or ErrorKind.INFRA)


def harvested_result(evaluation: Evaluation, view: ItemView, full: dict[str, Any] | None
                     ) -> RunResult:
    """The kept result of a succeeded attempt: the grade log's, else the compact one."""
    state = view.state
    assert state is not None
    if full is not None:
        result = RunResult.model_validate({**full, **_of_attempts(evaluation, view)})
        result.timings = step_timings(state, result.timings.eval_seconds)
        return result
    compact = state.result or {}
    lost = "the full result was lost; kept the pod's compact result"
    return _new_result(evaluation, view, outcome=Outcome(compact.get("outcome", "error")),
                       error_kind=compact.get("error_kind"),
                       error_message=compact.get("message") or lost)


def step_timings(state: ItemState, eval_seconds: float | None) -> Timings:
    """Where an attempt's time went, from its pod's step start and finish times."""
    spans = {s.name: (s.started_at, s.finished_at) for s in state.steps
             if s.started_at and s.finished_at}

    def bounds(*names: str) -> tuple[str | None, str | None]:
        found = [spans[n] for n in names if n in spans]
        return (min((s for s, _ in found), default=None, key=parse_time),
                max((f for _, f in found), default=None, key=parse_time))

    def length(*names: str) -> float | None:
        start, end = bounds(*names)
        return (parse_time(end) - parse_time(start)).total_seconds() if start and end else None

    started_at, finished_at = bounds(*spans)
    return Timings(solve_seconds=length("solve"), test_seconds=length("test"),
                   grade_seconds=length("grade"), eval_seconds=eval_seconds,
                   total_seconds=length(*spans), started_at=started_at, finished_at=finished_at)


def counts(views: Sequence[ItemView]) -> ItemCounts:
    """Items by where they stand."""
    # An attempt the agent never answered waits to be asked again.
    tally = Counter("done" if v.result is not None
                    else "waiting" if v.state is None or unanswered(v)
                    else "running" if v.state.phase == Phase.RUNNING
                    else "queued" if v.state.phase == Phase.QUEUED else "pending"
                    for v in views)
    # Kept results remember their attempts; their Jobs may be gone.
    retries = sum(max(0, v.result.attempts - 1 if v.result else v.attempt) for v in views)
    return ItemCounts(total=len(views), retries=retries, **tally)


def why_pending(views: Sequence[ItemView]) -> str:
    """Why items wait, for the Running condition: their reasons, most common first, and the
    first message said (a scheduler's \"0/3 nodes are available: ...\", say), so that an item
    no node can take is seen in `kubectl describe`, not only counted."""
    waiting = [v.state for v in views
               if v.result is None and v.state is not None and v.state.phase == Phase.PENDING]
    reasons = Counter(state.reason for state in waiting).most_common(3)
    if not reasons:
        return ""
    said = next((f": {state.message.strip()[:300]}" for state in waiting
                 if state.reason == reasons[0][0] and state.message.strip()), "")
    return f" ({', '.join(f'{n} {reason}' for reason, n in reasons)}{said})"


def conditions_for(old: Sequence[Obj], views: Sequence[ItemView], decision: Decision,
                   now: str, generation: int | None, suspended: bool = False, *,
                   agent_waiting: tuple[str, str] | None = None,
                   store: StoreState | None = None) -> list[dict[str, Any]]:
    """Ready, Running (reason Suspended while suspended), Succeeded, Degraded from this
    pass. ``agent_waiting``: the reason and message of Ready=False while the agent is not
    ready (AgentNotReady: no item starts until it is); else AgentNotAnswering while items
    the agent never answered wait for its card. ``store``: with an object store,
    StoreUnavailable too (`store_condition`)."""
    tally = counts(views)
    finished = tally.done == tally.total
    if agent_waiting is None and decision.awaiting_card:
        agent_waiting = ("AgentNotAnswering", f"{len(decision.awaiting_card)} items got no "
                         f"answer from the agent (it went away?); they are asked again once "
                         f"its card answers")
    in_flight = tally.running + tally.pending
    running = ("Suspended" if suspended else "ItemsInFlight" if in_flight
               else "ItemsQueued" if tally.queued else "Idle")
    suffix = "; suspended: no item starts" if suspended else ""
    if agent_waiting is not None and not finished:
        suffix += "; waiting for the agent to be ready"
    degraded = decision.degraded or ("AsExpected", "")
    ready = ((False, *agent_waiting) if agent_waiting is not None and not finished
             else (True, "Valid", "the spec, agent and dataset are usable"))
    conditions = [dict(c) for c in old]
    for change in (
            ("Ready", *ready),
            ("Running", in_flight > 0, running,
             f"{tally.running} running, {tally.pending} pending{why_pending(views)}"
             f"{f', {tally.queued} queued in Kueue' if tally.queued else ''}{suffix}"),
            ("Succeeded", finished, "AllItemsDone" if finished else "InProgress",
             f"{tally.done} of {tally.total} items done"),
            ("Degraded", decision.degraded is not None, *degraded)):
        conditions = set_condition(conditions, *change, now=now, observed_generation=generation)
    if store is not None:
        previous = find_condition(conditions, "StoreUnavailable")
        conditions = set_condition(conditions, *store_condition(store, previous), now=now,
                                   observed_generation=generation)
    return conditions


@dataclass(frozen=True)
class StoreState:
    """An Evaluation's object store as the operator knows it: its last upload, and the
    results the API holds in full because an upload failed."""

    url: str
    """Where its artefacts go (s3://bucket/prefix/namespace/evaluation)."""
    error: str | None = None
    """Why the last upload failed; None when it succeeded, or none was tried yet."""
    tried: bool = False
    """Whether this process has tried an upload (False after a restart, until one)."""
    backlog: int = 0
    """Results kept in full because their upload failed (labelled so in the API; moved
    to the store once it answers: `store_backlog`)."""


def store_condition(store: StoreState, previous: Mapping[str, Any] | None = None
                    ) -> tuple[str, bool, str, str]:
    """StoreUnavailable: True, reason UploadFailed, naming the error, while the last upload
    failed (that item's full result was kept in a ConfigMap instead: nothing is lost).
    Before this process has tried one (a restart), the API decides: a backlog says the
    store was down, and nothing has answered since, so the condition stays True (with the
    ``previous`` condition's message, which names the error, if it was True). False,
    reason Recovering, while an upload succeeds and the backlog moves to the store; False,
    reason Available, once none is left."""
    n = store.backlog
    kept = f"{n} items are kept in ConfigMaps until the store answers"
    if store.error is not None:
        return ("StoreUnavailable", True, "UploadFailed", f"{store.error}; {kept}")
    if n and not store.tried:
        was = previous is not None and previous.get("status") == "True"
        said = str(previous.get("message")) if previous is not None and was else \
            f"an upload failed before the operator restarted; {kept}"
        return ("StoreUnavailable", True, "UploadFailed", said)
    if n:
        return ("StoreUnavailable", False, "Recovering",
                f"the store answers: moving {n} items kept in ConfigMaps to {store.url}")
    return ("StoreUnavailable", False, "Available", f"artefacts go to {store.url}")


def invalid_conditions(old: Sequence[Obj], reason: str, message: str, now: str,
                       generation: int | None) -> list[dict[str, Any]]:
    """The conditions of an Evaluation that cannot run: not Ready, Degraded with the why."""
    conditions = set_condition(old, "Ready", False, reason, message, now=now,
                               observed_generation=generation)
    return set_condition(conditions, "Degraded", True, reason, message, now=now,
                         observed_generation=generation)


def _times(views: Sequence[ItemView], results: Sequence[RunResult]) -> tuple[str | None, ...]:
    """When the first attempt started and, once all are done, when the last finished."""
    starts = [j["metadata"]["creationTimestamp"] for v in views for j in v.jobs
              if j.get("metadata", {}).get("creationTimestamp")]
    starts += [started for r in results if (started := r.timings.started_at)]
    ends = [r.timings.finished_at for r in results if r.timings.finished_at]
    done = bool(views) and all(v.result is not None for v in views)
    start = min(starts, key=parse_time) if starts else None
    return start, (max(ends, key=parse_time) if done and ends else None)


def build_status(evaluation: Evaluation, agent_label: str, views: Sequence[ItemView],
                 results: Sequence[RunResult], conditions: Sequence[Obj], *,
                 generation: int | None, fingerprint: str,
                 reliability: Reliability | None = None,
                 variants_failed: int | None = None) -> dict[str, Any]:
    """The whole status of this pass, rebuilt from what was observed: ``agent_label`` is
    what ``kubectl get`` shows as the agent, ``results`` the kept result of each finished
    item, ``conditions`` already set (`conditions_for`), ``reliability`` the figures of
    those results (`figures.reliability`, computed by the caller only when they change),
    ``variants_failed`` how many tasks got no prompt variants (None: promptSensitivity off)."""
    tally, table, (start, end) = counts(views), results_table(results), _times(views, results)
    status: dict[str, Any] = {
        "agent": agent_label,
        "progress": f"{tally.done}/{tally.total}",
        # The resolved share for `kubectl get`: 41.2%, or - before any original-prompt result.
        "resolvedPercent": f"{table['resolvedPct'] * 100:.1f}%" if table["totalInstances"]
        else "-",
        "items": asdict(tally),
        "outcomes": dict(sorted(Counter(r.outcome.value for r in results).items())),
        "errorKinds": dict(sorted(Counter(r.error_kind.value for r in results
                                          if r.error_kind).items())),
        "tampered": sum(r.tampered for r in results),
        "results": table,
        "conditions": [dict(c) for c in conditions],
        "reason": status_reason(conditions),
        "resultsRef": {"kind": "ConfigMap",
                       "labelSelector": selector(result_labels(evaluation))},
    }
    optional = {"observedGeneration": generation, "datasetFingerprint": fingerprint,
                "startTime": start, "completionTime": end,
                "reliability": status_of(reliability) if reliability is not None
                else None, "variantsFailed": variants_failed}
    return status | {key: value for key, value in optional.items() if value not in (None, "")}


def status_events(old_conditions: Sequence[Obj], status: Obj) -> list[EventNote]:
    """The Events a new status calls for, each once, when its condition turns True:
    Degraded (a Warning, the condition's reason and message in its message) and Succeeded
    (Normal: how many items, and the resolved share)."""
    events: list[EventNote] = []
    degraded = find_condition(status["conditions"], "Degraded") or {}
    if degraded.get("status") == "True" and (find_condition(
            old_conditions, "Degraded") or {}).get("status") != "True":
        events.append({"type": "Warning", "reason": "Degraded",
                       "message": f"{degraded['reason']}: {degraded['message']}"})
    done = find_condition(status["conditions"], "Succeeded") or {}
    if done.get("status") == "True" and (find_condition(
            old_conditions, "Succeeded") or {}).get("status") != "True":
        events.append({"type": "Normal", "reason": "Succeeded",
                       "message": f"{done['message']}; resolved {status.get('resolvedPercent')}"})
    return events
