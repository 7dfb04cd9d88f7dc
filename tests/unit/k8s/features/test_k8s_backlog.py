"""Results kept in full while the object store was down (proctor.k8s.features.store_backlog):
which the operator moves once it answers, and StoreUnavailable as the API shows it after a
restart."""

from __future__ import annotations

from proctor.core.model import Outcome, RunResult
from proctor.formats.manifest import parse_resource
from proctor.k8s.children.store import (
    RECORD_KIND,
    item_files,
    record_configmap,
    result_configmap,
    store_of,
    upload_failed,
)
from proctor.k8s.evaluation.reconcile import Decision, StoreState, conditions_for, store_condition
from proctor.k8s.features.store_backlog import Kept, kept_of, plan_moves
from proctor.k8s.machinery.conditions import find_condition
from proctor.k8s.pull import write_folder
from proctor.store.record import item_record
from proctor.store.s3 import differing

EV = parse_resource({
    "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
    "metadata": {"name": "ev", "namespace": "ns"},
    "spec": {"dataset": {"name": "proctor-demo"}, "predictions": {"source": "gold"},
             "results": {"store": {"url": "s3://results/evals"}}}})
URL = "s3://results/evals/ns/ev"
NOW = "2026-01-01T00:00:00Z"


def result(n: int) -> RunResult:
    return RunResult(item_id=f"{n:032x}", instance_id=f"t-{n}", outcome=Outcome.RESOLVED)


def full(n: int) -> Kept:
    return kept_of(result_configmap(EV, result(n), upload_failed=True), "uid", result(n))


def record(n: int) -> Kept:
    config = store_of(EV, {})
    assert config is not None
    body = record_configmap(EV, result(n), item_record(result(n), config.run, {}),
                            kind=RECORD_KIND)
    return kept_of(body, "uid", result(n))


def test_a_result_kept_in_full_after_a_failed_upload_is_labelled_so() -> None:
    failed = result_configmap(EV, result(1), upload_failed=True)
    assert upload_failed(failed) and full(1).backlog and not full(1).record
    # Without a store, or uploaded: no backlog.
    assert not upload_failed(result_configmap(EV, result(1)))
    assert record(1).record and not record(1).backlog
    # The moved record has a name of its own: it exists beside the full one for a while.
    assert record(1).name != full(1).name


def test_while_the_store_answers_a_batch_moves_each_pass() -> None:
    kept = [full(n) for n in range(40)] + [Kept("uid", result(99), "done")]
    moves = plan_moves(kept, failed_at=None, now=0.0, batch=16)
    assert len(moves.move) == 16 and moves.drop == ()
    assert set(moves.move) <= {k.name for k in kept[:40]}
    # Names already moved (their deletion not yet in the index) are not moved twice.
    again = plan_moves(kept, failed_at=None, now=0.0, batch=16, moved=set(moves.move))
    assert not set(again.move) & set(moves.move)
    assert plan_moves([Kept("uid", result(1), "x")], failed_at=None, now=0.0).move == ()


def test_after_a_failure_one_item_tries_the_store_again_once_a_while() -> None:
    kept = [full(n) for n in range(5)]
    assert plan_moves(kept, failed_at=100.0, now=130.0, retry_seconds=60).move == ()
    assert len(plan_moves(kept, failed_at=100.0, now=160.0, retry_seconds=60).move) == 1


def test_an_item_with_both_kinds_only_has_its_full_configmap_deleted() -> None:
    # The operator stopped after making the record and before deleting the full one.
    moves = plan_moves([full(1), record(1), full(2)], failed_at=None, now=0.0)
    assert moves.drop == (full(1).name,) and moves.move == (full(2).name,)


def test_pull_reads_an_item_kept_both_ways_once_and_needs_no_store_for_it(tmp_path) -> None:
    config = store_of(EV, {})
    assert config is not None
    r = result(1)
    both = [result_configmap(EV, r, upload_failed=True),
            record_configmap(EV, r, item_record(r, config.run, item_files(r, None)),
                             kind=RECORD_KIND)]
    assert write_folder(EV, both, tmp_path / "out") == 1  # no fetch given: none needed


def test_store_unavailable_survives_a_restart_while_items_wait_in_full() -> None:
    down = StoreState(url=URL, error="cannot reach the object store", tried=True, backlog=3)
    before = conditions_for([], [], Decision(), NOW, 1, store=down)
    was = find_condition(before, "StoreUnavailable")
    assert was["status"] == "True" and "3 items" in was["message"]
    # A new process: no upload tried yet, the API holds 3 labelled full ConfigMaps.
    restarted = StoreState(url=URL, backlog=3)
    after = conditions_for(before, [], Decision(), "2026-01-01T01:00:00Z", 1, store=restarted)
    now = find_condition(after, "StoreUnavailable")
    assert (now["status"], now["reason"], now["message"]) == \
        ("True", "UploadFailed", was["message"])
    assert now["lastTransitionTime"] == was["lastTransitionTime"]  # it never flipped
    # No earlier status (it was lost, or written by an older operator): the API says it.
    assert store_condition(restarted)[1:3] == (True, "UploadFailed")
    assert "3 items" in store_condition(restarted)[3]


def test_store_unavailable_clears_as_the_backlog_moves_and_is_gone() -> None:
    moving = store_condition(StoreState(url=URL, tried=True, backlog=2))
    assert moving[1:3] == (False, "Recovering") and "2 items" in moving[3]
    assert store_condition(StoreState(url=URL, tried=True))[1:3] == (False, "Available")
    # A restart with nothing kept in full: the store was fine as far as the API shows.
    assert store_condition(StoreState(url=URL))[1:3] == (False, "Available")


def test_a_file_read_back_otherwise_is_named() -> None:
    sent = {"a": b"1", "b": b"2", "c": b"3"}
    assert differing(sent, sent) == []
    assert differing(sent, {"a": b"1", "b": b"changed"}) == ["b", "c"]
