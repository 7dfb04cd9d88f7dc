"""The dead-agent rule: an agent that stops answering stops the run instead of burning it.

* After FAILURES_IN_A_ROW consecutive transport failures (no connection, a reset, no
  reply within the request timeout) the agent is sent no new task.
* One item then probes its card for up to `--agent-wait` seconds; the others wait.
  If the card comes back, the run goes on; if not, the run stops (exit 3) with one line
  naming the endpoint.
* The items whose request failed that way are stored as `agent` errors (retried with
  `--retry-errors`); items never sent are not stored, and neither is a request that
  failed after the agent was already declared down (it is no different from one never
  sent), so one outage stores at most FAILURES_IN_A_ROW errors.

`decide` and `after_reply` are the rule, pure; `AgentWatch` is the thin shell the
items of one run share, on its event loop.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Literal

from proctor.a2a.client import AgentProblem, fetch_card
from proctor.core.exits import Interrupted, NotRun
from proctor.core.model import AGENT_FAILURES_IN_A_ROW

FAILURES_IN_A_ROW = AGENT_FAILURES_IN_A_ROW
PROBE_INTERVAL_S = 1.0
PROBE_TIMEOUT_S = 5.0
DEFAULT_WAIT_S = 60.0

Decision = Literal["send", "probe", "wait", "stop"]


@dataclass(frozen=True)
class Health:
    """What the run knows of its agent."""

    failures_in_a_row: int = 0
    probing: bool = False
    gone: bool = False
    last_error: str = ""


def decide(health: Health) -> Decision:
    """Before a task is sent: send it, probe the agent first, wait for the probe, or stop."""
    if health.gone:
        return "stop"
    if health.failures_in_a_row < FAILURES_IN_A_ROW:
        return "send"
    return "wait" if health.probing else "probe"


def after_reply(health: Health, transport_failure: bool, error: str = "") -> tuple[Health, bool]:
    """The health after a request ended, and whether its item's result is stored.

    Any answer shows the agent alive. A transport failure counts, unless the agent is
    already declared down: that item is then not stored, as if never sent.
    """
    if not transport_failure:
        return replace(health, failures_in_a_row=0), True
    if health.failures_in_a_row >= FAILURES_IN_A_ROW:
        return health, False
    return replace(health, failures_in_a_row=health.failures_in_a_row + 1,
                   last_error=error), True


class AgentGone(NotRun):
    """The agent stopped answering and did not come back (exit 3)."""


class AgentWatch:
    """The rule, shared by the items of one run (on its event loop). `probe(timeout)`
    says whether the card answers."""

    def __init__(self, endpoint: str, wait_s: float, stop: threading.Event,
                 probe: Callable[[float], Awaitable[bool]] | None = None,
                 auth_header: tuple[str, str] | None = None):
        self.endpoint, self.wait_s, self.stop = endpoint, wait_s, stop
        self.probe = probe or (lambda timeout: card_serves(endpoint, timeout, auth_header))
        self.health = Health()
        self._probed: asyncio.Event | None = None
        """Set when the probe under way ends: what the items that wait for it await."""

    async def admitted(self) -> None:
        """Return when a task may be sent; raise AgentGone when the agent is gone."""
        while (decision := decide(self.health)) == "wait" and self._probed is not None:
            await self._probed.wait()
        if decision == "send":
            return
        if decision == "stop":
            raise AgentGone(self._gone_line())
        self.health = replace(self.health, probing=True)
        probed = self._probed = asyncio.Event()
        back = None
        try:
            back = await self._wait_for_card()
        finally:  # stopped mid-probe (Interrupted, cancelled): not probing any more
            self.health = (Health() if back else
                           replace(self.health, probing=False, gone=back is False))
            probed.set()
        if not back:
            raise AgentGone(self._gone_line())

    def report(self, transport_failure: bool, error: str = "") -> bool:
        """Record how a request ended; False: do not store its item (never answered)."""
        self.health, keep = after_reply(self.health, transport_failure, error)
        return keep

    async def _wait_for_card(self) -> bool:
        print(f"proctor: the agent at {self.endpoint} failed {FAILURES_IN_A_ROW} requests in "
              f"a row ({self.health.last_error[:200]}); no new task is sent while its card "
              f"is probed for up to {self.wait_s:g} s", file=sys.stderr)
        deadline = time.monotonic() + self.wait_s
        # The engine cancels a stopping run's probe; `stop` (set first) ends it as well.
        while not self.stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if await self.probe(min(PROBE_TIMEOUT_S, max(0.1, left))):
                print(f"proctor: the agent at {self.endpoint} answers again; going on",
                      file=sys.stderr)
                return True
            if self.stop.is_set():
                break
            await asyncio.sleep(min(PROBE_INTERVAL_S, max(0.0, deadline - time.monotonic())))
        raise Interrupted("the run is stopping")

    def _gone_line(self) -> str:
        return (f"the agent at {self.endpoint} stopped answering ({FAILURES_IN_A_ROW} requests "
                f"in a row failed, and its card did not come back within {self.wait_s:g} s); "
                f"finished items are kept: restart the agent and run again with "
                f"--retry-errors")


async def card_serves(endpoint: str, timeout_s: float,
                      auth_header: tuple[str, str] | None = None) -> bool:
    """Whether the agent serves its card now."""
    try:
        await fetch_card(endpoint, timeout_s=timeout_s, auth_header=auth_header)
    except AgentProblem:
        return False
    return True

