"""Prometheus metrics: named once from the EvalResult fields, equal to the summary."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from proctor.core.metrics import aggregate
from proctor.core.model import EvalResult, Outcome, RunResult
from proctor.k8s.exporter import Metrics, figure_metric_name


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
