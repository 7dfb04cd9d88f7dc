"""Where the suite's time goes: a line as each test module ends (its time, the load
average), and at the end the test modules over 30 s, longest first (a pytest plugin,
loaded by tests/conftest.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

SLOW_MODULE_S = 30.0
"""A test module that takes longer is named in the summary, with its time."""
_seconds: dict[str, float] = {}
_load: dict[str, float] = {}


def _module(nodeid: str) -> str:
    return nodeid.split("::")[0]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add the report's time (setup, call or teardown) to its module's, and note the load
    average: CI's log says where the time went and how busy the machine was."""
    module = _module(report.nodeid)
    _seconds[module] = _seconds.get(module, 0.0) + report.duration
    _load[module] = os.getloadavg()[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None
                            ) -> Iterator[None]:
    """Once a module's last test has run, a line that says so: progress on a long run
    (with -q, a line of dots ends only every 72 tests)."""
    yield
    module = _module(item.nodeid)
    if nextitem is not None and _module(nextitem.nodeid) == module:
        return
    reporter = item.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and module in _seconds:
        if reporter.verbosity <= 0:  # ends the line of dots (a verbose line has ended)
            reporter.write("\n")
        reporter.write_line(f"{module}: {_seconds[module]:.0f} s (load average "
                            f"{_load[module]:.1f})")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The test modules that took over SLOW_MODULE_S, longest first."""
    slow = sorted(((s, m) for m, s in _seconds.items() if s > SLOW_MODULE_S), reverse=True)
    if slow:
        terminalreporter.section(f"test modules over {SLOW_MODULE_S:.0f} s")
    for seconds, module in slow:
        terminalreporter.write_line(f"{seconds:7.0f} s  {module}  (load average at its last "
                                    f"test: {_load[module]:.1f})")
