"""`proctor run` and `proctor validate` end to end on the bundled demo dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proctor.cli.main import main
from proctor.core.model import Outcome, PassFail, RunResult
from proctor.datasets import demo
from proctor.formats.manifest import parse_manifests
from proctor.local.engine import run_evaluation
from proctor.results import ResultsFolder, ResultsFolderError
from support.paths import EXAMPLES, VERIFIED_PARQUET, shared


def evaluation(predictions: str = "source: gold", **spec: str) -> object:
    max_rows = spec.pop("maxRows", "-1")
    extra = "".join(f"\n  {k}: {v}" for k, v in spec.items())
    text = f"""
apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {{name: t}}
spec:
  dataset: {{name: proctor-demo, maxRows: {max_rows}}}
  predictions: {{{predictions}}}
  maxConcurrentRows: 2{extra}
"""
    return parse_manifests(text)[0]


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    out = tmp_path_factory.mktemp("validate")
    code = main(["validate", "-q", "-f", str(EXAMPLES / "demo-gold.yaml"),
                 "--output-dir", str(out)])
    return code, out


def results_of(folder: Path) -> list[RunResult]:
    return ResultsFolder(folder).load()


def test_gold_resolves_every_demo_task(validated):
    code, out = validated
    assert code == 0
    results = results_of(out / "gold")
    assert len(results) == len(demo.load_rows()) >= 8
    assert {r.outcome for r in results} == {Outcome.RESOLVED}
    summary = json.loads((out / "gold" / "summary.json").read_text())
    assert summary["results"]["resolved_pct"] == 1.0
    assert summary["results"]["total_instances"] == len(results)


def test_empty_is_no_op_everywhere_and_its_tests_ran(validated):
    _, out = validated
    results = results_of(out / "empty")
    assert {r.outcome for r in results} == {Outcome.NO_OP}
    assert all(r.tests_ran and not r.FAIL_TO_PASS.success and not r.PASS_TO_PASS.failure
               for r in results)
    summary = json.loads((out / "empty" / "summary.json").read_text())["results"]
    assert (summary["no_op_pct"], summary["fail_to_pass_passed_pct"],
            summary["pass_to_pass_passed_pct"]) == (1.0, 0.0, 1.0)


def test_validation_finds_no_broken_or_flaky_demo_task(validated):
    _, out = validated
    found = json.loads((out / "validation.json").read_text())
    assert found["broken"] == {} and found["flaky"] == {}


def test_results_folder_layout(validated):
    _, out = validated
    folder = out / "gold"
    for name in ("results.jsonl", "summary.json", "report.md", "spec.json"):
        assert (folder / name).is_file(), name
    first = results_of(folder)[0]
    item = folder / "items" / first.instance_id / "original" / "0"
    assert (item / "patch.diff").read_text().startswith("diff --git")
    assert ">>>>> Start Test Output" in (item / "test_output.txt").read_text()
    report = json.loads((item / "report.json").read_text())[first.instance_id]
    assert report["resolved"] is True and report["patch_successfully_applied"] is True
    assert set(report["tests_status"]) == {"FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL",
                                           "PASS_TO_FAIL"}
    assert "| Resolved |" in (folder / "report.md").read_text()
    assert "100.0%" in (folder / "report.md").read_text()


def test_validation_reports_a_broken_task(tmp_path):
    from proctor.local.validate import empty_problems, find_problems, gold_problems

    good = RunResult(item_id="a" * 32, instance_id="x", outcome=Outcome.RESOLVED, tests_ran=True)
    bad = good.model_copy(update={"outcome": Outcome.BREAKING_RESOLVED})
    assert gold_problems(good) == [] and gold_problems(bad)
    leaky = good.model_copy(update={"outcome": Outcome.NO_OP,
                                    "FAIL_TO_PASS": PassFail(success=["t1"])})
    assert empty_problems(leaky) == ["F2P test passes without the fix: t1"]
    broken, flaky = find_problems({"gold": [[good], [bad]], "empty": []})
    assert "x" in broken and "x" in flaky


def test_predictions_file(tmp_path):
    rows = demo.load_rows()
    preds = [{"instance_id": rows[0]["instance_id"], "model_name_or_path": "m",
              "model_patch": rows[0]["patch"]},
             {"instance_id": rows[1]["instance_id"], "model_name_or_path": "m",
              "model_patch": "not a diff"}]
    path = tmp_path / "preds.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in preds))
    ev = evaluation(f"source: file, path: {path}", maxRows="3")
    summary = run_evaluation(ev, tmp_path / "out", progress=False)
    by_id = {r.instance_id: r for r in results_of(tmp_path / "out")}
    assert by_id[rows[0]["instance_id"]].outcome == Outcome.RESOLVED
    refused = by_id[rows[1]["instance_id"]]
    assert refused.outcome == Outcome.NO_OP and refused.patch.refused == "not a unified diff"
    assert by_id[rows[2]["instance_id"]].outcome == Outcome.NO_OP  # no prediction
    assert summary.results.total_instances == 3
    assert summary.agent == "m", "the leaderboard row names the model, not the file"


def result_file(out: Path, r: RunResult) -> Path:
    return out / "items" / r.instance_id / r.variant_id / str(r.repeat) / "result.json"


def test_resume_redoes_nothing_and_repairs_a_torn_line(tmp_path):
    ev = evaluation(maxRows="3")
    out = tmp_path / "out"
    run_evaluation(ev, out, progress=False)
    lines = (out / "results.jsonl").read_text().splitlines(keepends=True)
    assert len(lines) == 3
    # Simulate a kill mid-write: the last result torn in half.
    (out / "results.jsonl").write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])
    kept = [RunResult.model_validate_json(line) for line in lines[:2]]
    stamps = {r.item_id: result_file(out, r).stat().st_mtime_ns for r in kept}
    run_evaluation(ev, out, progress=False)
    after = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["item_id"] for r in after) == sorted(json.loads(x)["item_id"] for x in lines)
    assert [r["item_id"] for r in after[:2]] == [r.item_id for r in kept]
    # finished items were not run again: their work folders are untouched
    assert {r.item_id: result_file(out, r).stat().st_mtime_ns for r in kept} == stamps
    run_evaluation(ev, out, progress=False)
    assert len((out / "results.jsonl").read_text().splitlines()) == 3


def test_a_different_spec_on_the_same_folder_is_refused(tmp_path):
    run_evaluation(evaluation(maxRows="1"), tmp_path, progress=False)
    with pytest.raises(ResultsFolderError, match=r"predictions\.source: 'gold' then, 'empty' now"):
        run_evaluation(evaluation("source: empty", maxRows="1"), tmp_path, progress=False)
    with pytest.raises(ResultsFolderError, match=r"repeats: 1 then, 2 now"):
        run_evaluation(evaluation(maxRows="1", repeats="2"), tmp_path, progress=False)
    # maxConcurrentRows may change, as on the cluster
    relaxed = evaluation(maxRows="1")
    relaxed = relaxed.model_copy(
        update={"spec": relaxed.spec.model_copy(update={"max_concurrent_rows": 1})})
    run_evaluation(relaxed, tmp_path, progress=False)


@pytest.mark.parametrize("sandbox, says", [
    ("process", ["needs its image", "--sandbox docker", "Kubernetes"]),
    ("auto", ["needs Docker: no Docker daemon answers", "start the Docker daemon"])])
def test_real_verified_rows_are_refused_with_what_runs_them(tmp_path, capsys, monkeypatch,
                                                            sandbox, says):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    parquet = shared(VERIFIED_PARQUET)
    manifest = tmp_path / "ev.yaml"
    manifest.write_text(f"""apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {{name: v}}
spec:
  dataset: {{name: "{parquet}"}}
  predictions: {{source: gold}}
""")
    assert main(["run", "-q", "-f", str(manifest), "--output-dir", str(tmp_path / "o"),
                 "--sandbox", sandbox]) == 2
    err = capsys.readouterr().err
    assert all(part in err for part in says), err
    assert not (tmp_path / "o" / "results.jsonl").exists()


def test_an_invalid_manifest_is_refused_with_the_schema_message(tmp_path, capsys):
    manifest = tmp_path / "ev.yaml"
    manifest.write_text("""apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: v}
spec:
  dataset: {name: proctor-demo, maxRows: -5}
  predictions: {source: gold}
""")
    assert main(["run", "-f", str(manifest), "--output-dir", str(tmp_path / "o")]) == 2
    assert "spec.dataset.maxRows: -5 is less than the minimum of -1" in capsys.readouterr().err
