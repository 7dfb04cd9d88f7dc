"""Where the suite's time goes: the test modules over 30 s, named at the end with the load
average at their last test (a pytest plugin, loaded by tests/conftest.py)."""

from __future__ import annotations

import os
from typing import Any

import pytest

SLOW_MODULE_S = 30.0
"""A test module that takes longer is named in the summary, with its time."""
_seconds: dict[str, float] = {}
_load: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add the report's time (setup, call or teardown) to its module's, and note the load
    average: CI's log says where the time went and how busy the machine was."""
    module = report.nodeid.split("::")[0]
    _seconds[module] = _seconds.get(module, 0.0) + report.duration
    _load[module] = os.getloadavg()[0]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The test modules that took over SLOW_MODULE_S, longest first."""
    slow = sorted(((s, m) for m, s in _seconds.items() if s > SLOW_MODULE_S), reverse=True)
    if slow:
        terminalreporter.section(f"test modules over {SLOW_MODULE_S:.0f} s")
    for seconds, module in slow:
        terminalreporter.write_line(f"{seconds:7.0f} s  {module}  (load average at its last "
                                    f"test: {_load[module]:.1f})")
