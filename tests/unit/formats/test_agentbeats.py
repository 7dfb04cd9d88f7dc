"""The Agentbeats platform's files: agentbeats-results.json against the real results
files, `proctor scenario import` on every real scenario, and sharding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from proctor.cli.demo import run_demo
from proctor.cli.main import main
from proctor.core.plan import shard
from proctor.datasets import demo
from proctor.formats.agentbeats import RESULTS_FILE
from proctor.formats.harness_logs import results_dir
from proctor.formats.manifest import load_manifests
from proctor.prepare import load_selection
from proctor.results import ResultsFolder
from support.json_shape import shape
from support.paths import SHARED_DATA, shared

AGENTBEATS = SHARED_DATA / "agentbeats"
REAL_RESULTS = sorted((AGENTBEATS / "results").glob("*.json"))
REAL_SCENARIOS = sorted(AGENTBEATS.rglob("*.toml"))


def test_the_real_files_are_here() -> None:
    shared(AGENTBEATS)
    assert len(REAL_RESULTS) >= 5 and len(REAL_SCENARIOS) >= 7


@pytest.fixture(scope="module")
def demo_results(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    run_demo(out, kinds=("mixed",), progress=False)
    return out / "mixed"


@pytest.mark.parametrize("real", REAL_RESULTS, ids=lambda p: p.stem)
def test_demo_results_file_has_the_real_files_shape(demo_results: Path, real: Path) -> None:
    ours = json.loads((demo_results / RESULTS_FILE).read_text())
    assert shape(ours) == shape(json.loads(real.read_text()))


def test_demo_results_file_holds_the_summary_as_fractions(demo_results: Path) -> None:
    ours = json.loads((demo_results / RESULTS_FILE).read_text())
    summary = json.loads((demo_results / "summary.json").read_text())
    (endpoint,) = ours["participants"].values()
    assert list(ours["participants"]) == ["mixed"] and endpoint.startswith("http://127.0.0.1:")
    (result,) = ours["results"]
    assert {k: v for k, v in result.items() if k != "green_agent_model"} == summary["results"]
    # no llm variants: the configured greenAgentModel, the seed green agent's default
    assert result["green_agent_model"] == "ollama/qwen2.5-coder:7b"
    fractions = [v for k, v in result.items() if k.endswith("_pct")]
    assert all(0 <= v <= 1 for v in fractions) and 0 < result["resolved_pct"] < 1


def test_predictions_run_is_named_after_the_model(tmp_path: Path, capsys) -> None:
    rows = demo.load_rows()[:2]
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps({"instance_id": r["instance_id"], "model_patch":
                                         r["patch"], "model_name_or_path": "acme/coder-7b"})
                             + "\n" for r in rows))
    out = tmp_path / "out"
    assert main(["eval", "-p", str(preds), "-d", "proctor-demo", "--output-dir", str(out),
                 "-q", "--sandbox", "process"]) == 0
    ours = json.loads((results_dir(out, "run") / RESULTS_FILE).read_text())
    assert ours["participants"] == {"acme/coder-7b": "preds.jsonl"}
    assert ours["results"][0]["resolved_pct"] == 1.0
    shared(AGENTBEATS / "results")
    assert shape(ours) == shape(json.loads(REAL_RESULTS[0].read_text()))


# --- scenario import ------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", REAL_SCENARIOS, ids=lambda p: p.name)
def test_every_real_scenario_imports(scenario: Path, tmp_path: Path, capsys) -> None:
    assert main(["scenario", "import", str(scenario), "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    docs = [d for f in sorted(tmp_path.glob("*.yaml")) for d in load_manifests(f)]
    evaluations = [d for d in docs if d.KIND == "Evaluation"]
    assert len(evaluations) == 1
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    if "agentbeats_id" in scenario.read_text().split("[[participants]]")[-1]:
        # the platform's form: the participant is named, not found; one line says what to do
        assert len(notes) == 1 and "--endpoint" in notes[0] and "--image" in notes[0]
        assert not [d for d in docs if d.KIND == "AgentUnderTest"]
        spec = evaluations[0].spec
        assert (spec.dataset.max_rows, spec.max_concurrent_rows) == (20, 5)
        assert spec.green_agent_model == "gemini/gemini-2.5-flash-lite"
    else:
        (agent,) = [d for d in docs if d.KIND == "AgentUnderTest"]
        assert agent.spec.endpoint == "http://127.0.0.1:9021"
        assert evaluations[0].spec.agent_ref.name == agent.name


def test_image_participant_reads_its_secrets(tmp_path: Path, capsys) -> None:
    scenario = shared(AGENTBEATS / "scenario.toml")
    assert main(["scenario", "import", str(scenario), "--output-dir", str(tmp_path),
                 "--image", "dummy-gemini-2.5-flash-lite=ghcr.io/acme/agent:1"]) == 0
    out = capsys.readouterr().out
    (agent,) = [d for f in tmp_path.glob("agentundertest-*.yaml") for d in load_manifests(f)]
    (env,) = agent.spec.sidecar.env
    ref = env.value_from.secret_key_ref
    assert (env.name, env.value, ref.key) == ("GEMINI_API_KEY", "", "GEMINI_API_KEY")
    assert (f'kubectl create secret generic {ref.name} '
            f'--from-literal=GEMINI_API_KEY="${{GEMINI_API_KEY}}"') in out
    assert "note:" not in out


def test_endpoint_and_shards_from_a_scenario(tmp_path: Path, capsys) -> None:
    scenario = tmp_path / "sharded.toml"
    scenario.write_text('[[participants]]\nagentbeats_id = "x"\nname = "Coder"\n'
                        '[config]\nnum_instances = 10\nshard_index = 1\nnum_shards = 3\n'
                        'dataset = "proctor-demo"\nrepeats = 2\n'
                        'prompt_sensitivity = {enabled = true, strategy = "template", '
                        'num_variations = 2}\n')
    assert main(["scenario", "import", str(scenario), "--endpoint",
                 "Coder=http://127.0.0.1:9/"]) == 0
    docs = [d for d in load_manifests_text(capsys.readouterr().out, tmp_path)]
    (evaluation,) = [d for d in docs if d.KIND == "Evaluation"]
    spec = evaluation.spec
    assert (spec.dataset.max_rows, spec.dataset.shard.index, spec.dataset.shard.count) == (
        10, 1, 3)
    assert (spec.repeats, spec.prompt_sensitivity.num_variations) == (2, 2)
    ids = [i.instance_id for i in load_selection(evaluation).instances]
    assert ids == [r["instance_id"] for r in demo.load_rows()[1::3]]


def load_manifests_text(text: str, tmp_path: Path) -> list:
    path = tmp_path / "stream.yaml"
    path.write_text(text)
    return load_manifests(path)


@pytest.mark.parametrize("argv", [
    ["--endpoint", "nobody=http://x/"], ["--endpoint", "no-equals-sign"],
])
def test_bad_import_arguments_are_one_line_errors(argv: list[str], capsys) -> None:
    assert main(["scenario", "import", str(shared(AGENTBEATS / "scenario.toml")), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("proctor: error:") and len(err.strip().splitlines()) == 1


def test_a_file_that_is_not_toml_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[config\n")
    assert main(["scenario", "import", str(bad)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


# --- sharding -------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 3, 7, 12])
def test_shards_are_disjoint_and_cover_every_row(count: int) -> None:
    rows = list(range(10))
    shards = [shard(rows, i, count) for i in range(count)]
    assert sorted(x for s in shards for x in s) == rows
    assert all(s == sorted(s) for s in shards)


@pytest.mark.parametrize(("index", "count"), [(3, 3), (-1, 2), (0, 0)])
def test_a_shard_out_of_range_is_refused(index: int, count: int) -> None:
    with pytest.raises(ValueError, match="shard index"):
        shard([1, 2], index, count)


# --- export swebench-submission -------------------------------------------------------------


def test_export_of_a_demo_run_gives_the_submission_layout(demo_results: Path,
                                                          tmp_path: Path, capsys) -> None:
    out = tmp_path / "20260101_mixed"
    assert main(["export", "swebench-submission", str(demo_results), "--output",
                 str(out)]) == 0
    rows = demo.load_rows()
    preds = [json.loads(line) for line in (out / "all_preds.jsonl").read_text().splitlines()]
    assert sorted(p["instance_id"] for p in preds) == sorted(r["instance_id"] for r in rows)
    assert {p["model_name_or_path"] for p in preds} == {"mixed"}
    assert {"metadata.yaml", "README.md", "logs", "all_preds.jsonl"} <= {
        p.name for p in out.iterdir()}
    results = {r.instance_id: r for r in ResultsFolder(demo_results).load()}
    for p in preds:
        logs = out / "logs" / p["instance_id"]
        assert (logs / "patch.diff").read_text() == p["model_patch"]
        assert (logs / "run_instance.log").exists()
        if results[p["instance_id"]].tests_ran:
            report = json.loads((logs / "report.json").read_text())[p["instance_id"]]
            assert report["resolved"] == (results[p["instance_id"]].outcome.value
                                          == "resolved")
    meta = yaml.safe_load((out / "metadata.yaml").read_text())
    assert meta["tags"]["model"] == ["mixed"] and meta["tags"]["system"]["attempts"] == "1"
    assert set(meta["info"]) == {"name", "site", "report", "authors", "logo"}
    assert "Checklist" in (out / "README.md").read_text()
    # a second export into the same folder would overwrite the stubs the user edited
    assert main(["export", "swebench-submission", str(demo_results), "--output",
                 str(out)]) == 2
