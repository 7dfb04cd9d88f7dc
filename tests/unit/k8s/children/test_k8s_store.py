"""proctor.k8s.children.store: one item's result kept in a ConfigMap (or, with an object store, its
record), and read back; when a store is used, and the condition that says it failed."""

from __future__ import annotations

import json

import pytest

from proctor.core.model import Outcome, PassFail, PatchInfo, RunResult
from proctor.core.spec import Evaluation
from proctor.formats.manifest import parse_resource
from proctor.k8s.children.store import (
    StoreConfig,
    item_files,
    keep_mode,
    newer_schema,
    read_record,
    read_result,
    record_configmap,
    result_configmap,
    store_of,
)
from proctor.k8s.evaluation.reconcile import Decision, StoreState, conditions_for, store_condition
from proctor.k8s.machinery.conditions import find_condition
from proctor.runner.artifacts import pack
from proctor.store.location import StoreError, parse_s3_url
from proctor.store.record import item_record

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


# --- with an object store: the record, where it goes, and when it is used ----------------

STORE_URL = "s3://results/evals"


def evaluation(store: dict | None = None) -> Evaluation:
    spec = {"dataset": {"name": "proctor-demo"}, "predictions": {"source": "gold"}}
    if store is not None:
        spec["results"] = {"store": store}
    return parse_resource({"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                           "metadata": {"name": "ev", "namespace": "ns"}, "spec": spec})


def graded() -> RunResult:
    return RunResult(
        item_id="b" * 32, instance_id="django__django-11099", repo="django/django",
        outcome=Outcome.PARTIALLY_RESOLVED, tests_ran=True, test_exit_code=1,
        FAIL_TO_PASS=PassFail(success=["test_a"], failure=["test_b"]),
        PASS_TO_PASS=PassFail(success=[f"test_p{i}" for i in range(300)]),
        patch=PatchInfo(present=True, sha256="c" * 64, applied=True,
                        apply_method="git apply -v"))


ARTIFACTS = {"patch.diff.gz": pack(b"--- a/x\n+++ b/x\n"),
             "test_output.txt.gz": pack(b"test_a ... ok\n" * 5000)}


def test_the_store_of_the_spec_wins_over_the_operators_default() -> None:
    env = {"PROCTOR_RESULTS_STORE_ENDPOINT": "http://default:9000",
           "PROCTOR_RESULTS_STORE_URL": "s3://default/x"}
    own = store_of(evaluation({"url": STORE_URL, "endpoint": "http://own:9000"}), env)
    assert own == StoreConfig(run=parse_s3_url("s3://results/evals/ns/ev"),
                              endpoint="http://own:9000")
    assert store_of(evaluation({"url": STORE_URL}), env).endpoint == "http://default:9000"
    default = store_of(evaluation(), env)
    assert default is not None and str(default.run) == "s3://default/x/ns/ev"
    assert store_of(evaluation(), {}) is None  # none: ConfigMaps, as before
    with pytest.raises(StoreError, match="not a bucket name"):
        store_of(evaluation(), {"PROCTOR_RESULTS_STORE_URL": "s3://NO/x"})


def test_a_result_is_kept_as_a_record_only_once_its_files_are_uploaded() -> None:
    store = store_of(evaluation({"url": STORE_URL}), {})
    assert keep_mode(store, None) == "record"
    assert keep_mode(store, "cannot reach the object store") == "configmap"  # not lost
    assert keep_mode(None, None) == "configmap"


def test_a_record_configmap_reads_back_what_status_and_metrics_need() -> None:
    ev, result = evaluation({"url": STORE_URL}), graded()
    store = store_of(ev, {})
    assert store is not None
    files = item_files(result, ARTIFACTS)
    assert set(files) == {"patch.diff", "test_output.txt", "result.json", "report.json"}
    kept = record_configmap(ev, result, item_record(result, store.run, files))
    full = result_configmap(ev, result, ARTIFACTS)
    assert kept["metadata"] == full["metadata"]  # same name and labels: found alike
    assert "binaryData" not in kept and len(json.dumps(kept)) <= 2048
    back = read_result(kept)
    assert back is not None
    for field in ("item_id", "instance_id", "variant_id", "repeat", "repo", "outcome",
                  "tests_ran", "test_exit_code", "attempts"):
        assert getattr(back, field) == getattr(result, field), field
    assert (len(back.FAIL_TO_PASS.success), back.FAIL_TO_PASS.total) == (1, 2)
    assert (len(back.PASS_TO_PASS.success), back.PASS_TO_PASS.total) == (300, 300)
    assert read_record(kept)["objects"]["result.json"]["bytes"] == len(files["result.json"])
    assert read_record(full) is None


def test_a_record_of_a_newer_operator_is_unreadable_not_absent() -> None:
    ev, result = evaluation({"url": STORE_URL}), graded()
    record = item_record(result, parse_s3_url(STORE_URL), {})
    assert newer_schema(record_configmap(ev, result, record)) is None
    assert newer_schema(record_configmap(ev, result, {**record, "v": 99})) is not None
    for junk in ('{"v": 1}', "[]", '{"bucket": 1, "prefix": "p", "item": "i", "objects": {}}'):
        assert read_result({"data": {"record.json": junk}}) is None  # no stall on junk


def test_store_unavailable_names_the_error_and_clears_once_an_upload_succeeds() -> None:
    down = StoreState(url="s3://results/evals/ns/ev", error="cannot reach the object store")
    type_, status, reason, message = store_condition(down)
    assert (type_, status, reason) == ("StoreUnavailable", True, "UploadFailed")
    assert "cannot reach the object store" in message and "ConfigMaps" in message
    assert store_condition(StoreState(url=down.url))[1:3] == (False, "Available")
    now = "2026-01-01T00:00:00Z"
    with_store = conditions_for([], [], Decision(), now, 1, store=down)
    assert find_condition(with_store, "StoreUnavailable")["status"] == "True"
    assert find_condition(conditions_for([], [], Decision(), now, 1),
                          "StoreUnavailable") is None  # no store: no such condition
