"""Loading SWE-bench rows: the real Verified split, local files, selection, bad rows."""

from __future__ import annotations

import json

import pytest

from proctor import datasets
from proctor.datasets import DatasetError, demo
from support.paths import VERIFIED_PARQUET, shared

PARQUET = VERIFIED_PARQUET


@pytest.fixture(scope="module")
def verified_rows():
    return datasets.read_rows(str(shared(PARQUET)))


def test_the_real_verified_split_loads_whole(verified_rows):
    selection = datasets.load(str(PARQUET), max_rows=-1)
    assert len(selection.instances) == 500
    first = selection.instances[0]
    assert first.instance_id == verified_rows[0]["instance_id"]
    assert isinstance(first.FAIL_TO_PASS, list) and first.FAIL_TO_PASS
    assert first.image.startswith("swebench/sweb.eval.")
    assert first.log_parser.startswith("parse_log_")


def test_max_rows_defaults_to_three_in_dataset_order(verified_rows):
    selection = datasets.load(str(PARQUET))
    assert [i.instance_id for i in selection.instances] == \
        [r["instance_id"] for r in verified_rows[:3]]


def test_selection_by_ids_keeps_dataset_order_and_is_deterministic(verified_rows):
    ids = [verified_rows[10]["instance_id"], verified_rows[2]["instance_id"]]
    a = datasets.load(str(PARQUET), instance_ids=ids, max_rows=-1)
    b = datasets.load(str(PARQUET), instance_ids=list(reversed(ids)), max_rows=-1)
    assert [i.instance_id for i in a.instances] == [ids[1], ids[0]]
    assert a.fingerprint == b.fingerprint


def test_unknown_ids_are_named(verified_rows):
    with pytest.raises(DatasetError, match="not in the dataset: nope__nope-1"):
        datasets.load(str(PARQUET), instance_ids=["nope__nope-1"])


def test_json_and_jsonl_files(tmp_path, verified_rows):
    rows = verified_rows[:4]
    (tmp_path / "d.json").write_text(json.dumps(rows))
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in ("d.json", "d.jsonl"):
        selection = datasets.load(str(tmp_path / name), max_rows=-1)
        assert [i.instance_id for i in selection.instances] == [r["instance_id"] for r in rows]
    assert datasets.load(str(tmp_path / "d.json"), max_rows=-1).fingerprint == \
        datasets.load(str(tmp_path / "d.jsonl"), max_rows=-1).fingerprint


def test_rows_in_the_older_format_are_refused(tmp_path, verified_rows):
    old = {k: v for k, v in verified_rows[0].items()
           if k not in ("image", "eval_script", "log_parser", "eval_type")}
    (tmp_path / "old.json").write_text(json.dumps([old]))
    with pytest.raises(DatasetError, match="older SWE-bench format"):
        datasets.load(str(tmp_path / "old.json"))


@pytest.mark.parametrize(("field", "value", "message"), [
    ("base_commit", "not-a-sha", "field base_commit"),
    ("FAIL_TO_PASS", "[not json", "field FAIL_TO_PASS: Value error, not a JSON list"),
    ("instance_id", "a b; rm -rf /", "field instance_id"),
    ("problem_statement", None, "field problem_statement"),
])
def test_a_bad_row_names_the_row_and_the_field(tmp_path, verified_rows, field, value, message):
    row = dict(verified_rows[5], **{field: value})
    (tmp_path / "bad.json").write_text(json.dumps([verified_rows[0], row]))
    with pytest.raises(DatasetError, match=message) as err:
        datasets.load(str(tmp_path / "bad.json"), max_rows=-1)
    assert (row["instance_id"] if field != "instance_id" else "a b") in str(err.value)


def test_the_hub_is_tried_by_the_real_code_and_its_failure_is_explained(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DatasetError, match="could not load SWE-bench/SWE-bench_Verified"):
        datasets.load("SWE-bench/SWE-bench_Verified", revision="no-such-revision")


def test_missing_file_is_named(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        datasets.load(str(tmp_path / "none.jsonl"))


def test_the_demo_dataset_is_bundled():
    selection = datasets.load(demo.DATASET_NAME, max_rows=-1)
    assert len(selection.instances) >= 8
    assert len({i.repo for i in selection.instances}) >= 2
