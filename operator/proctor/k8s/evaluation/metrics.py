"""Prometheus metrics of the operator: defined once, here, and set from each reconcile.

Labels are bounded: evaluation, namespace, agent, and small enums (state, outcome).
Never an instance id. The leaderboard figures are gauges named after the EvalResult
fields (`resolved_pct` -> `proctor_resolved_ratio`), so Grafana plots exactly what
summary.json holds. The reliability figures are gauges named after the `Reliability`
fields (`s_prompt` -> `proctor_reliability_s_prompt{bound="value"|"low"|"high"}`), so
they are what the status's `reliability` holds; a figure the status leaves out has no
series. The most prompt-sensitive tasks carry a task label: at most TOP_TASKS series per
evaluation, those of tasks no longer among them removed.
"""

from __future__ import annotations

import contextlib

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from proctor.core.model import EvalResult, Outcome, Summary
from proctor.k8s.evaluation.figures import (
    COUNTS,
    ESTIMATES,
    Reliability,
    SensitiveTask,
    metric_name,
)

EVAL_LABELS = ("namespace", "evaluation", "agent")
STATES = ("waiting", "queued", "pending", "running", "done")
BOUNDS = ("value", "low", "high")
"""A reliability figure and its 95% interval's ends, as the `bound` label."""


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
        self.reliability = {
            field: Gauge(metric_name(field), Reliability.model_fields[field].description or field,
                         (*EVAL_LABELS, "bound") if field in ESTIMATES else EVAL_LABELS,
                         registry=registry)
            for field in (*COUNTS, *ESTIMATES)}
        self.sensitive = Gauge(metric_name("variance"),
                               (SensitiveTask.model_fields["variance"].description or "variance")
                               + "; the "
                               "most prompt-sensitive tasks only", (*EVAL_LABELS, "task"),
                               registry=registry)
        self._sensitive_shown: dict[tuple[str, ...], set[str]] = {}
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
                states: dict[str, int], reliability: Reliability | None = None) -> None:
        """Set the gauges of one evaluation from its summary, item counts and reliability
        figures (None: none yet)."""
        labels = (namespace, evaluation, agent)
        self._publish_reliability(labels, reliability)
        for field, gauge in self.figures.items():
            gauge.labels(*labels).set(getattr(summary.results, field))
        self.tampered.labels(*labels).set(summary.tampered_pct)
        for state in STATES:
            self.items.labels(*labels, state).set(states.get(state, 0))
        for outcome in Outcome:
            self.outcomes.labels(*labels, outcome.value).set(
                summary.outcome_counts.get(outcome.value, 0))

    def _publish_reliability(self, labels: tuple[str, ...],
                             figures: Reliability | None) -> None:
        """Set the figures there are, and remove the series of those there are not."""
        for field, gauge in self.reliability.items():
            value = None if figures is None else getattr(figures, field)
            if field in COUNTS:
                _set_or_remove(gauge, labels, value)
                continue
            for bound in BOUNDS:
                _set_or_remove(gauge, (*labels, bound),
                               None if value is None else getattr(value, bound))
        tasks = {t.task: t.variance for t in (figures.most_sensitive_tasks if figures else ())}
        for gone in self._sensitive_shown.get(labels, set()) - set(tasks):
            _set_or_remove(self.sensitive, (*labels, gone), None)
        for task, variance in tasks.items():
            self.sensitive.labels(*labels, task).set(variance)
        self._sensitive_shown[labels] = set(tasks)

    def forget(self, namespace: str, evaluation: str, agent: str) -> None:
        """Drop a deleted evaluation's series, so gauges do not outlive it."""
        labels = (namespace, evaluation, agent)
        self._publish_reliability(labels, None)
        self._sensitive_shown.pop(labels, None)
        series: list[tuple[Gauge, tuple[str, ...]]] = [
            (g, labels) for g in (*self.figures.values(), self.tampered)]
        series += [(self.items, (*labels, s)) for s in STATES]
        series += [(self.outcomes, (*labels, o.value)) for o in Outcome]
        for metric, values in series:
            with contextlib.suppress(KeyError):  # never published
                metric.remove(*values)


def _set_or_remove(gauge: Gauge, labels: tuple[str, ...], value: float | None) -> None:
    """A figure that is absent has no series (a 0 would read as a figure)."""
    if value is not None:
        gauge.labels(*labels).set(value)
    else:
        with contextlib.suppress(KeyError):  # never published
            gauge.remove(*labels)
