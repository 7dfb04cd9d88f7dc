"""Budgets: caps on what the agent may spend in a run (Evaluation.spec.budget and
AgentUnderTest.spec.budget; the smaller of each cap applies).

What was spent is the usage the agent reported, summed over the results already in the
folder and those of this run. Once a total cap is reached no new task is sent: the items
in flight finish and are kept, items not sent are not stored, and the run stops (exit 4)
saying which cap ended it. `over_budget` is the rule (pure); `BudgetGuard` the shell.
"""

from __future__ import annotations

from collections.abc import Iterable

from proctor.core.model import Usage
from proctor.core.spec import BudgetSpec


def combined(*budgets: BudgetSpec | None) -> BudgetSpec | None:
    """The smaller of each cap over the budgets given; None when none caps anything."""
    def least(values: Iterable[float | int | None]) -> float | int | None:
        present = [v for v in values if v is not None]
        return min(present) if present else None

    given = [b for b in budgets if b is not None]
    found = BudgetSpec(max_tokens=least(b.max_tokens for b in given),
                       max_cost_usd=least(b.max_cost_usd for b in given),
                       item_seconds=least(b.item_seconds for b in given))
    return None if found == BudgetSpec() else found


def add(spent: Usage, usage: Usage | None) -> Usage:
    """What was spent, with one more item's usage."""
    if usage is None:
        return spent
    return Usage(total_tokens=(spent.total_tokens or 0) + (usage.total_tokens or 0),
                 cost_usd=(spent.cost_usd or 0) + (usage.cost_usd or 0))


def over_budget(budget: BudgetSpec | None, spent: Usage) -> str | None:
    """Which total cap `spent` has reached, in words; None while within every cap."""
    if budget is None:
        return None
    tokens, cost = spent.total_tokens or 0, spent.cost_usd or 0.0
    if budget.max_tokens is not None and tokens >= budget.max_tokens:
        return f"the token budget of {budget.max_tokens:,} is spent ({tokens:,} tokens)"
    if budget.max_cost_usd is not None and cost >= budget.max_cost_usd:
        return f"the cost budget of ${budget.max_cost_usd:g} is spent (${cost:.4f})"
    return None


class BudgetGuard:
    """The budget of one run, shared by its items (on the run's one event loop: no lock)."""

    def __init__(self, budget: BudgetSpec | None, spent: Usage | None = None):
        self.budget = budget
        self.spent = spent or Usage()
        self.reason: str | None = over_budget(budget, self.spent)
        self.refused = 0
        """Tasks not sent because the budget was spent."""

    def may_send(self) -> bool:
        self.refused += self.reason is not None
        return self.reason is None

    def record(self, usage: Usage | None) -> None:
        self.spent = add(self.spent, usage)
        self.reason = self.reason or over_budget(self.budget, self.spent)
