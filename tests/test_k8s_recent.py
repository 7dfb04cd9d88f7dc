"""proctor.k8s.recent: what the operator wrote until its watches show it."""

from __future__ import annotations

from typing import Any

from proctor.k8s.recent import FORGET_AFTER_S, Recent
from proctor.model import Outcome, RunResult


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def job(name: str, item: str = "item") -> dict[str, Any]:
    return {"kind": "Job", "metadata": {"name": name, "labels": {"item": item}}}


def result(item_id: str, outcome: Outcome = Outcome.RESOLVED) -> RunResult:
    return RunResult(item_id=item_id, instance_id=f"task-{item_id}", outcome=outcome)


def finished(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}


def names(jobs: list[dict[str, Any]]) -> list[str]:
    return [j["metadata"]["name"] for j in jobs]


def recent() -> tuple[Recent, FakeClock]:
    clock = FakeClock()
    return Recent(clock=clock), clock


# --- Jobs -----------------------------------------------------------------------------------


def test_nothing_written_adds_nothing() -> None:
    memo, _ = recent()
    observed = [job("a-0")]
    assert memo.with_jobs(observed) == observed
    assert memo.with_jobs([]) == []
    assert memo.with_results([]) == []


def test_a_created_job_is_added_until_the_watch_shows_it() -> None:
    memo, clock = recent()
    created = job("b-0", "b")
    memo.created(created)
    assert memo.with_jobs([job("a-0")]) == [job("a-0"), created]
    clock.now += 1
    assert names(memo.with_jobs([])) == ["b-0"]  # still not observed: still there
    # The watch shows it (as the server wrote it, with more fields): once, never twice.
    observed = {**job("b-0", "b"), "status": {"active": 1}}
    assert memo.with_jobs([job("a-0"), observed]) == [job("a-0"), observed]
    assert "b-0" not in memo.jobs
    # And once observed it is forgotten: a later pass that no longer sees it (deleted by
    # someone else) does not get it back.
    assert memo.with_jobs([]) == []


def test_several_created_jobs_are_each_dropped_when_seen() -> None:
    memo, _ = recent()
    for name in ("a-0", "b-0", "c-0"):
        memo.created(job(name))
    assert names(memo.with_jobs([job("b-0")])) == ["b-0", "a-0", "c-0"]
    assert names(memo.with_jobs([job("a-0")])) == ["a-0", "c-0"]
    assert names(memo.with_jobs([])) == ["c-0"]


def test_a_job_created_then_deleted_before_being_observed_is_gone() -> None:
    memo, _ = recent()
    created = job("a-0")
    memo.created(created)
    memo.created(job("b-0"))
    assert not memo.was_deleted(created)
    memo.delete(created)
    assert memo.was_deleted(created)
    assert memo.was_deleted(job("a-0"))  # by name, not by identity
    assert not memo.was_deleted(job("b-0"))
    assert names(memo.with_jobs([])) == ["b-0"]
    assert "a-0" not in memo.jobs


def test_a_job_recorded_as_created_after_its_deletion_stays_out() -> None:
    # The creation's bookkeeping may come after a deletion of the same Job (each attempt
    # of an item has a Job name of its own, so the name means this very Job).
    memo, _ = recent()
    memo.delete(job("a-0"))
    memo.created(job("a-0"))
    assert memo.with_jobs([]) == []
    assert memo.was_deleted(job("a-0"))


def test_a_deleted_job_that_was_observed_is_remembered_as_deleted() -> None:
    memo, clock = recent()
    observed = job("a-0")
    memo.delete(observed)
    clock.now += FORGET_AFTER_S / 2
    # An unfinished Job passes through until the watch shows it gone (its pod may run).
    assert memo.with_jobs([observed]) == [observed]
    assert memo.was_deleted(observed)


def test_a_finished_job_this_process_deleted_is_left_out_at_once() -> None:
    memo, clock = recent()
    done = finished(job("a-0"))
    memo.delete(done)
    assert memo.with_jobs([done, job("b-0")]) == [job("b-0")]
    clock.now += FORGET_AFTER_S + 1  # long gone from the watch, or the watch is broken
    assert memo.with_jobs([done]) == [done]


def test_uncreated_removes_a_job_whose_creation_failed() -> None:
    memo, _ = recent()
    memo.created(job("a-0"))
    memo.created(job("b-0"))
    memo.uncreated(job("a-0"))
    assert names(memo.with_jobs([])) == ["b-0"]
    assert not memo.was_deleted(job("a-0"))
    memo.uncreated(job("never-created"))  # harmless
    assert names(memo.with_jobs([])) == ["b-0"]


def test_created_jobs_are_forgotten_after_forget_after_s() -> None:
    memo, clock = recent()
    memo.created(job("old"))
    clock.now += FORGET_AFTER_S / 2
    memo.created(job("new"))
    clock.now += FORGET_AFTER_S / 2  # "old" is exactly FORGET_AFTER_S old: still kept
    assert names(memo.with_jobs([])) == ["old", "new"]
    clock.now += 0.5
    assert names(memo.with_jobs([])) == ["new"]
    assert "old" not in memo.jobs
    clock.now += FORGET_AFTER_S / 2
    assert memo.with_jobs([]) == []
    assert memo.jobs == {}


def test_deletions_are_forgotten_after_forget_after_s() -> None:
    memo, clock = recent()
    memo.delete(job("a-0"))
    clock.now += FORGET_AFTER_S
    memo.with_jobs([])
    assert memo.was_deleted(job("a-0"))
    clock.now += 1
    memo.with_jobs([])  # forgetting happens on a pass
    assert not memo.was_deleted(job("a-0"))
    assert memo.deleted == {}


def test_a_pass_over_results_also_forgets_old_deletions() -> None:
    memo, clock = recent()
    memo.delete(job("a-0"))
    clock.now += FORGET_AFTER_S + 1
    memo.with_results([])
    assert not memo.was_deleted(job("a-0"))


# --- Results --------------------------------------------------------------------------------


def test_kept_results_are_merged_until_observed() -> None:
    memo, clock = recent()
    kept = result("b")
    memo.kept(kept)
    assert memo.with_results([result("a")]) == [result("a"), kept]
    clock.now += 1
    assert memo.with_results(iter([])) == [kept]  # any iterable, read once
    # Observed (as read back from the API: an equal but distinct object): only once.
    seen = result("b")
    merged = memo.with_results(iter([result("a"), seen]))
    assert merged == [result("a"), seen]
    assert merged[1] is seen
    assert "b" not in memo.results
    assert memo.with_results([]) == []


def test_a_kept_result_replaces_an_earlier_one_of_the_same_item() -> None:
    memo, _ = recent()
    memo.kept(result("a", Outcome.ERROR))
    memo.kept(result("a", Outcome.RESOLVED))
    assert memo.with_results([]) == [result("a", Outcome.RESOLVED)]


def test_results_and_jobs_are_kept_apart() -> None:
    memo, _ = recent()
    memo.created(job("a"))
    memo.kept(result("a"))
    # Observing a result named like a Job does not drop the Job, and the other way round.
    assert memo.with_results([result("a")]) == [result("a")]
    assert names(memo.with_jobs([])) == ["a"]
    memo.kept(result("b"))
    assert names(memo.with_jobs([job("b")])) == ["b", "a"]
    assert memo.with_results([]) == [result("b")]


def test_kept_results_are_forgotten_after_forget_after_s() -> None:
    memo, clock = recent()
    memo.kept(result("old"))
    clock.now += 100
    memo.kept(result("new"))
    clock.now += FORGET_AFTER_S - 100 + 1
    assert memo.with_results([]) == [result("new")]
    clock.now += 100
    assert memo.with_results([]) == []
    assert memo.results == {}


def test_the_default_clock_is_monotonic() -> None:
    memo = Recent()
    memo.created(job("a-0"))
    memo.kept(result("a"))
    assert names(memo.with_jobs([])) == ["a-0"]
    assert memo.with_results([]) == [result("a")]
