"""proctor.k8s.handoff: a Job's slot goes to the next item once, and only once."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from conftest import SHARED_DATA
from proctor.k8s.handoff import Handoff
from proctor.k8s.podstatus import ItemState, Phase
from proctor.model import WorkItem

K8S = SHARED_DATA / "k8s-status"
COMPLETE = yaml.safe_load((K8S / "job-complete-successcriteriamet_k8s131plus.yaml").read_text())
FAILED = yaml.safe_load(
    (K8S / "job-failed-backofflimitexceeded-failuretarget_k8s131plus.yaml").read_text())
SUCCEEDED = ItemState(phase=Phase.SUCCEEDED, reason="Completed", finished=True)
FAILED_STATE = ItemState(phase=Phase.FAILED, reason="OOMKilled", retryable=True,
                         finished=True)
VERSION = ("uid-1", 1)


def items(*ids: str) -> list[WorkItem]:
    """Items whose ids are their letter, sixteen times (a hex id as the plan's are)."""
    return [WorkItem(id=i * 16, instance_id=f"task-{i}") for i in ids]


def ids(line: Any) -> list[str]:
    return [item.id[0] for item in line]


def named(job: dict[str, Any], name: str, **meta: Any) -> dict[str, Any]:
    renamed = copy.deepcopy(job)
    renamed["metadata"].update(name=name, **meta)
    return renamed


def running(name: str) -> dict[str, Any]:
    job = named(COMPLETE, name)
    job["status"] = {"active": 1, "startTime": COMPLETE["status"]["startTime"]}
    return job


def handoff(line: list[WorkItem], counted: list[dict[str, Any]] = ()) -> tuple[Handoff, list]:
    started: list[WorkItem] = []

    def start(item: WorkItem) -> str:
        started.append(item)
        return f"job-{item.id[0]}"
    h = Handoff()
    h.renew(VERSION, line, counted, start)
    return h, started


def test_a_job_that_succeeded_gives_its_slot_to_the_first_item_in_line_once() -> None:
    h, _ = handoff(items("a", "b"), [running("job-1")])
    done = named(COMPLETE, "job-1")
    assert h.take(done, SUCCEEDED, VERSION, busy=set()).id == "a" * 16
    # The same Job seen again (another event, or the pass after it) gives nothing more.
    assert h.take(done, SUCCEEDED, VERSION, busy=set()) is None
    assert ids(h.line) == ["b"]


def test_a_job_a_pass_saw_finished_is_the_passs_to_give() -> None:
    done = named(COMPLETE, "job-1")
    h, _ = handoff(items("a"), [done])
    assert h.take(done, SUCCEEDED, VERSION, busy=set()) is None
    assert ids(h.line) == ["a"]


def test_a_failed_job_keeps_its_slot_for_its_retry() -> None:
    h, _ = handoff(items("a"), [running("job-1")])
    assert h.take(named(FAILED, "job-1"), FAILED_STATE, VERSION, busy=set()) is None
    # A Complete Job whose pod says otherwise (its result lost) does not either.
    lost = ItemState(phase=Phase.FAILED, reason="ResultLost", retryable=True, finished=True)
    assert h.take(named(COMPLETE, "job-1"), lost, VERSION, busy=set()) is None
    assert ids(h.line) == ["a"]


def test_a_running_or_deleted_job_frees_nothing() -> None:
    h, _ = handoff(items("a"))
    assert h.take(running("job-1"), SUCCEEDED, VERSION, busy=set()) is None
    deleting = named(COMPLETE, "job-2", deletionTimestamp="2026-01-01T00:00:00Z")
    assert h.take(deleting, SUCCEEDED, VERSION, busy=set()) is None
    assert ids(h.line) == ["a"]


def test_a_changed_evaluation_hands_nothing_until_a_pass_draws_up_a_new_line() -> None:
    h, _ = handoff(items("a"), [running("job-1")])
    assert h.take(named(COMPLETE, "job-1"), SUCCEEDED, ("uid-1", 2), busy=set()) is None
    assert h.take(named(COMPLETE, "job-1"), SUCCEEDED, ("uid-2", 1), busy=set()) is None
    assert h.free(named(COMPLETE, "job-1"), ("uid-1", 2), busy=set()) is None
    h.renew(("uid-1", 2), items("c"), [running("job-1")], h.start)
    assert h.take(named(COMPLETE, "job-1"), SUCCEEDED, ("uid-1", 2), busy=set()).id == "c" * 16


def test_busy_items_are_skipped_and_an_empty_line_gives_nothing() -> None:
    h, _ = handoff(items("a", "b"), [running("job-1"), running("job-2")])
    assert h.take(named(COMPLETE, "job-1"), SUCCEEDED, VERSION, busy={"a" * 16}).id == "b" * 16
    assert h.take(named(COMPLETE, "job-2"), SUCCEEDED, VERSION, busy=set()) is None
    assert h.holding == set()  # both slots given (the second to no one): no pass counts them


def test_a_job_no_pass_counted_is_the_next_passs_to_count() -> None:
    # Created by a retry since the pass, or seen by no pass yet after a restart.
    h, _ = handoff(items("a"), [running("job-1")])
    assert h.take(named(COMPLETE, "job-9"), SUCCEEDED, VERSION, busy=set()) is None
    assert h.free(named(COMPLETE, "job-9"), VERSION, busy=set()) is None
    assert ids(h.line) == ["a"]


def test_a_job_started_in_a_handed_slot_hands_it_on_again_before_any_pass() -> None:
    h, started = handoff(items("a", "b"), [running("job-1")])
    item = h.take(named(COMPLETE, "job-1"), SUCCEEDED, VERSION, busy=set())
    assert item.id == "a" * 16
    h.started(h.start(item))  # as the operator does: the Job it started is "job-a"
    assert started == [item]
    assert h.take(named(COMPLETE, "job-a"), SUCCEEDED, VERSION, busy=set()).id == "b" * 16


def test_a_job_deleted_with_its_result_kept_frees_its_slot_once() -> None:
    # Its pod ended well and its result is kept: deleted before the Job controller marked it
    # Complete, it holds no slot any more.
    h, _ = handoff(items("a", "b"), [running("job-1")])
    assert h.free(running("job-1"), VERSION, busy=set()).id == "a" * 16
    assert h.free(running("job-1"), VERSION, busy=set()) is None
    # Its Complete, if the watch shows it after all, gives nothing more either.
    assert h.take(named(COMPLETE, "job-1"), SUCCEEDED, VERSION, busy=set()) is None
    assert ids(h.line) == ["b"]


def test_a_job_a_hand_off_freed_is_not_freed_again_when_deleted() -> None:
    h, _ = handoff(items("a", "b"), [running("job-1")])
    assert h.take(named(COMPLETE, "job-1"), SUCCEEDED, VERSION, busy=set()).id == "a" * 16
    assert h.free(named(COMPLETE, "job-1"), VERSION, busy=set()) is None
    assert ids(h.line) == ["b"]


def test_a_deleted_job_is_forgotten_and_each_pass_counts_afresh() -> None:
    done = named(COMPLETE, "job-1")
    h, _ = handoff(items("a"), [done, running("job-2"), running("job-3")])
    assert h.holding == {"job-2", "job-3"}
    h.gone(running("job-3"))  # deleted by someone else: the next pass counts its slot
    assert h.holding == {"job-2"}
    assert h.free(running("job-3"), VERSION, busy=set()) is None
    start = h.start
    h.renew(VERSION, items("b"), [named(COMPLETE, "job-2")], start)
    assert h.holding == set()
    assert h.start is start
