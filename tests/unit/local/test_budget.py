"""Budgets: past a total cap no new task is sent, the run stops (exit 4) with what
finished kept, and the summary says the budget ended it."""

from __future__ import annotations

import json

from proctor.agents.server import start_reference_agent
from proctor.cli.main import main
from proctor.core.exits import ExitCode
from proctor.core.model import Outcome, Usage
from proctor.core.spec import BudgetSpec
from proctor.local.budget import BudgetGuard, combined, over_budget
from proctor.results import ResultsFolder


def test_the_smaller_cap_applies_and_a_cap_reached_is_named():
    both = combined(BudgetSpec(max_tokens=500, item_seconds=60),
                    BudgetSpec(max_tokens=900, max_cost_usd=2.0))
    assert both == BudgetSpec(max_tokens=500, max_cost_usd=2.0, item_seconds=60)
    assert combined(None, BudgetSpec()) is None
    assert over_budget(both, Usage(total_tokens=499, cost_usd=1.0)) is None
    assert "token budget of 500" in over_budget(both, Usage(total_tokens=500))
    assert "cost budget of $2" in over_budget(both, Usage(total_tokens=1, cost_usd=2.5))


def test_the_guard_counts_what_was_spent_and_refuses_after_the_cap():
    guard = BudgetGuard(BudgetSpec(max_tokens=100))
    guard.record(Usage(total_tokens=60))
    guard.record(None)  # an agent that reports nothing spends nothing we can see
    assert guard.may_send()
    guard.record(Usage(total_tokens=60))
    assert not guard.may_send() and not guard.may_send() and guard.refused == 2


def manifests(endpoint: str, max_tokens: int) -> str:
    return f"""apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {{name: ev}}
spec:
  agentRef: {{name: the-agent}}
  dataset: {{name: proctor-demo, maxRows: -1}}
  maxConcurrentRows: 1
  budget: {{maxTokens: {max_tokens}}}
---
apiVersion: proctor.dev/v1alpha1
kind: AgentUnderTest
metadata: {{name: the-agent}}
spec:
  endpoint: {endpoint}
  budget: {{itemSeconds: 60}}
"""


def test_a_token_budget_smaller_than_the_demos_need_stops_the_run(tmp_path, capsys):
    out, files = tmp_path / "o", tmp_path / "ev.yaml"
    with start_reference_agent("oracle") as agent:
        files.write_text(manifests(agent.url, 1000))
        run = ["run", "-q", "-f", str(files), "--output-dir", str(out), "--sandbox", "process"]
        assert main(run) == ExitCode.BUDGET_SPENT
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("proctor: stopped: the token budget of 1,000 is spent")
        done = ResultsFolder(out).load()
        assert 0 < len(done) < 10 and {r.outcome for r in done} == {Outcome.RESOLVED}
        spent = sum(r.usage.total_tokens for r in done)
        assert spent >= 1000 > spent - done[-1].usage.total_tokens  # stopped at the cap
        summary = json.loads((out / "summary.json").read_text())
        assert summary["stopped_by"].startswith("budget: the token budget of 1,000")
        assert summary["partial"] and summary["items"] == len(done)
        assert "Stopped by the budget" in (out / "report.md").read_text()

        files.write_text(manifests(agent.url, 1_000_000))  # a budget may be raised
        assert main(run) == 0
    results = ResultsFolder(out).load()
    assert len(results) == 10 and {r.outcome for r in results} == {Outcome.RESOLVED}
    assert json.loads((out / "summary.json").read_text())["stopped_by"] is None
