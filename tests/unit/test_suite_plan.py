"""The suite's own progress lines (tests/support/suite_plan.py), in a pytest run of its own."""

from __future__ import annotations

import re

import pytest

pytest_plugins = ["pytester"]


def test_each_module_says_when_it_ends_and_the_slow_ones_are_named(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(
        test_first="def test_a():\n    pass\n\ndef test_b():\n    pass\n",
        test_second="import time\n\ndef test_c():\n    time.sleep(0.2)\n")
    monkeypatch.setattr("support.suite_plan.SLOW_MODULE_S", 0.1)
    monkeypatch.setattr("support.suite_plan._seconds", {})
    result = pytester.runpytest_inprocess("-q", "-p", "support.suite_plan", "-p", "no:asyncio")
    result.assert_outcomes(passed=3)
    lines = result.outlines
    ends = [i for i, line in enumerate(lines) if re.search(r"^test_\w+\.py: \d+ s \(load "
                                                           r"average [\d.]+\)$", line)]
    # One line per module, in the order they ran, each after its module's dots.
    assert [lines[i].split(":")[0] for i in ends] == ["test_first.py", "test_second.py"]
    slow = lines[lines.index(next(x for x in lines if "test modules over" in x)) + 1:]
    assert [x.split()[2] for x in slow if x.strip().endswith(")")] == ["test_second.py"]
