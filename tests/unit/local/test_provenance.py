"""Provenance: every run records where it came from (summary.json, report.md), and
`proctor compare` warns when two runs differ in it."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import socket
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from proctor.agents.server import start_reference_agent
from proctor.cli.demo import demo_manifests, run_demo
from proctor.cli.main import main
from proctor.core.model import Summary
from proctor.core.provenance import (
    AgentCardProvenance,
    DatasetProvenance,
    Provenance,
    differences,
)
from proctor.datasets import demo
from proctor.formats.manifest import parse_manifests
from proctor.local.engine import run_evaluation
from proctor.local.provenance import gather_versions


def installed(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    run_demo(out, kinds=("oracle", "noop"), progress=False)
    return out


def provenance_of(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())["provenance"]


def test_a_demo_run_records_its_provenance(demo_runs):
    p = provenance_of(demo_runs / "oracle")
    assert p["dataset"]["name"] == demo.DATASET_NAME
    assert p["dataset"]["file_sha256"] == sha256(demo.dataset_path())
    assert p["versions"] == {name: installed(name)
                             for name in ("proctor", "swebench", "a2a-sdk")}
    # the card as the reference agent served it over A2A
    assert p["agent"]["name"] == "proctor-oracle"
    assert p["agent"]["version"] == installed("proctor")
    assert p["agent"]["url"].startswith("http://127.0.0.1:")
    assert p["seeds"] == {"variant_generation": None, "sampling": None}
    sandbox = p["sandbox"]
    assert sandbox["kinds"] == ["process"] and sandbox["images"] == {}
    assert "no image" in sandbox["images_note"] and "no CPU or memory limit" in \
        sandbox["limits_applied"]
    machine = p["machine"]
    assert machine["cpu_count"] == os.cpu_count() and machine["memory_total_bytes"] > 0
    assert machine["python"] == platform.python_version()
    assert socket.gethostname() not in (demo_runs / "oracle" / "summary.json").read_text()
    report = (demo_runs / "oracle" / "report.md").read_text()
    assert "## Provenance" in report and sha256(demo.dataset_path()) in report
    assert "proctor-oracle" in report.split("## Provenance")[1]


def test_a_dataset_file_is_recorded_by_its_hash_and_no_agent_by_none(tmp_path):
    data = tmp_path / "rows.jsonl"
    shutil.copy(demo.dataset_path(), data)
    evaluation = parse_manifests(f"""
apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {{name: t}}
spec:
  dataset: {{name: {data}, maxRows: 1}}
  predictions: {{source: gold}}
""")[0]
    summary = run_evaluation(evaluation, tmp_path / "out", progress=False)
    assert summary.provenance is not None
    assert summary.provenance.dataset.file_sha256 == sha256(data)
    assert summary.provenance.agent is None
    assert "none (no agent was asked)" in (tmp_path / "out" / "report.md").read_text()


def copy_with(src: Path, dest: Path, **changes: tuple[str, str, object]) -> Path:
    """A copy of a results folder whose summary's provenance has `changes`
    (name -> (section, key, value))."""
    shutil.copytree(src, dest)
    summary = json.loads((dest / "summary.json").read_text())
    for section, key, value in changes.values():
        summary["provenance"][section][key] = value
    (dest / "summary.json").write_text(json.dumps(summary))
    return dest


def test_compare_warns_once_per_provenance_field_that_differs(demo_runs, tmp_path, capsys):
    a = demo_runs / "oracle"
    b = copy_with(a, tmp_path / "oracle-later",
                  swebench=("versions", "swebench", "9.9.9"),
                  data=("dataset", "file_sha256", "0" * 64),
                  card=("agent", "version", "2.0"),
                  port=("agent", "url", "http://127.0.0.1:1/"))
    assert main(["compare", str(a), str(b), "--output-dir", str(tmp_path / "cmp")]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warned) == 3, warned
    assert {w.split(" provenance ")[1].split(":")[0] for w in warned} == {
        "versions.swebench", "dataset.file_sha256", "agent.version"}
    assert "## Provenance differences" in (tmp_path / "cmp" / "compare_report.md").read_text()


def test_compare_of_two_agents_run_alike_does_not_warn(demo_runs, tmp_path, capsys):
    assert main(["compare", str(demo_runs / "oracle"), str(demo_runs / "noop"),
                 "--output-dir", str(tmp_path / "cmp")]) == 0
    assert "warning" not in capsys.readouterr().err
    assert "Provenance" not in (tmp_path / "cmp" / "compare_report.md").read_text()


def test_a_summary_written_before_provenance_still_reads_and_compares(demo_runs, tmp_path,
                                                                      capsys):
    old = shutil.copytree(demo_runs / "oracle", tmp_path / "old")
    summary = json.loads((old / "summary.json").read_text())
    del summary["provenance"]
    (old / "summary.json").write_text(json.dumps(summary))
    read = Summary.model_validate(summary)
    assert read.provenance is None
    assert "provenance" not in read.model_dump(mode="json")
    assert main(["compare", str(demo_runs / "oracle"), str(old),
                 "--output-dir", str(tmp_path / "cmp")]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warned) == 1 and "provenance: recorded for one run only" in warned[0]


def test_a_damaged_provenance_is_a_one_line_error(demo_runs, tmp_path, capsys):
    bad = copy_with(demo_runs / "oracle", tmp_path / "bad",
                    cpus=("machine", "cpu_count", "many"))
    assert main(["compare", str(demo_runs / "oracle"), str(bad),
                 "--output-dir", str(tmp_path / "cmp")]) == 2
    err = capsys.readouterr().err.strip()
    assert "summary.json" in err and "machine.cpu_count" in err and "\n" not in err
    assert not (tmp_path / "cmp").exists()


def provenance(agent: AgentCardProvenance | None = None, rows: str = "abc") -> Provenance:
    return Provenance(dataset=DatasetProvenance(name="d", rows_sha256=rows), agent=agent)


def test_differences_count_one_agents_versions_not_two_agents_or_their_ports():
    one = AgentCardProvenance(name="a", version="1", url="http://127.0.0.1:1/")
    moved = AgentCardProvenance(name="a", version="1", url="http://127.0.0.1:2/")
    newer = AgentCardProvenance(name="a", version="2", url="http://127.0.0.1:1/")
    other = AgentCardProvenance(name="b", version="7", url="http://127.0.0.1:1/")
    assert differences(provenance(one), provenance(moved)) == []
    assert differences(provenance(one), provenance(other)) == []
    assert differences(provenance(one), provenance(newer)) == ["agent.version: '1' vs '2'"]
    assert differences(provenance(one), provenance(one, rows="def")) == [
        "dataset.rows_sha256: 'abc' vs 'def'"]
    assert differences(None, None) == []


def test_a_package_that_is_absent_is_said_to_be_not_installed():
    found = gather_versions(("proctor", "no-such-package-for-proctor"))
    assert found == {"proctor": installed("proctor"),
                     "no-such-package-for-proctor": "not installed"}


def test_a_finished_run_resumed_with_its_agent_gone_says_why_it_has_no_card(tmp_path):
    with start_reference_agent("noop") as server:
        evaluation, agent = demo_manifests("noop", server.url, 2)
        first = run_evaluation(evaluation, tmp_path, progress=False, agents=[agent])
    assert first.provenance.agent.name == "proctor-noop"
    again = run_evaluation(evaluation, tmp_path, progress=False, agents=[agent])
    card = again.provenance.agent
    assert card.name == "" and server.url.rstrip("/") in card.error
    assert again.results == first.results
