"""Prometheus metrics: named once from the EvalResult fields, equal to the summary."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from proctor.core.metrics import aggregate
from proctor.core.model import EvalResult, Outcome, RunResult
from proctor.k8s.evaluation.figures import (
    COUNTS,
    ESTIMATES,
    TOP_TASKS,
    Reliability,
    metric_name,
    reliability,
)
from proctor.k8s.evaluation.metrics import Metrics, figure_metric_name
from support.paths import ROOT


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple], float]:
    samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def test_gauges_equal_the_summary_and_names_follow_conventions():
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    results = [RunResult(item_id=f"{i}" * 32, instance_id=f"t{i}", outcome=o)
               for i, o in enumerate([Outcome.RESOLVED, Outcome.NO_OP, Outcome.ERROR])]
    summary = aggregate(results, {})
    metrics.publish("ns", "ev", "agent", summary, {"done": 3, "running": 0})
    samples = scrape(registry)
    labels = (("agent", "agent"), ("evaluation", "ev"), ("namespace", "ns"))
    for field in EvalResult.model_fields:
        name = figure_metric_name(field)
        assert name.startswith("proctor_")
        assert samples[(name, labels)] == getattr(summary.results, field)
    assert samples[("proctor_items", (*labels[:2], ("namespace", "ns"), ("state", "done")))] == 3
    assert samples[("proctor_outcome_tasks", (*labels[:2], ("namespace", "ns"),
                                              ("outcome", "resolved")))] == 1
    metrics.retries.labels("ns", "ev", "agent").inc()
    assert ("proctor_retries_total", labels) in scrape(registry)


def test_forgetting_an_evaluation_drops_its_series():
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.forget("ns", "never-published", "a")  # no error
    summary = aggregate([], {})
    metrics.publish("ns", "ev", "a", summary, {})
    metrics.forget("ns", "ev", "a")
    assert not [k for k in scrape(registry) if ("evaluation", "ev") in k[1]]


def _results(tasks: int, variants: int, repeats: int) -> list[RunResult]:
    return [RunResult(item_id=f"{t:08x}{v:08x}{k:016x}", instance_id=f"t{t}", repeat=k,
                      variant_id="original" if v == 0 else f"v{v}",
                      outcome=Outcome.RESOLVED if (t * 7 + v * 3 + k) % 4 else Outcome.NO_OP)
            for t in range(tasks) for v in range(variants) for k in range(repeats)]


def test_reliability_gauges_equal_the_status_figures_and_absent_ones_have_no_series():
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    found = _results(12, 1, 3)
    figures = reliability("a", found)
    metrics.publish("ns", "ev", "a", aggregate(found, {}), {}, figures)
    samples = scrape(registry)
    labels = (("agent", "a"), ("evaluation", "ev"), ("namespace", "ns"))
    for bound in ("value", "low", "high"):
        key = ("proctor_reliability_pass_hat_k", tuple(sorted((*labels, ("bound", bound)))))
        assert samples[key] == getattr(figures.pass_hat_k, bound)
    value = tuple(sorted((*labels, ("bound", "value"))))
    assert samples[("proctor_reliability_c_out", value)] == figures.c_out.value
    assert samples[("proctor_reliability_repeats", labels)] == 3
    # Repeats only: no prompt figure, and no sensitive task.
    names = {name for name, _ in samples}
    assert not names & {"proctor_reliability_s_prompt", "proctor_reliability_r_prompt",
                        "proctor_reliability_s_prompt_per_run",
                        "proctor_reliability_task_variance"}
    # One repeat so far (a new Evaluation of the same name): C_out's series go.
    metrics.publish("ns", "ev", "a", aggregate(found, {}), {},
                    reliability("a", _results(12, 1, 1)))
    names = {name for name, _ in scrape(registry)}
    assert "proctor_reliability_c_out" not in names and "proctor_reliability_tasks" in names


def test_the_sensitive_tasks_series_follow_the_top_tasks():
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    for tasks in (12, 3):
        figures = reliability("a", _results(tasks, 3, 2))
        metrics.publish("ns", "ev", "a", aggregate([], {}), {}, figures)
        shown = {dict(labels)["task"]: value for (name, labels), value in scrape(registry).items()
                 if name == "proctor_reliability_task_variance"}
        assert shown == {t.task: t.variance for t in figures.most_sensitive_tasks}
        assert 0 < len(shown) <= TOP_TASKS
    metrics.forget("ns", "ev", "a")
    assert not [k for k in scrape(registry) if k[0].startswith("proctor_reliability")]


def test_every_reliability_field_is_a_metric_with_its_description_as_help():
    registry = CollectorRegistry()
    Metrics(registry)
    helps = {family.name: family.documentation for family in registry.collect()}
    for field in (*COUNTS, *ESTIMATES):
        assert helps[metric_name(field)] == Reliability.model_fields[field].description


def test_the_metrics_reference_matches_the_exporter():
    """docs/metrics.md (scripts/gen_docs.py writes it; tests/e2e/test_docs.py checks every
    metric) gives each reliability figure the exporter's help."""
    registry = CollectorRegistry()
    Metrics(registry)
    exported = {f.name: f.documentation for f in registry.collect()
                if f.name.startswith("proctor_reliability_")}
    reference = (ROOT / "docs" / "metrics.md").read_text()
    documented = dict(re.findall(r"^\| `(proctor_reliability_\w+)` \| \w+ \| [^|]* \| (.+) \|$",
                                 reference, re.M))
    assert documented == exported
