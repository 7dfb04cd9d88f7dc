"""`proctor operator --leader-election`: kopf runs only while this process holds the Lease.

One asyncio loop (kopf's own): the candidate waits for the Lease, answering /healthz
meanwhile as a ready standby; once it holds it, kopf starts, and a task renews the Lease
every retry period. The decisions are `leader.next_step` (pure); this module only reads
and writes the Lease (`api.Leases`, in asyncio's default executor) and waits.

A leader that cannot renew within the renew deadline ends its process at once (exit 1,
the pod restarts as a follower) rather than stopping kopf gracefully: a graceful stop lets
passes in flight go on creating Jobs while a follower may already be taking over, and a
process that exits acts no more. Nothing is lost by it: the status is rebuilt from the
cluster by whoever leads next, and a Job created twice is refused by its name (409).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from aiohttp import web

from proctor.k8s.features.election.leader import Seen, Timing, next_step, released
from proctor.k8s.machinery.api import Leases, describe

log = logging.getLogger("proctor.election")
LOST = 1  # the exit status of a leader that lost its Lease (the pod restarts)


@dataclass(frozen=True)
class Election:
    """Who this candidate is, and which Lease it competes for."""

    namespace: str
    lease: str
    identity: str
    timing: Timing


async def _standby(port: int) -> web.AppRunner:
    """/healthz while waiting: a follower is alive and ready (see docs/kubernetes.md)."""
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"leader": False})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner


async def _try(leases: Leases, me: str, seen: Seen | None, timing: Timing
               ) -> tuple[bool, Seen | None, str | None]:
    """One read and, if `next_step` says so, one write: (held by me now, seen, holder)."""
    lease = await asyncio.to_thread(leases.read)
    step = next_step(lease, name=leases.name, namespace=leases.namespace, me=me,
                     now=datetime.now(UTC), clock=time.monotonic(), seen=seen, timing=timing)
    if step.action == "wait" or step.body is None:
        return False, step.seen, step.holder
    won = await asyncio.to_thread(leases.write, step.action, step.body)
    return won, step.seen, step.holder if won else None


async def acquire(leases: Leases, me: str, timing: Timing) -> None:
    """Return once `me` holds the Lease."""
    seen: Seen | None = None
    shown: str | None = None
    while True:
        try:
            won, seen, holder = await _try(leases, me, seen, timing)
        except Exception as exc:  # the API server unreachable: try again
            won, holder = False, shown
            log.warning("Reading the Lease %s/%s failed: %s", leases.namespace, leases.name,
                        describe(exc))
        if won:
            log.info("Acquired the Lease %s/%s holder=%s", leases.namespace, leases.name, me)
            return
        if holder != shown and holder is not None:
            log.info("Waiting for the Lease %s/%s holder=%s", leases.namespace, leases.name,
                     holder)
            shown = holder
        await asyncio.sleep(timing.retry_seconds)


async def renew_forever(leases: Leases, me: str, timing: Timing,
                        lost: Callable[[str], None]) -> None:
    """Renew every retry period; `lost(why)` when another holds the Lease or no renewal
    succeeded within the renew deadline."""
    renewed = time.monotonic()
    while True:
        await asyncio.sleep(timing.retry_seconds)
        try:
            held, _, holder = await _try(leases, me, None, timing)
        except Exception as exc:
            held, holder = False, None
            log.warning("Renewing the Lease %s/%s failed: %s", leases.namespace, leases.name,
                        describe(exc))
        if held:
            renewed = time.monotonic()
        elif holder is not None and holder != me:
            return lost(f"the Lease {leases.namespace}/{leases.name} is held by {holder}")
        elif time.monotonic() - renewed > timing.renew_deadline_seconds:
            return lost(f"the Lease {leases.namespace}/{leases.name} was not renewed for "
                        f"{timing.renew_deadline_seconds:g}s")


def _exit_lost(why: str) -> None:
    log.error("Stopped leading: %s; exiting so that no two operators act", why)
    logging.shutdown()
    sys.stderr.flush()
    os._exit(LOST)  # at once: see the module's docstring


async def run_elected(leases: Leases, me: str, timing: Timing, probe_port: int,
                      operate: Callable[[], Awaitable[None]],
                      lost: Callable[[str], None] = _exit_lost) -> None:
    """Wait for the Lease (a standby /healthz on `probe_port`), then `operate()` (kopf,
    which serves /healthz itself) while renewing it; give it up when kopf stops."""
    standby = await _standby(probe_port)
    try:
        await acquire(leases, me, timing)
    finally:
        await standby.cleanup()
    renewing = asyncio.create_task(renew_forever(leases, me, timing, lost))
    try:
        await operate()
    finally:
        renewing.cancel()
        await _release(leases, me)


async def _release(leases: Leases, me: str) -> None:
    """On a clean stop (SIGTERM, a rolling update): a follower takes over at its next try,
    not a lease duration later."""
    try:
        lease = await asyncio.to_thread(leases.read)
        body = released(lease, me, datetime.now(UTC)) if lease is not None else None
        if body is not None and await asyncio.to_thread(leases.write, "update", body):
            log.info("Released the Lease %s/%s", leases.namespace, leases.name)
    except Exception as exc:  # it expires by itself
        log.warning("Releasing the Lease %s/%s failed: %s", leases.namespace, leases.name,
                    describe(exc))
