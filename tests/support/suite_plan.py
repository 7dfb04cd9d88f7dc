"""How the suite runs: the real-cluster tests on one pytest-xdist worker, and where its time
goes (a pytest plugin, loaded by tests/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

SLOW_MODULE_S = 30.0
"""A test module that takes longer is named in the summary, with its time."""
_seconds: dict[str, float] = {}
_load: dict[str, float] = {}


CLUSTER_TESTS = Path(__file__).resolve().parents[1] / "cluster"


def uses_the_real_cluster(item: pytest.Item) -> bool:
    """Every test of tests/cluster/ (some drive the cluster through scripts alone, with no
    marker or fixture to say so), and any other marked `cluster` or using its kubeconfig."""
    return (CLUSTER_TESTS in item.path.parents or item.get_closest_marker("cluster") is not None
            or "cluster_kubeconfig" in getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The real-cluster tests run one after another on one worker (scripts/test.sh: `-n 2
    --dist loadgroup`): they share the one node, and some change what is cluster-wide
    (CRDs, Kueue, webhooks; scripts/cluster-demo.sh and try-operator.sh install and remove
    the chart). The other tests spread over the workers meanwhile."""
    for item in items:
        if uses_the_real_cluster(item):
            item.add_marker(pytest.mark.xdist_group("real-cluster"))


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
