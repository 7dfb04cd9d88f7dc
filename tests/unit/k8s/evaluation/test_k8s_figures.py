"""The reliability figures of an Evaluation's status: `proctor analyze`'s, bounded, in the CRD."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from proctor.analysis.figures import DECLARED
from proctor.analysis.load import load_agent
from proctor.analysis.reliability import agent_figures
from proctor.core.model import ErrorKind, Outcome, RunResult, WorkItem
from proctor.formats.manifest import openapi_schema, parse_resource
from proctor.k8s.evaluation.act import Tracked
from proctor.k8s.evaluation.figures import ESTIMATES, FIGURES, TOP_TASKS, reliability
from proctor.k8s.evaluation.reconcile import ItemView, build_status


def results(tasks: int, variants: int = 1, repeats: int = 3, seed: int = 7,
            errors: int = 0) -> list[RunResult]:
    """Each task resolves with its own chance; the first ``errors`` items are in error."""
    rng = random.Random(seed)
    found = []
    for task in range(tasks):
        chance = rng.random()
        for variant in range(variants):
            for repeat in range(repeats):
                outcome = Outcome.RESOLVED if rng.random() < chance else Outcome.NO_OP
                if len(found) < errors:
                    outcome = Outcome.ERROR
                found.append(RunResult(
                    item_id=f"{task:08x}{variant:08x}{repeat:016x}",
                    instance_id=f"org__repo-{task}", repeat=repeat,
                    variant_id="original" if variant == 0 else f"v{variant}", outcome=outcome,
                    error_kind=ErrorKind.INFRA if outcome == Outcome.ERROR else None))
    return found


def status_with(found: list[RunResult]) -> dict[str, Any]:
    body = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
            "metadata": {"name": "ev"}, "spec": {"agentRef": {"name": "a"}}}
    views = [ItemView(WorkItem(id=r.item_id, instance_id=r.instance_id), result=r)
             for r in found]
    status = build_status(parse_resource(body), "a", views, found, [], generation=1,
                          fingerprint="f", reliability=reliability("a", found))
    parse_resource(body | {"status": status})  # the CRD's schema accepts it
    return status


def analyzed(tmp_path: Path, found: list[RunResult]):
    """What `proctor analyze` computes from the same results, pulled into a folder."""
    (tmp_path / "results.jsonl").write_text(
        "".join(r.model_dump_json() + "\n" for r in found))
    run = load_agent(tmp_path)
    return agent_figures(run.agent, run.scores, errors=run.errors)[0]


def close(shown: Mapping[str, float], value: float, interval: tuple[float, float]) -> bool:
    return (math.isclose(shown["value"], value, abs_tol=1e-4)
            and math.isclose(shown["low"], interval[0], abs_tol=1e-4)
            and math.isclose(shown["high"], interval[1], abs_tol=1e-4))


def test_a_repeats_run_shows_analyzes_figures_and_their_intervals(tmp_path: Path) -> None:
    found = results(40, repeats=3, errors=2)
    shown = status_with(found)["reliability"]
    fig = analyzed(tmp_path, found)
    assert (shown["tasks"], shown["variants"], shown["repeats"]) == (40, 1, 3)
    assert close(shown["cOut"], fig.C_out, fig.intervals["C_out"])
    assert close(shown["passAtK"], fig.pass_at_k[3], fig.intervals["pass@3"])
    assert close(shown["passHatK"], fig.pass_hat_k[3], fig.intervals["pass^3"])
    assert 0 < shown["passHatK"]["value"] < shown["passAtK"]["value"] < 1
    # No variants: the prompt figures are absent, not 0.
    assert not {"sPrompt", "sPromptPerRun", "rPrompt", "mostSensitiveTasks"} & set(shown)


def test_one_repeat_leaves_out_what_needs_two() -> None:
    shown = status_with(results(10, repeats=1))["reliability"]
    assert shown == {"tasks": 10, "variants": 1, "repeats": 1}


def test_no_status_figures_before_a_scored_result() -> None:
    assert "reliability" not in status_with([])
    assert "reliability" not in status_with(results(2, repeats=1, errors=2))


def test_variants_give_the_prompt_figures_and_a_few_sensitive_tasks(tmp_path: Path) -> None:
    found = results(30, variants=4, repeats=2)
    shown = status_with(found)["reliability"]
    fig = analyzed(tmp_path, found)
    assert close(shown["sPrompt"], fig.S_prompt, fig.intervals["S_prompt"])
    assert close(shown["sPromptPerRun"], fig.S_prompt_per_run, fig.intervals["S_prompt_per_run"])
    assert math.isclose(shown["rPrompt"]["value"], fig.R_prompt, abs_tol=1e-4)
    tasks = shown["mostSensitiveTasks"]
    assert 0 < len(tasks) <= TOP_TASKS
    variances = [t["variance"] for t in tasks]
    assert variances == sorted(variances, reverse=True) and variances[0] > 0


def test_the_status_stays_small_whatever_the_number_of_tasks() -> None:
    def size(n: int) -> int:
        return len(json.dumps(status_with(results(n, variants=3, repeats=3))
                              ["reliability"]).encode())
    assert size(500) < 1024
    assert size(500) - size(20) < 32  # a fixed set of figures, never one per task


def _keys_outside(value: Any, schema: Mapping[str, Any], path: str) -> list[str]:
    if isinstance(value, dict):
        props = schema.get("properties", {})
        return [f"{path}.{k}" for k in value if k not in props] + [
            p for k, v in value.items() if k in props
            for p in _keys_outside(v, props[k], f"{path}.{k}")]
    if isinstance(value, list):
        return [p for v in value for p in _keys_outside(v, schema.get("items", {}), path)]
    return []


@pytest.mark.parametrize(("variants", "repeats"), [(1, 1), (1, 3), (4, 2)])
def test_every_reliability_key_is_in_the_crd(variants: int, repeats: int) -> None:
    # The status keeps unknown fields (kopf's), so the CRD alone would not catch a new one.
    shown = status_with(results(12, variants=variants, repeats=repeats))["reliability"]
    schema = openapi_schema("Evaluation")["properties"]["status"]["properties"]
    assert _keys_outside(shown, schema["reliability"], "reliability") == []


def test_figures_are_computed_again_only_when_the_results_change() -> None:
    tracked = Tracked(uid="u", name="ev", agent_label="a")
    found = results(20, repeats=2)
    first = tracked.reliability(found)
    assert tracked.reliability(list(reversed(found))) is first  # the same results: kept
    more = [*found, *results(21, repeats=2)[-2:]]
    assert tracked.reliability(more).tasks == 21


def test_every_estimate_of_the_status_is_read_from_analyzes_figures() -> None:
    # A published figure is a field of Reliability (its name, help and type) and an entry
    # of the declaration with that `status` (what it needs, its estimator and interval):
    # neither without the other.
    published = [figure.status for figure in DECLARED if figure.status]
    assert sorted(published) == sorted(ESTIMATES)
    assert len(set(published)) == len(published)
    assert FIGURES.keys() == set(published)
