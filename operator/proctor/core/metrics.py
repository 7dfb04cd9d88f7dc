"""Aggregation: run results -> the leaderboard figures (pure).

The denominators, pinned once:

* The headline counts original-prompt items only. `total_instances` is the
  number of tasks; with repeats, each task's outcome shares are averaged over its
  repeats, so every task weighs the same. Every task counts in every
  percentage's denominator, errors included.
* Fail-to-Pass / Pass-to-Pass Passed are aggregate rates over all tests of the
  items whose tests ran. Tests of items whose tests did not run (no patch, patch
  not applied, errors) are left out of both sides, and `tests_left_out` says how
  many were.
* Fractions from 0 to 1 under Agentbeats' EvalResult names.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from proctor.core.model import (
    ORIGINAL_VARIANT,
    EvalResult,
    Instance,
    Outcome,
    RunResult,
    Summary,
    Usage,
)

_PCT_FIELD = {o: f"{o.value}_pct" for o in Outcome}


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


def outcome_shares(results: Iterable[RunResult]) -> dict[str, dict[Outcome, float]]:
    """Per task, the share of its repeats that ended in each outcome."""
    by_task: dict[str, list[Outcome]] = defaultdict(list)
    for r in results:
        by_task[r.instance_id].append(r.outcome)
    return {task: {o: outs.count(o) / len(outs) for o in Outcome}
            for task, outs in by_task.items()}


def eval_result(results: Sequence[RunResult]) -> EvalResult:
    """The ten figures over a set of original-prompt results."""
    shares = outcome_shares(results)
    n = len(shares)
    pct = {_PCT_FIELD[o]: _ratio(sum(s[o] for s in shares.values()), n) for o in Outcome}
    ran = [r for r in results if r.tests_ran]
    f2p = _ratio(sum(len(r.FAIL_TO_PASS.success) for r in ran),
                 sum(r.FAIL_TO_PASS.total for r in ran))
    p2p = _ratio(sum(len(r.PASS_TO_PASS.success) for r in ran),
                 sum(r.PASS_TO_PASS.total for r in ran))
    return EvalResult(total_instances=n, fail_to_pass_passed_pct=f2p,
                      pass_to_pass_passed_pct=p2p, **pct)


def _tests_left_out(results: Iterable[RunResult],
                    instances: Mapping[str, Instance]) -> dict[str, int]:
    left = {"FAIL_TO_PASS": 0, "PASS_TO_PASS": 0}
    for r in results:
        inst = instances.get(r.instance_id)
        if not r.tests_ran and inst is not None:
            left["FAIL_TO_PASS"] += len(inst.FAIL_TO_PASS)
            left["PASS_TO_PASS"] += len(inst.PASS_TO_PASS)
    return left


def _usage(results: Iterable[RunResult]) -> Usage:
    total: dict[str, float] = {}
    for r in results:
        for key, value in (r.usage.model_dump() if r.usage else {}).items():
            if value is not None:
                total[key] = total.get(key, 0) + value
    return Usage(**total)


def spread(values: Iterable[float | None]) -> dict[str, float]:
    """mean, median, p90 (nearest rank) and max of the values given; {} for none."""
    times = sorted(v for v in values if v is not None)
    if not times:
        return {}
    p90 = times[max(0, math.ceil(0.9 * len(times)) - 1)]
    return {"mean": statistics.fmean(times), "median": statistics.median(times),
            "p90": p90, "max": times[-1]}


def _latency(results: Iterable[RunResult]) -> dict[str, float]:
    return spread(r.timings.total_seconds for r in results)


def wall_seconds(results: Iterable[RunResult]) -> float | None:
    """From the first item's start to the last item's end, from their timestamps."""
    starts, ends = [], []
    for r in results:
        if r.timings.started_at and r.timings.finished_at:
            starts.append(datetime.fromisoformat(r.timings.started_at))
            ends.append(datetime.fromisoformat(r.timings.finished_at))
    return (max(ends) - min(starts)).total_seconds() if starts else None


def tampered_share(results: Iterable[RunResult]) -> float:
    """Share of tasks whose patch tampered with the test machinery, with the outcomes'
    denominator: every task counts once, its repeats averaged."""
    by_task: dict[str, list[bool]] = defaultdict(list)
    for r in results:
        by_task[r.instance_id].append(r.tampered)
    return _ratio(sum(sum(t) / len(t) for t in by_task.values()), len(by_task))


def aggregate(results: Sequence[RunResult], instances: Mapping[str, Instance], *,
              evaluation: str = "", agent: str = "", green_agent_model: str | None = None,
              items_planned: int = 0) -> Summary:
    """summary.json from every result of an evaluation."""
    original = [r for r in results if r.variant_id == ORIGINAL_VARIANT]
    by_repo: dict[str, list[RunResult]] = defaultdict(list)
    for r in original:
        by_repo[r.repo].append(r)
    counts = Counter(r.outcome.value for r in original)
    errors: dict[str, int] = defaultdict(int)
    for r in results:
        if r.error_kind:
            errors[r.error_kind.value] += 1
    return Summary(
        evaluation=evaluation, agent=agent, green_agent_model=green_agent_model,
        results=eval_result(original),
        per_repo={repo: eval_result(rs) for repo, rs in sorted(by_repo.items())},
        outcome_counts={o.value: counts[o.value] for o in Outcome},
        items=len(results), items_planned=items_planned or len(results),
        partial=len(results) < items_planned,
        tests_left_out=_tests_left_out(original, instances), error_kinds=dict(errors),
        tampered_pct=tampered_share(original), tampered_items=sum(r.tampered for r in results),
        usage=_usage(results), latency_seconds=_latency(results),
        usage_reported=sum(1 for r in results if r.usage is not None),
        agent_latency_seconds=spread(r.timings.solve_seconds for r in results),
        wall_seconds=wall_seconds(results))
