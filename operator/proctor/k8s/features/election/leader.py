"""Leader election on a `coordination.k8s.io/v1` Lease: what a candidate does next (pure).

kopf has no leader election (its peering pauses operators of lower priority while one of
higher priority is alive, through a CRD of its own: not an election), so `proctor operator
--leader-election` holds a Lease, as client-go's leaderelection package does:

* a Lease absent: create it, holding it (a 409: another candidate was first);
* held by me: renew it (renewTime = now), every retry period;
* held by another, or released (no holder): take it over once it is released, or once its
  record has not changed for leaseDurationSeconds, measured on *this* process's monotonic
  clock since it first saw that record. Its renewTime is never compared with this
  machine's wall clock, so clocks that disagree between nodes elect no second leader
  (client-go's rule, for the same reason);
* every write carries the resourceVersion that was read, so of two candidates writing at
  once the API server refuses one (409): at most one wins.

The shell (`elected`) reads the Lease, calls `next_step`, writes what it says.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from proctor.k8s.machinery.objects import Lease, MutableObj

MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"  # the API's MicroTime


class Timing(BaseModel):
    """The three durations of client-go's leader election (its defaults)."""

    model_config = ConfigDict(frozen=True)
    lease_seconds: float = Field(15.0, gt=0)
    """How long a follower waits on a record that does not change before taking over."""
    renew_deadline_seconds: float = Field(10.0, gt=0)
    """How long the leader may go without a successful renewal before it stops acting:
    shorter than lease_seconds, so that it stops before a follower takes over."""
    retry_seconds: float = Field(2.0, gt=0)
    """Between two tries: the leader's renewals, a follower's reads."""

    def check(self) -> None:
        """A ValueError saying which durations are out of order."""
        if not self.retry_seconds < self.renew_deadline_seconds < self.lease_seconds:
            raise ValueError(
                f"leader election needs retry period ({self.retry_seconds:g}s) < renew "
                f"deadline ({self.renew_deadline_seconds:g}s) < lease duration "
                f"({self.lease_seconds:g}s)")


@dataclass(frozen=True)
class Seen:
    """A Lease record as a follower first saw it, and when (its monotonic clock)."""

    record: tuple[Any, ...]
    at: float


@dataclass(frozen=True)
class Step:
    """What to do: create or update the Lease with `body` (`update` keeps the
    resourceVersion read, so a concurrent write makes it fail), or wait."""

    action: Literal["create", "update", "wait"]
    body: MutableObj | None
    seen: Seen | None
    holder: str | None
    """Who holds the Lease if the write succeeds (for "wait": who holds it now)."""


class _Spec(BaseModel):
    """The fields of a Lease's spec that the election reads (the API server checked types)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    holder: str | None = Field(None, alias="holderIdentity")
    lease_seconds: int | None = Field(None, alias="leaseDurationSeconds")
    acquire_time: str | None = Field(None, alias="acquireTime")
    renew_time: str | None = Field(None, alias="renewTime")
    transitions: int = Field(0, alias="leaseTransitions")


def micro_time(now: datetime) -> str:
    return now.astimezone(UTC).strftime(MICRO_TIME)


def _spec(lease: Lease) -> _Spec:
    try:
        return _Spec.model_validate(lease.get("spec") or {})
    except ValidationError:  # not what any elector writes: treat it as released
        return _Spec()


def lease_body(name: str, namespace: str, spec: _Spec, resource_version: str | None) -> MutableObj:
    meta: MutableObj = {"name": name, "namespace": namespace}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": spec.model_dump(by_alias=True, exclude_none=True)}


def next_step(lease: Lease | None, *, name: str, namespace: str, me: str,
              now: datetime, clock: float, seen: Seen | None, timing: Timing) -> Step:
    """The candidate `me`'s next step, given the Lease as read (None: there is none),
    the wall-clock time `now` (written into the Lease, for people to read), its monotonic
    `clock`, and what it saw before (`seen`, from the previous Step)."""
    stamp, duration = micro_time(now), max(1, round(timing.lease_seconds))
    if lease is None:
        spec = _Spec(holder=me, lease_seconds=duration, acquire_time=stamp, renew_time=stamp,
                     transitions=0)
        return Step("create", lease_body(name, namespace, spec, None), None, me)
    current = _spec(lease)
    version = (lease.get("metadata") or {}).get("resourceVersion")
    if current.holder == me:
        renewed = current.model_copy(update={"renew_time": stamp,
                                             "lease_seconds": duration})
        return Step("update", lease_body(name, namespace, renewed, version), None, me)
    record = (current.holder, current.renew_time, current.acquire_time, current.transitions,
              current.lease_seconds)
    if current.holder and (seen is None or seen.record != record):
        return Step("wait", None, Seen(record, clock), current.holder)  # alive, or just seen
    waited = clock - seen.at if seen is not None else 0.0
    if current.holder and waited < (current.lease_seconds or duration):
        return Step("wait", None, seen, current.holder)
    taken = _Spec(holder=me, lease_seconds=duration, acquire_time=stamp, renew_time=stamp,
                  transitions=current.transitions + 1)
    return Step("update", lease_body(name, namespace, taken, version), None, me)


def released(lease: Lease, me: str, now: datetime) -> MutableObj | None:
    """The Lease given up by `me` on a clean stop (no holder: a follower takes it at its
    next try instead of a lease duration later), or None when `me` does not hold it."""
    current = _spec(lease)
    if current.holder != me:
        return None
    meta = lease.get("metadata") or {}
    spec = current.model_copy(update={"holder": None, "renew_time": micro_time(now)})
    return lease_body(meta.get("name", ""), meta.get("namespace", ""), spec,
                      meta.get("resourceVersion"))
