"""`proctor eval`: the swebench harness's options, and its artefacts exactly.

Every report.json and the run report are compared key by key with what swebench 5.0.2's
own `get_eval_report` and `make_run_report` make of the same logs: the demo's real runs
(gold, empty, a mixed predictions file) and 177 real logs of the official harness.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swebench.harness.grading import get_eval_report
from swebench.harness.reporting import make_run_report
from swebench.harness.utils import make_test_spec

from proctor.agents.server import start_reference_agent
from proctor.cli.eval_options import EvalOptions, agent_manifest, evaluation_manifest, k8s_name
from proctor.cli.main import build_parser, main
from proctor.core.exits import ExitCode
from proctor.core.model import ErrorKind, Instance, Outcome, RunResult
from proctor.core.report_json import report_json
from proctor.core.spec import AgentUnderTest, Evaluation
from proctor.datasets import demo
from proctor.formats.harness_logs import (
    LOG_DIR,
    Graded,
    model_dir,
    results_dir,
    write_harness_logs,
)
from proctor.formats.manifest import parse_resource
from proctor.formats.predictions import load_predictions
from proctor.runner.grade import grade_work_dir
from support.legacy_logs import DATA, log_ids, old_run_as_work_dir, verified
from support.ports import closed_port

DEMO_ROWS = {r["instance_id"]: r for r in demo.load_rows()}


# --- options -> manifest (pure) ---------------------------------------------------------

def test_gold_on_a_dataset_alias_becomes_an_evaluation_of_every_row():
    doc = evaluation_manifest(EvalOptions(predictions="gold", dataset="verified",
                                          max_workers=16, run_id="My_Run.1", timeout=900))
    evaluation = parse_resource(doc)
    assert isinstance(evaluation, Evaluation)
    assert evaluation.name == "my-run-1"
    spec = evaluation.spec
    assert spec.dataset.name == "SWE-bench/SWE-bench_Verified"
    assert (spec.dataset.max_rows, spec.dataset.instance_ids) == (-1, ())
    assert spec.predictions.source == "gold"
    assert (spec.max_concurrent_rows, spec.timeouts.test_seconds) == (16, 900)


def test_a_predictions_file_runs_only_its_rows_within_the_instance_ids(tmp_path):
    options = EvalOptions(predictions="preds.jsonl", dataset="proctor-demo",
                          instance_ids=("b", "c", "z"))
    spec = parse_resource(evaluation_manifest(options, prediction_ids={"a", "b", "c"})).spec
    assert spec.predictions.source == "file"
    assert Path(spec.predictions.path).is_absolute()
    assert spec.dataset.instance_ids == ("b", "c")
    all_of_file = evaluation_manifest(EvalOptions(predictions="p.json"), {"b", "a"})
    assert all_of_file["spec"]["dataset"]["instanceIds"] == ["a", "b"]


def test_an_agent_by_url_is_an_agent_under_test_the_evaluation_refers_to():
    agent = parse_resource(agent_manifest("http://127.0.0.1:9009/"))
    assert isinstance(agent, AgentUnderTest)
    assert (agent.name, agent.spec.endpoint) == ("127-0-0-1-9009", "http://127.0.0.1:9009/")
    spec = parse_resource(evaluation_manifest(EvalOptions(agent=agent.name))).spec
    assert (spec.predictions.source, spec.agent_ref.name) == ("agent", "127-0-0-1-9009")
    with pytest.raises(ValueError):
        evaluation_manifest(EvalOptions())
    with pytest.raises(ValueError):
        evaluation_manifest(EvalOptions(predictions="gold", agent="a"))
    assert k8s_name("__", "eval") == "eval"


def test_the_harness_spellings_are_accepted():
    args = build_parser().parse_args([
        "eval", "--predictions_path", "p.jsonl", "--max_workers", "3", "--run_id", "r1",
        "--instance_ids", "a", "b", "--dataset_name", "lite", "--split", "dev",
        "--timeout", "60"])
    assert (args.predictions, args.max_workers, args.run_id, args.instance_ids,
            args.dataset, args.split, args.timeout) == (
        "p.jsonl", 3, "r1", ["a", "b"], "lite", "dev", 60)
    short = build_parser().parse_args(["eval", "-p", "gold", "-j", "2", "-i", "a", "-i", "b",
                                       "--run-id", "x"])
    assert (short.predictions, short.max_workers, short.instance_ids, short.run_id) == (
        "gold", 2, ["a", "b"], "x")


def test_one_thing_to_evaluate_is_required(capsys):
    assert main(["eval", "--dataset", "proctor-demo"]) == ExitCode.BAD_INPUT
    assert main(["eval", "-p", "gold", "--agent", "http://x:1"]) == ExitCode.BAD_INPUT
    assert "give one of" in capsys.readouterr().err
    assert main(["eval", "-p", "gold", "--run_id", "a/b"]) == ExitCode.BAD_INPUT
    assert "--run_id 'a/b'" in capsys.readouterr().err


# --- the artefacts, against swebench's own functions ----------------------------------------

def _swebench_report_of(row: dict, patch: str | None, log: Path) -> dict:
    spec = make_test_spec(Instance.model_validate(row).swebench_row())
    pred = {"instance_id": row["instance_id"], "model_patch": patch,
            "model_name_or_path": "m"}
    return get_eval_report(spec, pred, str(log), include_tests_status=True)


def _check_against_swebench(out: Path, run_id: str, model: str,
                            predictions: dict[str, str | None], rows: list[dict],
                            monkeypatch) -> dict:
    """Every report.json and the run report equal swebench's; the run report returned."""
    logs, by_id = out / LOG_DIR / run_id / model_dir(model), {r["instance_id"]: r for r in rows}
    for folder in logs.iterdir():
        iid = folder.name
        if (folder / "report.json").exists():
            ours = json.loads((folder / "report.json").read_text())
            assert ours == _swebench_report_of(by_id[iid], predictions[iid],
                                               folder / "test_output.txt"), iid
    ours = json.loads((out / f"{model_dir(model)}.{run_id}.json").read_text())
    theirs_dir = out / "theirs"
    monkeypatch.chdir(out)  # swebench reads logs/run_evaluation relative to here
    preds = {iid: {"instance_id": iid, "model_patch": p, "model_name_or_path": model}
             for iid, p in predictions.items()}
    theirs = json.loads(make_run_report(preds, rows, run_id, None, str(theirs_dir))
                        .read_text())
    assert ours == theirs
    return ours


def _eval(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "out"
    code = main(["eval", "--dataset", "proctor-demo", "--output-dir", str(out), "-q",
                 "-j", "2", *args])
    assert code == ExitCode.OK
    return out


@pytest.mark.slow
def test_gold_on_the_demo_resolves_all_and_matches_swebench(tmp_path, monkeypatch):
    out = _eval(tmp_path, "-p", "gold", "--sandbox", "process", "--run_id", "g1")
    summary = json.loads((results_dir(out, "g1") / "summary.json").read_text())
    assert summary["results"]["resolved_pct"] == 1.0
    for name in ("results.jsonl", "report.md"):
        assert (results_dir(out, "g1") / name).is_file()
    folders = sorted((out / LOG_DIR / "g1" / "gold").iterdir())
    assert [f.name for f in folders] == sorted(DEMO_ROWS)
    for f in folders:
        assert {"report.json", "patch.diff", "test_output.txt", "run_instance.log",
                "eval.sh"} <= {p.name for p in f.iterdir()}
    gold = {iid: row["patch"] for iid, row in DEMO_ROWS.items()}
    report = _check_against_swebench(out, "g1", "gold", gold, list(DEMO_ROWS.values()),
                                     monkeypatch)
    assert report["resolved_ids"] == sorted(DEMO_ROWS)


@pytest.mark.slow
def test_empty_patches_exist_and_a_patch_that_fails_to_apply_is_an_error(tmp_path,
                                                                         monkeypatch):
    ids = sorted(DEMO_ROWS)
    broken = ("diff --git a/nothing.py b/nothing.py\n--- a/nothing.py\n+++ b/nothing.py\n"
              "@@ -1 +1 @@\n-absent\n+present\n")
    patches = {ids[0]: DEMO_ROWS[ids[0]]["patch"], ids[1]: "", ids[2]: broken}
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps({"instance_id": i, "model_patch": p,
                                         "model_name_or_path": "org/model-x"}) + "\n"
                             for i, p in patches.items()))
    out = tmp_path / "out"
    main(["eval", "--dataset", "proctor-demo", "--output-dir", str(out), "-q",
          "-p", str(preds), "--sandbox", "process", "--run_id", "m"])
    report = _check_against_swebench(out, "m", "org/model-x", patches,
                                     list(DEMO_ROWS.values()), monkeypatch)
    assert (report["resolved_ids"], report["empty_patch_ids"], report["error_ids"]) == (
        [ids[0]], [ids[1]], [ids[2]])
    assert len(report["incomplete_ids"]) == len(ids) - 3
    # `empty` tests each row unchanged; swebench calls an empty patch one that exists.
    out = _eval(tmp_path / "empty", "-p", "empty", "--sandbox", "process")
    _check_against_swebench(out, "run", "empty", dict.fromkeys(ids, ""),
                            list(DEMO_ROWS.values()), monkeypatch)
    for iid in ids:
        empty = json.loads((out / LOG_DIR / "run" / "empty" / iid / "report.json")
                           .read_text())[iid]
        assert (empty["patch_is_None"], empty["patch_exists"]) == (False, True)


@pytest.mark.slow
@pytest.mark.docker
def test_gold_on_the_demo_resolves_all_in_docker(docker_client, tmp_path, monkeypatch):
    out = _eval(tmp_path, "-p", "gold", "--sandbox", "docker", "--pull", "never")
    gold = {iid: row["patch"] for iid, row in DEMO_ROWS.items()}
    report = _check_against_swebench(out, "run", "gold", gold, list(DEMO_ROWS.values()),
                                     monkeypatch)
    assert report["resolved_ids"] == sorted(DEMO_ROWS)


def test_real_harness_logs_give_swebenchs_reports(tmp_path, monkeypatch):
    """177 logs of the official harness (no output markers, so swebench 5 grades none):
    report.json and the run report, infra failures and their reasons included."""
    rows = {iid: verified()[iid] for iid in log_ids()}
    graded = []
    for iid in log_ids():
        work = old_run_as_work_dir(tmp_path / "work", iid)
        patch = (DATA / "logs" / iid / "patch.diff").read_text()
        graded.append(Graded(grade_work_dir(work), patch, work.read("test_output.txt"),
                             rows[iid].eval_script))
    out = tmp_path / "out"
    write_harness_logs(out, "legacy", "composio", graded, sorted(rows), 1800,
                       ("SWE-bench/SWE-bench_Verified", "test"))
    patches = {g.result.instance_id: g.patch for g in graded}
    report = _check_against_swebench(out, "legacy", "composio", patches,
                                     [r.model_dump() for r in rows.values()], monkeypatch)
    assert report["completed_instances"] + report["empty_patch_instances"] == 177
    assert report["failure_reasons"]  # some logs carry swebench's failure signatures


@pytest.mark.parametrize("log", ["Cannot connect to the Docker daemon at unix:///x.sock",
                                 "collected 0 items", "nothing known", ""])
def test_a_log_without_tests_is_classified_as_swebench_does(tmp_path, log):
    row = next(iter(DEMO_ROWS.values()))
    work = tmp_path / "test_output.txt"
    work.write_text(log)
    result = RunResult(item_id="1" * 32, instance_id=row["instance_id"],
                       outcome=Outcome.ERROR, error_kind=ErrorKind.SANDBOX)
    assert report_json(result, log) == _swebench_report_of(row, "diff", work)


@pytest.mark.slow
def test_an_agent_by_url_or_by_manifest(tmp_path, monkeypatch):
    ids = sorted(DEMO_ROWS)[:2]
    rows = [DEMO_ROWS[iid] for iid in ids]  # what swebench loads for these --instance_ids
    with start_reference_agent("oracle") as server:
        out = _eval(tmp_path / "url", "--agent", server.url, "-i", *ids)
        name = parse_resource(agent_manifest(server.url)).name
        patches = {iid: DEMO_ROWS[iid]["patch"] for iid in ids}
        report = _check_against_swebench(out, "run", name, patches, rows, monkeypatch)
    assert (report["total_instances"], report["resolved_ids"]) == (2, ids)
    agent = tmp_path / "agent.yaml"
    with start_reference_agent("noop") as server:
        agent.write_text(f"apiVersion: proctor.dev/v1alpha1\nkind: AgentUnderTest\n"
                         f"metadata: {{name: quiet}}\nspec: {{endpoint: '{server.url}'}}\n")
        out = _eval(tmp_path / "file", "-f", str(agent), "-i", *ids)
    report = _check_against_swebench(out, "run", "quiet", dict.fromkeys(ids, ""), rows,
                                     monkeypatch)
    assert report["empty_patch_ids"] == ids


def test_an_unreachable_agent_runs_nothing(tmp_path):
    code = main(["eval", "--agent", f"http://127.0.0.1:{closed_port()}/", "-q",
                 "--dataset", "proctor-demo", "--output-dir", str(tmp_path)])
    assert code == ExitCode.NOT_RUN
    assert not (tmp_path / LOG_DIR).exists() and not list(tmp_path.glob("*.json"))


def test_timeouts_infra_and_agent_errors_in_the_run_report(tmp_path, monkeypatch):
    """Items with no gradable log, laid out and reported as swebench's harness does."""
    ids = sorted(DEMO_ROWS)[:4]

    def error(iid: str, kind: ErrorKind, message: str) -> RunResult:
        return RunResult(item_id="1" * 32, instance_id=iid, outcome=Outcome.ERROR,
                         error_kind=kind, error_message=message)

    graded = [
        Graded(error(ids[0], ErrorKind.TIMEOUT, "past its limit"), "diff", "collecting"),
        Graded(error(ids[1], ErrorKind.INFRA, "500 Server Error: Error response from daemon: "
                                              "no space"), "diff"),
        Graded(error(ids[2], ErrorKind.AGENT, "unreachable"), None),
        Graded(error(ids[3], ErrorKind.SANDBOX, "no markers"), "diff", "Killed\n"),
    ]
    write_harness_logs(tmp_path, "r", "m", graded, sorted(DEMO_ROWS), 7, ("proctor-demo", "test"))
    timed_out = tmp_path / LOG_DIR / "r" / "m" / ids[0]
    assert not (timed_out / "report.json").exists()
    assert (timed_out / "test_output.txt").read_text().endswith(
        "Timeout error: 7 seconds exceeded.")
    report = _check_against_swebench(tmp_path, "r", "m", {g.result.instance_id: g.patch
                                                          for g in graded},
                                     list(DEMO_ROWS.values()), monkeypatch)
    assert report["failure_reasons"] == {ids[0]: "tests_timed_out",
                                         ids[1]: "container_unavailable",
                                         ids[3]: "out_of_memory"}
    assert (report["infra_failure_ids"], report["empty_patch_ids"]) == (
        [ids[1], ids[3]], [ids[2]])


# --- many runs in one folder, as the harness keeps them -------------------------------------

def _preds(path: Path, model: str, patches: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"instance_id": i, "model_patch": p,
                                        "model_name_or_path": model}) + "\n"
                            for i, p in patches.items()))
    return path


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _eval_here(*args: str) -> int:
    """`proctor eval` as a swebench user runs it: no --output-dir, in the current folder."""
    return main(["eval", "--dataset", "proctor-demo", "-q", "-j", "2", "--sandbox", "process",
                 *args])


def test_the_predictions_digest_changes_with_what_they_say_not_how_it_is_spelt(tmp_path):
    ids = sorted(DEMO_ROWS)[:2]
    patches = {iid: DEMO_ROWS[iid]["patch"] for iid in ids}
    digest = load_predictions(_preds(tmp_path / "a.jsonl", "m", patches)).digest
    as_json = tmp_path / "a.json"  # swebench's other spelling, rows in another order
    as_json.write_text(json.dumps({iid: {"instance_id": iid, "model_patch": p,
                                         "model_name_or_path": "m"}
                                   for iid, p in reversed(patches.items())}, indent=2))
    assert load_predictions(as_json).digest == digest
    for model, other in (("m", {**patches, ids[0]: ""}), ("m2", patches),
                         ("m", {ids[0]: patches[ids[0]]})):
        assert load_predictions(_preds(tmp_path / "b.jsonl", model, other)).digest != digest


@pytest.mark.slow
def test_two_runs_in_one_folder_are_kept_side_by_side(tmp_path, monkeypatch):
    ids = sorted(DEMO_ROWS)
    first = {ids[0]: DEMO_ROWS[ids[0]]["patch"], ids[1]: ""}
    second = {ids[1]: DEMO_ROWS[ids[1]]["patch"], ids[2]: DEMO_ROWS[ids[2]]["patch"]}
    a = _preds(tmp_path / "a.jsonl", "org/model-a", first)
    b = _preds(tmp_path / "b.jsonl", "model-b", second)
    out = tmp_path / "here"
    out.mkdir()
    monkeypatch.chdir(out)
    assert _eval_here("-p", str(a), "--run_id", "one") == ExitCode.OK
    kept = _files(out / LOG_DIR / "one")
    assert _eval_here("-p", str(b), "--run_id", "two") == ExitCode.OK
    assert _files(out / LOG_DIR / "one") == kept  # the second run left the first alone
    assert sorted(p.name for p in out.glob("*.json")) == ["model-b.two.json",
                                                         "org__model-a.one.json"]
    rows = list(DEMO_ROWS.values())
    one = _check_against_swebench(out, "one", "org/model-a", first, rows, monkeypatch)
    two = _check_against_swebench(out, "two", "model-b", second, rows, monkeypatch)
    assert (one["resolved_ids"], one["empty_patch_ids"]) == ([ids[0]], [ids[1]])
    assert (two["resolved_ids"], two["submitted_ids"]) == (ids[1:3], ids[1:3])
    for run_id, done in (("one", 2), ("two", 2)):
        summary = json.loads((results_dir(out, run_id) / "summary.json").read_text())
        assert summary["items"] == done


@pytest.mark.slow
def test_a_run_id_resumes_and_refuses_other_predictions(tmp_path, monkeypatch, capsys):
    ids = sorted(DEMO_ROWS)
    gold = {iid: DEMO_ROWS[iid]["patch"] for iid in ids[:3]}
    preds = _preds(tmp_path / "preds.jsonl", "m", gold)
    out = tmp_path / "here"
    out.mkdir()
    monkeypatch.chdir(out)
    assert _eval_here("-p", str(preds), "--run_id", "r") == ExitCode.OK
    results = (results_dir(out, "r") / "results.jsonl").read_text()
    report = (out / "m.r.json").read_text()
    capsys.readouterr()
    assert _eval_here("-p", str(preds), "--run_id", "r") == ExitCode.OK
    assert "Resuming: 3 of 3 items already done" in capsys.readouterr().err
    # nothing was run again: not one result appended, the same run report
    assert (results_dir(out, "r") / "results.jsonl").read_text() == results
    assert (out / "m.r.json").read_text() == report
    before = _files(out)

    other = _preds(tmp_path / "other.jsonl", "m", dict.fromkeys(ids[:3], ""))
    assert _eval_here("-p", str(other), "--run_id", "r") == ExitCode.BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "other.jsonl" in err and "--run_id" in err, err
    _preds(preds, "m", {**gold, ids[0]: ""})  # the same file, another prediction in it
    assert _eval_here("-p", str(preds), "--run_id", "r") == ExitCode.BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "predictions_sha256" in err, err
    assert _files(out) == before  # the run's logs, report and results untouched
