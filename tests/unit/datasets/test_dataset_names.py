"""SWE-bench datasets by name: the short names and aliases of Verified, Lite, full and
Multilingual resolve to their hub ids; rows of any swebench 5 dataset load from a local
file; a row whose log parser swebench lacks is refused at once, naming the row.

The hub is not reached: names resolve purely, and rows come from small local files made
from real Verified rows with another repository (Lite-like, Multilingual-like, unknown).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proctor import datasets
from proctor.cli.eval_options import EvalOptions, evaluation_manifest
from proctor.datasets import DatasetError, names
from support.paths import VERIFIED_PARQUET, shared

PARQUET = VERIFIED_PARQUET
UNKNOWN_ID = "acme__widget-7"


@pytest.fixture(scope="module")
def verified_rows() -> list[dict]:
    return datasets.read_rows(str(shared(PARQUET)))[:3]


def as_repo(row: dict, repo: str, number: int, version: str, log_parser: str) -> dict:
    """A real row moved to another repository, as its dataset would spell it."""
    owner, name = repo.split("/")
    iid = f"{owner}__{name}-{number}"
    return dict(row, repo=repo, instance_id=iid, version=version, log_parser=log_parser,
                image=f"swebench/sweb.eval.x86_64.{owner}_1776_{name}-{number}:latest")


@pytest.mark.parametrize(("name", "hub_id"), [
    ("verified", "SWE-bench/SWE-bench_Verified"),
    ("Verified", "SWE-bench/SWE-bench_Verified"),
    ("swe-bench_verified", "SWE-bench/SWE-bench_Verified"),
    ("princeton-nlp/SWE-bench_Verified", "SWE-bench/SWE-bench_Verified"),
    ("SWE-bench/SWE-bench_Verified", "SWE-bench/SWE-bench_Verified"),
    ("lite", "SWE-bench/SWE-bench_Lite"),
    ("swe-bench_lite", "SWE-bench/SWE-bench_Lite"),
    ("swebench-lite", "SWE-bench/SWE-bench_Lite"),
    ("swe_bench_lite", "SWE-bench/SWE-bench_Lite"),
    ("SWE-bench_Lite", "SWE-bench/SWE-bench_Lite"),
    ("princeton-nlp/SWE-bench_Lite", "SWE-bench/SWE-bench_Lite"),
    ("swe-bench/swe-bench_lite", "SWE-bench/SWE-bench_Lite"),
    ("full", "SWE-bench/SWE-bench"),
    ("swe-bench", "SWE-bench/SWE-bench"),
    ("swebench", "SWE-bench/SWE-bench"),
    ("princeton-nlp/SWE-bench", "SWE-bench/SWE-bench"),
    ("multilingual", "SWE-bench/SWE-bench_Multilingual"),
    ("swe-bench-multilingual", "SWE-bench/SWE-bench_Multilingual"),
    ("SWE-bench/SWE-bench_Multilingual", "SWE-bench/SWE-bench_Multilingual"),
    (" Lite ", "SWE-bench/SWE-bench_Lite"),
])
def test_names_and_aliases_resolve_to_the_hub_id_and_test_split(name, hub_id):
    assert names.resolve(name) == (hub_id, "test")
    assert names.resolve(name, "dev") == (hub_id, "dev")


@pytest.mark.parametrize("name", ["someone/their-swebench-rows", "rows.parquet",
                                  "./lite", "proctor-demo", "liteish", "SWE-bench/SWE-bench_X"])
def test_other_names_are_left_as_given(name):
    assert names.resolve(name, "dev") == (name, "dev")


def test_proctor_eval_sends_the_hub_id_to_the_evaluation():
    manifest = evaluation_manifest(EvalOptions(predictions="gold", dataset="swe-bench_lite",
                                               split="dev"))
    assert manifest["spec"]["dataset"] | {"maxRows": 0} == {
        "name": "SWE-bench/SWE-bench_Lite", "split": "dev", "maxRows": 0}


def test_a_known_name_reaches_the_hub_not_a_file_of_that_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("lite").write_text("not rows\n")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DatasetError, match="could not load SWE-bench/SWE-bench_Lite "
                                           r"\(split validation; .* has dev, test\)"):
        datasets.load("lite", split="validation")
    assert datasets.dataset_file("lite") is None


def test_lite_and_multilingual_rows_load_from_a_local_file(tmp_path, verified_rows):
    lite = as_repo(verified_rows[0], "pydata/xarray", 4094, "0.12", "parse_log_xarray")
    jq = as_repo(verified_rows[1], "jqlang/jq", 2681, "1.7", "parse_log_jq")
    cargo = as_repo(verified_rows[2], "tokio-rs/tokio", 6724, "1.38", "parse_log_cargo")
    path = tmp_path / "multilingual.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (lite, jq, cargo)))
    selection = datasets.load(str(path), max_rows=-1)
    assert [(i.instance_id, i.repo, i.log_parser) for i in selection.instances] == [
        ("pydata__xarray-4094", "pydata/xarray", "parse_log_xarray"),
        ("jqlang__jq-2681", "jqlang/jq", "parse_log_jq"),
        ("tokio-rs__tokio-6724", "tokio-rs/tokio", "parse_log_cargo")]


def test_a_row_swebench_cannot_grade_is_refused_naming_it(tmp_path, verified_rows):
    unknown = as_repo(verified_rows[1], "acme/widget", 7, "1.0", "parse_log_widget")
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([verified_rows[0], unknown]))
    with pytest.raises(DatasetError) as err:
        datasets.load(str(path), max_rows=-1)
    assert str(err.value).startswith(f"row {UNKNOWN_ID} (acme/widget): swebench has no log "
                                     f"parser 'parse_log_widget'")
    # Only the rows run are judged: the others of the file still load.
    assert len(datasets.load(str(path), max_rows=1).instances) == 1


def test_proctor_eval_refuses_the_row_before_anything_runs(tmp_path, verified_rows):
    unknown = as_repo(verified_rows[1], "acme/widget", 7, "1.0", "parse_log_widget")
    path = tmp_path / "rows.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([verified_rows[0], unknown]), path)
    out = tmp_path / "out"
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "proctor.cli.main", "eval", "-p", "gold",
                           "-d", str(path), "--output-dir", str(out)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and UNKNOWN_ID in lines[0] and "parse_log_widget" in lines[0], lines
    assert not list(out.rglob("results.jsonl")) and not list(out.rglob("report.json"))


def test_an_alias_and_its_hub_id_plan_the_same_items(verified_rows):
    from proctor.formats.manifest import parse_resource
    from proctor.prepare import plan_items

    def items(name: str) -> list[str]:
        evaluation = parse_resource({
            "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
            "metadata": {"name": "ev", "namespace": "default"},
            "spec": {"predictions": {"source": "gold"}, "dataset": {"name": name}}})
        rows = tuple(datasets.to_instance(r, i) for i, r in enumerate(verified_rows))
        selection = datasets.Selection(rows, name, datasets.fingerprint(rows))
        return [item.id for item in plan_items(evaluation, selection)]

    assert items("lite") == items("SWE-bench/SWE-bench_Lite") == items("swe-bench_lite")
    assert items("lite") != items("verified")
