"""proctor.k8s.features.election.leader: who may act, from a Lease as the API server returns it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from proctor.k8s.features.election.leader import Seen, Step, Timing, next_step, released

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TIMING = Timing()  # client-go's defaults: 15s lease, 10s renew deadline, 2s retry


def lease(holder: str | None, renew: datetime = NOW, version: str = "41",
          transitions: int = 3, duration: int = 15) -> dict[str, Any]:
    """A Lease as the API server returns it."""
    spec: dict[str, Any] = {"leaseDurationSeconds": duration,
                            "acquireTime": "2026-03-01T11:00:00.000000Z",
                            "renewTime": renew.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                            "leaseTransitions": transitions}
    if holder is not None:
        spec["holderIdentity"] = holder
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "proctor-leader", "namespace": "proctor-system",
                         "resourceVersion": version, "uid": "u-1"}, "spec": spec}


def step(current: dict[str, Any] | None, me: str = "pod-b", clock: float = 100.0,
         seen: Seen | None = None, now: datetime = NOW) -> Step:
    return next_step(current, name="proctor-leader", namespace="proctor-system", me=me,
                     now=now, clock=clock, seen=seen, timing=TIMING)


def test_no_lease_is_created_held_by_me() -> None:
    first = step(None)
    assert first.action == "create" and first.holder == "pod-b"
    assert first.body is not None
    assert "resourceVersion" not in first.body["metadata"]  # a create: 409 if one exists
    assert first.body["spec"] == {"holderIdentity": "pod-b", "leaseDurationSeconds": 15,
                                  "acquireTime": "2026-03-01T12:00:00.000000Z",
                                  "renewTime": "2026-03-01T12:00:00.000000Z",
                                  "leaseTransitions": 0}


def test_my_lease_is_renewed_with_the_version_read() -> None:
    later = NOW + timedelta(seconds=2)
    renew = step(lease("pod-b"), now=later)
    assert renew.action == "update" and renew.body is not None
    assert renew.body["metadata"]["resourceVersion"] == "41"  # a concurrent write: 409
    spec = renew.body["spec"]
    assert spec["renewTime"] == "2026-03-01T12:00:02.000000Z"
    assert spec["acquireTime"] == "2026-03-01T11:00:00.000000Z"  # still the same term
    assert spec["leaseTransitions"] == 3 and spec["holderIdentity"] == "pod-b"


def test_another_holders_lease_is_waited_on_while_it_changes() -> None:
    first = step(lease("pod-a"), clock=100.0)
    assert (first.action, first.holder) == ("wait", "pod-a")
    # The leader renews: the record changed, so the wait starts again from now.
    renewed = step(lease("pod-a", NOW + timedelta(seconds=10), version="42"),
                   clock=110.0, seen=first.seen)
    assert renewed.action == "wait"
    still = step(lease("pod-a", NOW + timedelta(seconds=10), version="42"),
                 clock=124.9, seen=renewed.seen)
    assert still.action == "wait", "taken over before a lease duration without renewal"


def test_a_lease_unrenewed_for_its_duration_is_taken_over() -> None:
    first = step(lease("pod-a"), clock=100.0)
    assert step(lease("pod-a"), clock=114.9, seen=first.seen).action == "wait"
    taken = step(lease("pod-a"), clock=115.0, seen=first.seen)
    assert (taken.action, taken.holder) == ("update", "pod-b")
    assert taken.body is not None
    assert taken.body["metadata"]["resourceVersion"] == "41"  # of two takers, one wins
    spec = taken.body["spec"]
    assert spec["holderIdentity"] == "pod-b" and spec["leaseTransitions"] == 4
    assert spec["acquireTime"] == spec["renewTime"] == "2026-03-01T12:00:00.000000Z"


def test_the_lease_duration_written_by_the_holder_is_the_one_waited() -> None:
    first = step(lease("pod-a", duration=60), clock=100.0)
    assert step(lease("pod-a", duration=60), clock=159.0, seen=first.seen).action == "wait"
    assert step(lease("pod-a", duration=60), clock=160.0, seen=first.seen).action == "update"


@pytest.mark.parametrize("skew", [timedelta(hours=-1), timedelta(hours=1)])
def test_the_holders_clock_does_not_decide_expiry(skew: timedelta) -> None:
    """A renewTime far in the past (the holder's clock is behind) is not taken at once; one
    far in the future (ahead) does not hold the Lease forever: only how long this process
    has seen no change counts."""
    stale = lease("pod-a", renew=NOW + skew)
    first = step(stale, clock=100.0)
    assert first.action == "wait"
    assert step(stale, clock=115.0, seen=first.seen).action == "update"


def test_a_released_lease_is_taken_at_once() -> None:
    taken = step(lease(None), clock=100.0)
    assert (taken.action, taken.holder) == ("update", "pod-b")
    empty = lease("pod-a")
    empty["spec"]["holderIdentity"] = ""
    assert step(empty).action == "update"


def test_a_lease_with_an_unreadable_spec_is_taken_as_released() -> None:
    odd = lease("pod-a")
    odd["spec"]["leaseTransitions"] = "many"
    taken = step(odd)
    assert taken.action == "update" and taken.body is not None
    assert taken.body["spec"]["holderIdentity"] == "pod-b"


def test_what_was_seen_of_another_record_does_not_count() -> None:
    """A follower that saw pod-a's record does not take pod-c's fresh one over."""
    first = step(lease("pod-a"), clock=100.0)
    fresh = lease("pod-c", version="50", transitions=4)
    assert step(fresh, clock=200.0, seen=first.seen).action == "wait"


def test_release_gives_up_only_my_own_lease() -> None:
    given = released(lease("pod-b"), "pod-b", NOW + timedelta(seconds=3))
    assert given is not None
    assert "holderIdentity" not in given["spec"]
    assert given["metadata"]["resourceVersion"] == "41"
    assert given["spec"]["renewTime"] == "2026-03-01T12:00:03.000000Z"
    assert released(lease("pod-a"), "pod-b", NOW) is None
    # Once given up, the other candidate takes it at its next try.
    assert step({**lease(None), "spec": given["spec"]}, me="pod-a").action == "update"


@pytest.mark.parametrize(("retry", "deadline", "duration"), [
    (2, 15, 15), (10, 10, 15), (2, 20, 15), (3, 2, 15)])
def test_durations_out_of_order_are_refused(retry: float, deadline: float,
                                           duration: float) -> None:
    timing = Timing(lease_seconds=duration, renew_deadline_seconds=deadline,
                    retry_seconds=retry)
    with pytest.raises(ValueError, match=r"retry period .* < renew deadline .* < lease"):
        timing.check()
    Timing().check()  # the defaults are in order
