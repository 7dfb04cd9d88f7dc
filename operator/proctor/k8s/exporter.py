"""Prometheus metrics of the operator: defined once, here, and set from each reconcile.

Labels are bounded: evaluation, namespace, agent, and small enums (state, outcome).
Never an instance id. The leaderboard figures are gauges named after the EvalResult
fields (`resolved_pct` -> `proctor_resolved_ratio`), so Grafana plots exactly what
summary.json holds.
"""

from __future__ import annotations

import contextlib

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from proctor.core.model import EvalResult, Outcome, Summary

EVAL_LABELS = ("namespace", "evaluation", "agent")
STATES = ("waiting", "pending", "running", "done")


def figure_metric_name(field: str) -> str:
    """`resolved_pct` -> `proctor_resolved_ratio`; `total_instances` -> `proctor_instances`."""
    if field == "total_instances":
        return "proctor_instances"
    return "proctor_" + field.removesuffix("_pct") + "_ratio"


class Metrics:
    """Every metric Proctor exports, in one registry."""

    def __init__(self, registry: CollectorRegistry = REGISTRY):
        self.figures = {
            field: Gauge(figure_metric_name(field), info.description or field, EVAL_LABELS,
                         registry=registry)
            for field, info in EvalResult.model_fields.items()}
        self.items = Gauge("proctor_items", "Work items by state", (*EVAL_LABELS, "state"),
                           registry=registry)
        self.outcomes = Gauge("proctor_outcome_tasks", "Tasks by outcome (original prompt, "
                              "averaged over repeats)", (*EVAL_LABELS, "outcome"),
                              registry=registry)
        self.tampered = Gauge("proctor_tampered_ratio", "Share of tasks whose patch tried "
                              "to change the test machinery (undone before the tests)",
                              EVAL_LABELS, registry=registry)
        self.job_seconds = Histogram(
            "proctor_job_duration_seconds", "Wall time of a work item's Job, pull to grade",
            ("namespace", "agent"), registry=registry,
            buckets=(5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200))
        self.retries = Counter("proctor_retries", "Attempts made again after an "
                               "infrastructure failure", EVAL_LABELS, registry=registry)
        self.reconcile_seconds = Histogram("proctor_reconcile_duration_seconds",
                                           "Time of one reconcile pass", registry=registry)
        self.reconcile_errors = Counter("proctor_reconcile_errors",
                                        "Reconcile passes that failed", registry=registry)

    def publish(self, namespace: str, evaluation: str, agent: str, summary: Summary,
                states: dict[str, int]) -> None:
        """Set the gauges of one evaluation from its summary and item counts."""
        labels = (namespace, evaluation, agent)
        for field, gauge in self.figures.items():
            gauge.labels(*labels).set(getattr(summary.results, field))
        self.tampered.labels(*labels).set(summary.tampered_pct)
        for state in STATES:
            self.items.labels(*labels, state).set(states.get(state, 0))
        for outcome in Outcome:
            self.outcomes.labels(*labels, outcome.value).set(
                summary.outcome_counts.get(outcome.value, 0))

    def forget(self, namespace: str, evaluation: str, agent: str) -> None:
        """Drop a deleted evaluation's series, so gauges do not outlive it."""
        labels = (namespace, evaluation, agent)
        series = [(g, labels) for g in (*self.figures.values(), self.tampered)]
        series += [(self.items, (*labels, s)) for s in STATES]
        series += [(self.outcomes, (*labels, o.value)) for o in Outcome]
        for metric, values in series:
            with contextlib.suppress(KeyError):  # never published
                metric.remove(*values)
