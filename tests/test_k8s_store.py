"""proctor.k8s.store: one item's result kept in a ConfigMap, and read back."""

from __future__ import annotations

from proctor.core.model import Outcome, RunResult
from proctor.formats.manifest import parse_resource
from proctor.k8s.store import read_result, result_configmap

EVALUATION = parse_resource({
    "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
    "metadata": {"name": "ev", "namespace": "ns"},
    "spec": {"dataset": {"name": "proctor-demo"}, "predictions": {"source": "gold"}}})


def test_a_kept_result_reads_back_the_same() -> None:
    result = RunResult(item_id="a" * 32, instance_id="t-1", outcome=Outcome.RESOLVED)
    configmap = result_configmap(EVALUATION, result, {"patch.diff.gz": "H4sI"})
    assert read_result(configmap) == result
    assert configmap["metadata"]["labels"]["proctor.dev/outcome"] == "resolved"


def test_a_configmap_without_a_readable_result_keeps_none() -> None:
    # The operator's index of kept results must not stall on one bad object.
    assert read_result({"data": {}}) is None
    assert read_result({"data": {"result.json": "{not json"}}) is None
    assert read_result({"data": {"result.json": '{"item_id": 1}'}}) is None
