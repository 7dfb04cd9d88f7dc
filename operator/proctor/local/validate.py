"""Validating a dataset: gold and empty predictions, so broken and flaky tasks show.

A sound task has: with the gold patch, every F2P and every P2P test passes; with no
patch, every F2P test fails and every P2P test passes. A task that breaks either
rule is *broken*; one whose per-test results differ between identical runs is
*flaky*. Both would blur every agent's score, so they are worth finding first.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from proctor.core.model import Outcome, RunResult, Summary
from proctor.core.spec import Evaluation, PredictionsSpec
from proctor.local.engine import run_evaluation
from proctor.prepare import load_selection
from proctor.results import ResultsFolder
from proctor.runner.workdir import write_json
from proctor.sandboxes.choose import SandboxOptions


@dataclass
class Validation:
    """What a gold-and-empty validation found."""

    summaries: dict[str, Summary] = field(default_factory=dict)
    broken: dict[str, list[str]] = field(default_factory=dict)
    flaky: dict[str, list[str]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {"broken": self.broken, "flaky": self.flaky,
                "summaries": {k: s.model_dump(mode="json") for k, s in self.summaries.items()}}


def gold_problems(r: RunResult) -> list[str]:
    """Why a gold-patch result shows a broken task (empty if it does not)."""
    if r.outcome == Outcome.RESOLVED:
        return []
    failing = r.FAIL_TO_PASS.failure + r.PASS_TO_PASS.failure
    detail = f": {', '.join(failing[:5])} fail" if failing else ""
    return [f"gold patch gives {r.outcome.value}{detail}"
            + (f" ({r.error_message})" if r.error_message and not failing else "")]


def empty_problems(r: RunResult) -> list[str]:
    """Why a no-patch result shows a broken task (empty if it does not)."""
    if not r.tests_ran:
        return [f"without a patch the tests did not run: {r.error_message}"]
    problems = [f"F2P test passes without the fix: {t}" for t in r.FAIL_TO_PASS.success]
    problems += [f"P2P test fails without a patch: {t}" for t in r.PASS_TO_PASS.failure]
    return problems


def _signature(r: RunResult) -> tuple[object, ...]:
    return (r.outcome, tuple(sorted(r.FAIL_TO_PASS.success)),
            tuple(sorted(r.PASS_TO_PASS.success)))


def find_problems(runs: dict[str, list[list[RunResult]]]
                  ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Broken and flaky tasks from the results of each source's repeated runs."""
    broken: dict[str, list[str]] = defaultdict(list)
    flaky: dict[str, list[str]] = defaultdict(list)
    check = {"gold": gold_problems, "empty": empty_problems}
    for source, repeats in runs.items():
        signatures: dict[str, set[tuple[object, ...]]] = defaultdict(set)
        for results in repeats:
            for r in results:
                signatures[r.instance_id].add(_signature(r))
                for problem in check[source](r):
                    if problem not in broken[r.instance_id]:
                        broken[r.instance_id].append(problem)
        for task, seen in signatures.items():
            if len(seen) > 1:
                flaky[task].append(f"{source}: {len(seen)} different results in "
                                   f"{len(repeats)} runs")
    return dict(broken), dict(flaky)


def validate(evaluation: Evaluation, output_dir: Path, runs: int = 1,
             progress: bool = True, sandbox: SandboxOptions | None = None) -> Validation:
    """Run gold and empty predictions `runs` times each and report broken/flaky tasks."""
    found = Validation()
    # A reused folder may hold rows a smaller selection now leaves out: judge only these.
    selected = set(load_selection(evaluation).by_id)
    results: dict[str, list[list[RunResult]]] = {"gold": [], "empty": []}
    for source in results:
        for n in range(runs):
            spec = evaluation.spec.model_copy(
                update={"predictions": PredictionsSpec(source=source), "repeats": 1})
            ev = evaluation.model_copy(update={"spec": spec, "name": f"{evaluation.name}-{source}"})
            label = source if runs == 1 else f"{source}-{n + 1}"
            found.summaries[label] = run_evaluation(ev, output_dir / label, progress,
                                                    sandbox=sandbox)
            results[source].append([r for r in ResultsFolder(output_dir / label).load()
                                    if r.instance_id in selected])
    found.broken, found.flaky = find_problems(results)
    write_json(output_dir / "validation.json", found.as_dict())
    return found
