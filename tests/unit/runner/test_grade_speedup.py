"""The status-line prefilter gives exactly swebench's own parse, on real and large logs."""

from __future__ import annotations

import sys

import pytest
from swebench.harness.log_parsers import PARSER_REGISTRY

from proctor.runner.grade import STATUS_GATED_PARSERS, _status_lines_only
from support.paths import BENCHMARKS, SHARED_DATA, shared

sys.path.insert(0, str(BENCHMARKS))
from grading import make_log

LOGS_DIR = SHARED_DATA / "swebench-verified" / "logs"


@pytest.mark.parametrize("name", STATUS_GATED_PARSERS)
def test_prefiltered_parser_equals_swebench_on_real_logs(name):
    fast = PARSER_REGISTRY[_status_lines_only(name)]
    logs = sorted(shared(LOGS_DIR).glob("*/test_output.txt"))
    assert len(logs) == 177
    for log_path in logs:
        log = log_path.read_text(errors="replace")
        assert fast(log, None) == PARSER_REGISTRY[name](log, None), log_path.parent.name


@pytest.mark.parametrize("name", STATUS_GATED_PARSERS)
def test_prefiltered_parser_equals_swebench_on_a_generated_log(name):
    log, _, _ = make_log(2_000_000)
    log += "\r\nPASSED tests/x.py::crlf\r\nSKIPPED [3] tests/x.py:1: reason\nFAILED a - b\n"
    fast = PARSER_REGISTRY[_status_lines_only(name)]
    assert fast(log, None) == PARSER_REGISTRY[name](log, None)
