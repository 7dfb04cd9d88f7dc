"""The outcome decision tree, branch by branch (Agentbeats SWE Verified's tree)."""

import pytest

from proctor.core.grading import decide_outcome
from proctor.core.model import Outcome

# (applied, f2p passed, f2p total, p2p passed, p2p total) -> outcome
CASES = [
    pytest.param(False, 0, 2, 3, 3, Outcome.NO_OP, id="not-applied"),
    pytest.param(False, 2, 2, 3, 3, Outcome.NO_OP, id="not-applied-even-if-tests-pass"),
    pytest.param(True, 2, 2, 3, 3, Outcome.RESOLVED, id="all-f2p-all-p2p"),
    pytest.param(True, 1, 1, 0, 0, Outcome.RESOLVED, id="no-p2p-tests"),
    pytest.param(True, 2, 2, 2, 3, Outcome.BREAKING_RESOLVED, id="all-f2p-p2p-broken"),
    pytest.param(True, 1, 2, 3, 3, Outcome.PARTIALLY_RESOLVED, id="some-f2p-p2p-intact"),
    pytest.param(True, 0, 2, 3, 3, Outcome.NO_OP, id="no-f2p-p2p-intact"),
    pytest.param(True, 1, 2, 1, 3, Outcome.WORK_IN_PROGRESS, id="some-f2p-p2p-broken"),
    pytest.param(True, 0, 2, 0, 3, Outcome.REGRESSION, id="no-f2p-p2p-broken"),
    pytest.param(True, 0, 0, 3, 3, Outcome.RESOLVED, id="empty-f2p-counts-as-all-passing"),
]


@pytest.mark.parametrize(("applied", "f2p", "f2p_n", "p2p", "p2p_n", "expected"), CASES)
def test_decision_tree(applied, f2p, f2p_n, p2p, p2p_n, expected):
    assert decide_outcome(applied, f2p, f2p_n, p2p, p2p_n) == expected


def test_every_non_error_outcome_is_reachable():
    reached = {c.values[-1] for c in CASES}
    assert reached == set(Outcome) - {Outcome.ERROR}
