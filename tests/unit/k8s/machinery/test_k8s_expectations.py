"""proctor.k8s.machinery.expectations: what the controller wrote, until its indexes show it."""

from __future__ import annotations

from typing import Any

from proctor.core.model import Outcome, RunResult
from proctor.k8s.machinery.expectations import FORGET_AFTER_S, Expectations


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def job(name: str) -> dict[str, Any]:
    return {"kind": "Job", "metadata": {"name": name}}


def names(jobs: list[dict[str, Any]]) -> list[str]:
    return [j["metadata"]["name"] for j in jobs]


def expectations() -> tuple[Expectations, FakeClock]:
    clock = FakeClock()
    return Expectations(clock=clock), clock


def test_nothing_written_adds_nothing() -> None:
    expected, _ = expectations()
    assert expected.with_jobs([job("a-0")]) == [job("a-0")]
    assert expected.with_jobs([]) == [] and expected.with_results([]) == []


def test_a_created_job_counts_until_the_index_shows_it_then_is_forgotten() -> None:
    expected, clock = expectations()
    expected.created(job("b-0"))
    assert names(expected.with_jobs([job("a-0")])) == ["a-0", "b-0"]
    clock.now += 1
    assert names(expected.with_jobs([])) == ["b-0"]  # still not seen: still counted
    seen = {**job("b-0"), "status": {"active": 1}}  # as the server wrote it: once, not twice
    assert expected.with_jobs([seen]) == [seen]
    # Once seen it is forgotten: if it goes (deleted by someone else), it does not come back.
    assert expected.with_jobs([]) == []


def test_a_deleted_job_is_left_out_at_once_and_not_deleted_twice() -> None:
    expected, clock = expectations()
    expected.created(job("a-0"))
    expected.delete(job("a-0"))
    assert expected.was_deleted(job("a-0")) and not expected.was_deleted(job("b-0"))
    assert expected.with_jobs([]) == []  # created and deleted before it was ever seen
    assert names(expected.with_jobs([job("a-0"), job("b-0")])) == ["b-0"]
    clock.now += FORGET_AFTER_S + 1  # long gone from the index, or the watch is broken
    assert names(expected.with_jobs([job("a-0")])) == ["a-0"]


def test_a_write_never_seen_is_forgotten_after_a_while() -> None:
    expected, clock = expectations()
    expected.created(job("a-0"))
    expected.kept(RunResult(item_id="i", instance_id="t", outcome=Outcome.RESOLVED))
    clock.now += FORGET_AFTER_S + 1
    assert expected.with_jobs([]) == [] and expected.with_results([]) == []


def test_a_kept_result_counts_until_the_index_shows_it() -> None:
    expected, _ = expectations()
    kept = RunResult(item_id="i", instance_id="t", outcome=Outcome.RESOLVED)
    expected.kept(kept)
    assert expected.with_results([]) == [kept]
    seen = kept.model_copy(update={"repo": "o/r"})
    assert expected.with_results([seen]) == [seen]
    assert expected.with_results([]) == []
