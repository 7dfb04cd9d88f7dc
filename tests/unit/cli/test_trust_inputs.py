"""Every bad input gets one line naming the problem and exit 2, never a traceback
(issue 14); and what a person reads of a run is right."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from proctor import datasets
from proctor.cli.main import main
from proctor.core import exits
from proctor.core.exits import ExitCode
from proctor.core.metrics import aggregate
from proctor.datasets import demo
from proctor.formats.manifest import parse_manifests
from proctor.local.engine import run_evaluation
from support.trust_support import gold_manifest, write

ROWS = demo.load_rows()


def run_cli(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["run", "-q", *args])
    return code, capsys.readouterr().err


def assert_one_line(err: str, *words: str) -> None:
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, err


def predictions_manifest(tmp_path: Path, path: Path) -> Path:
    return write(tmp_path / "ev.yaml", f"""apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {{name: preds}}
spec:
  dataset: {{name: proctor-demo, maxRows: 2}}
  predictions: {{source: file, path: "{path}"}}
""")


def pred(i: int = 0, **fields: object) -> dict[str, object]:
    row = {"instance_id": ROWS[i]["instance_id"], "model_name_or_path": "m",
           "model_patch": ROWS[i]["patch"]}
    row.update(fields)
    return {k: v for k, v in row.items() if v is not ...}


BAD_PREDICTIONS = {
    "unknown id": ([pred(), pred(instance_id="nobody__nothing-1")],
                   ("line 2", "nobody__nothing-1 is not in the dataset")),
    "missing model_patch": ([pred(), pred(1, model_patch=...)], ("line 2", "no model_patch")),
    "non-string model_patch": ([pred(model_patch=42)], ("line 1", "model_patch is int")),
    "duplicate id": ([pred(), pred(1), pred()], ("line 3", "again (first at line 1)")),
    "mixed models": ([pred(), pred(1, model_name_or_path="other")],
                     ("more than one model", "'other' (line 2)")),
    "empty file": ([], ("holds no predictions",)),
}


@pytest.mark.parametrize("case", BAD_PREDICTIONS)
def test_a_bad_predictions_file_is_refused_up_front(tmp_path, capsys, case):
    rows, words = BAD_PREDICTIONS[case]
    path = write(tmp_path / "preds.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    code, err = run_cli(capsys, "-f", str(predictions_manifest(tmp_path, path)),
                        "--output-dir", str(tmp_path / "out"))
    assert code == 2
    assert_one_line(err, str(path), *words)
    assert not (tmp_path / "out").exists(), "refused before anything is written"


def test_predictions_of_rows_outside_the_selection_are_fine(tmp_path, capsys):
    """maxRows 2 of a file with predictions for every row: the ids are in the dataset."""
    path = write(tmp_path / "preds.jsonl",
                 "".join(json.dumps(pred(i)) + "\n" for i in range(len(ROWS))))
    code, _ = run_cli(capsys, "-f", str(predictions_manifest(tmp_path, path)),
                      "--output-dir", str(tmp_path / "out"))
    assert code == 0


def test_a_manifest_that_is_not_utf8_is_refused(tmp_path, capsys):
    path = tmp_path / "ev.yaml"
    path.write_bytes(gold_manifest(2).replace("trust-gold", "trust\xe9").encode("latin-1"))
    code, err = run_cli(capsys, "-f", str(path), "--output-dir", str(tmp_path / "out"))
    assert code == 2
    assert_one_line(err, f"{path}:3", "not UTF-8")


def test_an_integer_above_int64_is_refused(tmp_path, capsys):
    path = write(tmp_path / "ev.yaml", gold_manifest("99999999999999999999999"))
    code, err = run_cli(capsys, "-f", str(path), "--output-dir", str(tmp_path / "out"))
    assert code == 2
    assert_one_line(err, "spec.dataset.maxRows", "does not fit in a 64-bit integer")


def test_an_output_path_that_is_a_file_is_refused(tmp_path, capsys):
    path = write(tmp_path / "ev.yaml", gold_manifest(1))
    taken = write(tmp_path / "taken", "")
    code, err = run_cli(capsys, "-f", str(path), "--output-dir", str(taken))
    assert code == 2
    assert_one_line(err, f"{taken} is a file")


def test_the_hub_unreachable_fails_at_once_naming_the_local_file_option(monkeypatch):
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    if datasets.hub_unreachable() is None:
        pytest.skip("the hub is reachable from here")
    with pytest.raises(datasets.DatasetError) as caught:
        datasets.load(datasets.HUB_DEFAULT)
    # Only the one-connection probe says this, and it runs before the hub client (whose
    # own retries take half a minute) is called at all.
    assert "cannot reach the Hugging Face hub to load" in str(caught.value)
    assert ".parquet" in str(caught.value) and ".jsonl" in str(caught.value)


def test_what_a_person_reads_of_a_run(tmp_path, capsys):
    ev = parse_manifests(gold_manifest(3))[0]
    summary = run_evaluation(ev, tmp_path, progress=True)
    err = capsys.readouterr().err
    assert "gold:" in err, "the progress bar names whose items it counts"
    data = json.loads((tmp_path / "summary.json").read_text())
    assert "green_agent_model" not in data, "no variants were generated by an LLM"
    assert data["outcome_counts"]["resolved"] == 3
    assert all(isinstance(v, int) for v in data["outcome_counts"].values())
    assert data["partial"] is False and summary.results.resolved_pct == 1.0
    assert not any("Killed" in p.read_text() for p in tmp_path.glob("items/*/*/*/run.log"))
    report = (tmp_path / "report.md").read_text()
    assert all(title in report for title in ("Breaking Resolved", "Work in Progress",
                                              "Regression", "Fail-to-Pass Passed"))
    # A run with nothing left to do says how much was done, and draws no empty bar.
    run_evaluation(ev, tmp_path, progress=True)
    err = capsys.readouterr().err
    assert "3 of 3 items already done" in err and "0item" not in err


def test_one_exit_code_mapping_for_every_command():
    assert exits.for_exception(KeyboardInterrupt()) == ExitCode.INTERRUPTED == 130
    assert exits.for_exception(OSError(errno.ENOSPC, "No space left on device")) == 3
    assert exits.for_exception(PermissionError(errno.EACCES, "Permission denied", "x")) == 2
    assert exits.for_exception(datasets.DatasetError("bad row")) == ExitCode.BAD_INPUT
    assert exits.for_exception(ZeroDivisionError()) is None, "a bug keeps its traceback"
    done = aggregate([], {})
    failed = done.model_copy(update={"error_kinds": {"agent": 2}})
    assert exits.for_summaries([done]) == 0 and exits.for_summaries([done, failed]) == 1
