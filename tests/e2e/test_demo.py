"""`proctor demo`: the reference agents over A2A on the whole demo dataset."""

from __future__ import annotations

import csv
import json
import re

from proctor.cli.main import main
from proctor.core.model import Outcome
from proctor.datasets import demo
from proctor.results import ResultsFolder
from support.paths import ROOT

NON_ERROR = set(Outcome) - {Outcome.ERROR}
README = ROOT / "README.md"
LATENCY = re.compile(r"\s\d+\.\d s\s")


def readme_leaderboard() -> dict[str, list[str]]:
    """The demo's leaderboard as the README's Quick start shows it, each agent's columns
    but its latency (which varies from run to run)."""
    rows = re.findall(r"^((?:oracle|editor|mixed|noop) +\d.*%.*)$", README.read_text(), re.M)
    return {row.split()[0]: LATENCY.sub(" ", row).split() for row in rows}


def tables(text: str) -> dict[str, dict[str, str]]:
    """Each agent's cells, header -> cell, over the tables of a text whose header starts
    with `| Agent |`."""
    found: dict[str, dict[str, str]] = {}
    for table in re.findall(r"^(\| Agent \|.*\n\|[-|]+\|\n(?:\|.*\n)+)", text, re.M):
        header, _, *rows = [[c.strip() for c in line.strip("|").split("|")]
                            for line in table.splitlines()]
        for row in rows:
            found.setdefault(row[0], {}).update(zip(header, row, strict=True))
    return found


def test_demo_leaderboard_and_results(tmp_path, capsys):
    assert main(["demo", "-q", "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    outcomes = {kind: [r.outcome for r in ResultsFolder(tmp_path / kind).load()]
                for kind in ("oracle", "noop", "editor", "mixed")}
    tasks = len(demo.load_rows())
    assert all(len(found) == tasks for found in outcomes.values())
    assert set(outcomes["oracle"]) == {Outcome.RESOLVED}
    assert set(outcomes["editor"]) == {Outcome.RESOLVED}
    assert set(outcomes["noop"]) == {Outcome.NO_OP}
    assert set(outcomes["mixed"]) == NON_ERROR, "mixed must produce all six outcomes"
    for kind in outcomes:
        summary = json.loads((tmp_path / kind / "summary.json").read_text())
        assert summary["results"]["total_instances"] == tasks
    # one leaderboard, best first, that fits a 100-column terminal
    rows = [line for line in out.splitlines() if "%" in line]
    assert sorted(r.split()[0] for r in rows) == sorted(outcomes)
    assert rows[-1].split()[0] == "noop"
    assert max(len(line) for line in rows) <= 100
    # the README shows this leaderboard: it must be what the demo prints
    assert {r.split()[0]: LATENCY.sub(" ", r).split() for r in rows} == readme_leaderboard()


def test_reliability_demo_gives_the_expected_figures(tmp_path, capsys):
    """Oracle: perfectly robust and consistent; sensitive: sways with wording and repeats."""
    assert main(["demo", "--reliability", "-q", "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| oracle |" in out and "| sensitive |" in out
    with open(tmp_path / "analysis" / "agent_level_sensitivity.csv", newline="") as fh:
        rows = {r["agent"]: r for r in csv.DictReader(fh)}
    oracle, sensitive = rows["oracle"], rows["sensitive"]
    tasks = len(demo.load_rows())
    for row in (oracle, sensitive):
        assert (row["tasks"], row["variants"], row["repeats"]) == (str(tasks), "4", "3")
        assert row["error_items"] == "0"
    assert float(oracle["S_prompt"]) == 1 and float(oracle["C_out"]) == 1
    assert float(sensitive["S_prompt"]) < 1 and float(sensitive["C_out"]) < 1
    assert float(sensitive["sigma2_prompt"]) > 0 and float(sensitive["sigma2_run"]) > 0
    # the sensitive agent reports its chance as its confidence: calibration end to end
    items = tasks * 4 * 3
    assert (oracle["confidence_items"], sensitive["confidence_items"]) == ("0", str(items))
    assert 0 < float(sensitive["ece"]) < 0.25 and 0.5 < float(sensitive["auroc"]) <= 1
    assert 0 < float(sensitive["brier"]) < 0.25
    assert float(oracle["abstention_rate"]) == 0 < float(sensitive["abstention_rate"])
    report = (tmp_path / "analysis" / "sensitivity_report.md").read_text()
    assert "## Predictability: calibration and abstention" in report
    assert "| oracle | 0.000" in report and "0 (none reported)" in report
    # the README's excerpt of this report is what the report says
    shown, real = tables(README.read_text()), tables(report)
    assert set(shown) == {"oracle", "sensitive"}
    for agent, cells in shown.items():
        assert cells.items() <= real[agent].items(), agent
    assert (tmp_path / "analysis" / "calibration.png").stat().st_size > 0
    # how far each variant is from the original: per text in variants.csv, per style here
    with open(tmp_path / "analysis" / "variants.csv", newline="") as fh:
        near = [float(r["similarity"]) for r in csv.DictReader(fh)
                if r["variant_id"] != "original"]
    assert len(near) == 2 * tasks * 3 and all(0 < x < 1 for x in near)
    assert "## How far the variants are from the original" in report
    assert re.search(rf"\| reordered \| {tasks} \| 0\.\d{{3}} \|", report)
    variants = [json.loads(line) for line in
                (tmp_path / "sensitive" / "variants.jsonl").read_text().splitlines()]
    assert {v["variant_id"] for v in variants} == {"original", "reordered", "outline", "steps"}
