"""`proctor analyze`: CSVs, figures and report from results folders, checked against an
independent recomputation."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

from proctor.analysis import plots
from proctor.analysis.load import load_agents
from proctor.analysis.run import IMAGES, compute
from proctor.cli.main import main
from proctor.core.model import Outcome, RunResult
from support.analysis_folders import AGENT_A, AGENT_B, write_folder
from support.paths import ROOT


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_analyze_writes_every_file_and_matches_an_independent_recompute(tmp_path, capsys):
    a = write_folder(tmp_path / "a", "agent-a", AGENT_A, torn=True, confident=True)
    b = write_folder(tmp_path / "b", "agent-b", AGENT_B)
    before = (a / "results.jsonl").read_bytes()
    out = tmp_path / "analysis"
    assert main(["analyze", str(a), str(b), "--output-dir", str(out), "--resamples", "300"]) == 0
    assert "agent-a" in capsys.readouterr().out
    assert (a / "results.jsonl").read_bytes() == before  # analysis never writes a folder

    agents = read_csv(out / "agent_level_sensitivity.csv")
    header = list(agents[0])
    assert header[:7] == ["agent", "S_prompt", "mean_variance", "std_variance",
                          "mean_min_max_gap", "max_min_max_gap", "num_tasks"]
    task_header = list(read_csv(out / "task_level_sensitivity.csv")[0])
    assert task_header[:5] == ["task_id", "variance", "mean_score", "min_max_gap", "S_task"]
    for folder, row in zip((a, b), agents, strict=True):
        done = subprocess.run([sys.executable, str(ROOT / "scripts" / "recompute_s_prompt.py"),
                               str(folder)], capture_output=True, text=True, check=True)
        value, tasks = done.stdout.split()
        assert float(row["S_prompt"]) == float(value)  # full precision, not rounded
        assert int(row["num_tasks"]) == int(tasks)
    # By hand for agent A: t1 means 2/3, 0, 1; t2 1, 1, 1; t3 0, 1/3 (terse all errors);
    # t4 1, 0 (original all errors).
    variances = [((2 / 3 - 5 / 9) ** 2 + (5 / 9) ** 2 + (4 / 9) ** 2) / 3, 0, 1 / 36, 1 / 4]
    assert float(agents[0]["S_prompt"]) == pytest.approx(1 - sum(variances) / 4)
    assert agents[0]["error_items"] == "7"

    metrics = read_csv(out / "reliability_metrics.csv")
    names = {(m["agent"], m["metric"]) for m in metrics}
    for name in ("R_prompt", "C_out", "pass@3", "pass^3", "sigma2_prompt", "sigma2_run",
                 "C_res_latency", "C_res_tokens"):
        assert ("agent-a", name) in names, name
    variants = read_csv(out / "variants.csv")
    t3 = next(v for v in variants if v["agent"] == "agent-a" and v["task_id"] == "t3"
              and v["variant_id"] == "terse")
    assert (t3["errors"], t3["outcomes"]) == ("3", "error|error|error")
    comparison = read_csv(out / "comparisons.csv")[0]
    assert (comparison["agent_a"], comparison["agent_b"], comparison["tasks"]) == (
        "agent-a", "agent-b", "3")

    report = (out / "sensitivity_report.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert len(links) == 8 and all((out / link).is_file() for link in links)
    assert report.count("*Figure ") == 8  # a caption under each
    assert "cannot fall below 0.75" in report and "## Ranking by robustness" in report
    assert "## Appendix: every interval and test" in report and "sign-flip" in report
    assert "S_prompt per run (headline)" in report and "K-dependent" in report
    assert "| 3 | " in report  # pass@3 / pass^3 as values
    # calibration of agent A's confidences, by hand: 27 scored items in bins 0.3 (15
    # unresolved), 0.4 (the resolved ones reported 0.45) and 0.8 (the other resolved ones)
    scored = [(c, r) for c, r in confidences(a)]
    resolved = sum(r for _, r in scored)
    bins: dict[float, list] = {}
    for c, r in scored:
        bins.setdefault(c, []).append(r)
    ece = sum(abs(sum(v) / len(v) - c) * len(v) for c, v in bins.items()) / len(scored)
    row = next(r for r in agents if r["agent"] == "agent-a")
    assert int(row["confidence_items"]) == len(scored)
    assert float(row["ece"]) == pytest.approx(ece)
    assert float(row["brier"]) == pytest.approx(sum((c - r) ** 2 for c, r in scored)
                                                 / len(scored))
    assert float(row["auroc"]) == 1.0 and 0 < resolved < len(scored)
    # agent B answered 9 of its 27 items with a patch (t2), each resolved
    assert "| agent-b | 0.667 [" in report and "| 1.000 [" in report
    assert "0 (none reported)" in report
    assert len(read_csv(out / "calibration_bins.csv")) == len(bins)


def confidences(folder: Path) -> list[tuple[float, int]]:
    """(confidence, resolved) of each scored item, read back from results.jsonl."""
    lines = [RunResult.model_validate_json(x) for x in
             (folder / "results.jsonl").read_text().splitlines() if x.endswith("}")]
    return [(r.confidence, int(r.outcome == Outcome.RESOLVED)) for r in lines
            if r.outcome != Outcome.ERROR and r.confidence is not None]


def test_f2p_score_counts_partial_passes(tmp_path):
    folder = write_folder(tmp_path / "a", "agent-a", {"t": {"original": "N", "formal": "R"}})
    run = load_agents([folder], "f2p")[0]
    assert run.scores[0, :, 0].tolist() == [0.0, 1.0]


def test_figures_have_labels_legends_outside_and_value_axes_from_zero(tmp_path):
    runs = load_agents([write_folder(tmp_path / "a", "agent-a", AGENT_A, confident=True),
                        write_folder(tmp_path / "b", "agent-b", AGENT_B)])
    found = compute(runs, resamples=100)
    for image in IMAGES:
        fig = image.make(found)
        fig.canvas.draw() if hasattr(fig.canvas, "draw") else None
        for ax in fig.axes:
            assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel(), image.name
            legend = ax.get_legend()
            if legend is not None:  # outside the axes, to their right
                assert legend.get_bbox_to_anchor().x0 >= ax.get_window_extent().x1, image.name
            value_axis = ax.get_xlim() if image.name == "most_sensitive_tasks.png" \
                else ax.get_ylim()
            assert value_axis[0] <= 0, image.name
    # Only tasks whose score changed are drawn among the most sensitive.
    drawn = plots.most_sensitive_tasks(found.task_rows).axes[0].get_yticklabels()
    changed = [r for r in found.task_rows if float(r[1]) > 0]
    assert len(drawn) == len(changed)


def test_a_folder_without_results_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["analyze", str(tmp_path / "empty"), "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("proctor: error:") and "no results.jsonl" in err and "\n" not in err


def test_a_plain_run_without_variants_says_sensitivity_was_not_measured(tmp_path):
    folder = write_folder(tmp_path / "a", "agent-a", {"t1": {"original": "R"},
                                                      "t2": {"original": "E"}})
    out = tmp_path / "analysis"
    assert main(["analyze", str(folder), "--output-dir", str(out), "--resamples", "50"]) == 0
    row = read_csv(out / "agent_level_sensitivity.csv")[0]
    assert (row["num_tasks"], row["S_prompt"], row["error_items"]) == ("0", "nan", "1")
    assert read_csv(out / "task_level_sensitivity.csv") == []
    assert not list(out.glob("*.png"))  # no empty sensitivity plots, no bars at 0
    report = (out / "sensitivity_report.md").read_text()
    assert "no variants: prompt sensitivity not measured" in report
    assert "No agent reported a confidence (A2A metadata key `confidence`" in report
    assert "| R_prompt" not in report and "S_prompt per run" not in report.split("## What")[0]


@pytest.mark.parametrize(("content", "says"), [
    ('{"item_id": "x"\nnot json\n', "line 1 is not a result"),
    ("junk\n", "line 1 is not a result"),
    ('{"instance_id": 5}\n', "line 1 is not a result"),
    ("", "holds no results"),
])
def test_analyze_refuses_bad_results_in_one_line_and_writes_nothing(tmp_path, capsys, content,
                                                                    says):
    good = write_folder(tmp_path / "a", "agent-a", AGENT_B)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.jsonl").write_text(content)
    out = tmp_path / "analysis"
    assert main(["analyze", str(good), str(tmp_path / "bad"), "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err and not out.exists()


def test_a_corrupt_middle_line_is_refused_a_torn_last_line_skipped(tmp_path, capsys):
    folder = write_folder(tmp_path / "a", "agent-a", AGENT_B, torn=True)
    lines = (folder / "results.jsonl").read_text().split("\n")
    assert len(load_agents([folder])[0].tasks) == 3  # the torn last line: skipped
    lines[4] = lines[4][:30]
    (folder / "results.jsonl").write_text("\n".join(lines))
    assert main(["analyze", str(folder), "--output-dir", str(tmp_path / "o")]) == 2
    assert "line 5 is not a result" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_an_output_path_that_is_a_file_is_a_one_line_error(tmp_path, capsys):
    folder = write_folder(tmp_path / "a", "agent-a", AGENT_B)
    (tmp_path / "file").write_text("x")
    for out in (tmp_path / "file", tmp_path / "file" / "sub"):
        assert main(["analyze", str(folder), "--output-dir", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert "is a file" in err and "\n" not in err


def test_compare_matches_cells_and_writes_report_and_csvs(tmp_path, capsys):
    a = write_folder(tmp_path / "a", "agent-a", AGENT_A)
    b = write_folder(tmp_path / "b", "agent-b", AGENT_B)
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), "--output-dir", str(out), "--detect", "10"]) == 0
    assert "agent-a" in capsys.readouterr().out
    row = read_csv(out / "comparison.csv")[0]
    # Shared tasks t1-t3 (t4 is A's only); cells both scored: t1 9, t2 8 (A's terse repeat 2
    # errs), t3 6 (A's terse all errors). Per-task means A - B: t1 5/9 - 0, t2 0, t3 1/6 - 0.
    d = [5 / 9, 0, 1 / 6]
    assert (row["tasks"], row["cells"], row["cells_left_out"]) == ("3", "23", "4")
    assert float(row["difference"]) == pytest.approx(sum(d) / 3)
    assert float(row["p_value"]) == pytest.approx(0.5) and row["test"] == "exact"
    assert row["mcnemar_p"] == "" and row["too_few_tasks"] == "True"
    plan = read_csv(out / "sample_size.csv")
    assert {(r["variants"], r["repeats"]) for r in plan} >= {("1", "1"), ("3", "3")}
    assert all(r["difference_points"] == "10.0" for r in plan)
    report = (out / "compare_report.md").read_text()
    assert "Sign-flip p" in report and "Tasks needed" in report


def test_compare_needs_two_folders(tmp_path, capsys):
    a = write_folder(tmp_path / "a", "agent-a", AGENT_A)
    assert main(["compare", str(a), "--output-dir", str(tmp_path / "o")]) == 2
    assert "two results folders" in capsys.readouterr().err
