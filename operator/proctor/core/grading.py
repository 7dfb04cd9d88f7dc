"""The outcome decision tree: the one place that turns test results into an outcome.

The tree is the Agentbeats SWE Verified scenario's:

    Patch applied?
    ├── No → no_op
    └── Yes
        ├── All F2P pass AND all P2P pass → resolved
        ├── All F2P pass (P2P broken)     → breaking_resolved
        ├── All P2P pass
        │   ├── Some F2P pass → partially_resolved
        │   └── No F2P pass   → no_op
        ├── Some F2P pass (P2P broken)    → work_in_progress
        └── No F2P pass (P2P broken)      → regression

"Pass" follows swebench 5 (`swebench.harness.grading`): an F2P test passes only
when it ran and PASSED or XFAILed (skipped counts as failed); a P2P test is
maintained when it PASSED, XFAILed or was SKIPPED. An empty F2P list counts as
all passing, as swebench's `compute_fail_to_pass` does.
"""

from __future__ import annotations

from proctor.core.model import Outcome


def decide_outcome(
    applied: bool, f2p_passed: int, f2p_total: int, p2p_passed: int, p2p_total: int
) -> Outcome:
    """The outcome of an item whose eval script ran (errors are decided before this)."""
    if not applied:
        return Outcome.NO_OP
    all_f2p = f2p_passed == f2p_total
    some_f2p = f2p_passed > 0
    all_p2p = p2p_passed == p2p_total
    if all_f2p and all_p2p:
        return Outcome.RESOLVED
    if all_f2p:
        return Outcome.BREAKING_RESOLVED
    if all_p2p:
        return Outcome.PARTIALLY_RESOLVED if some_f2p else Outcome.NO_OP
    return Outcome.WORK_IN_PROGRESS if some_f2p else Outcome.REGRESSION
