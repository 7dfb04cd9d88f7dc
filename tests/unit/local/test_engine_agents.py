"""The engine with real A2A agents on loopback: `proctor run -f ev.yaml -f agent.yaml`."""

from __future__ import annotations

import json

import pytest

from proctor.agents.server import start_reference_agent
from proctor.cli.main import main
from proctor.core.exits import NotRun
from proctor.core.model import Outcome
from proctor.formats.manifest import parse_manifests
from proctor.local.engine import EngineError, run_evaluation
from proctor.results import ResultsFolder
from proctor.variants import read_variants
from support.llm_servers import ScriptedModel
from support.ports import closed_port


def manifests(endpoint: str, rows: int = 3, **agent_spec: str) -> str:
    extra = "".join(f"\n  {k}: {v}" for k, v in agent_spec.items())
    return f"""apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {{name: ev}}
spec:
  agentRef: {{name: the-agent}}
  dataset: {{name: proctor-demo, maxRows: {rows}}}
  maxConcurrentRows: 2
---
apiVersion: proctor.dev/v1alpha1
kind: AgentUnderTest
metadata: {{name: the-agent}}
spec:
  endpoint: {endpoint}
  requestTimeoutSeconds: 30{extra}
"""


def test_oracle_through_the_cli_resolves_and_reports_usage(tmp_path, capsys):
    with start_reference_agent("oracle") as server:
        files = tmp_path / "ev.yaml"
        files.write_text(manifests(server.url))
        assert main(["run", "-q", "-f", str(files), "--output-dir", str(tmp_path / "o")]) == 0
    results = ResultsFolder(tmp_path / "o").load()
    assert {r.outcome for r in results} == {Outcome.RESOLVED}
    assert all(r.timings.solve_seconds and r.timings.total_seconds for r in results)
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["agent"] == "the-agent"
    assert summary["latency_seconds"]["median"] > 0
    if any(r.usage for r in results):  # the oracle reports token counts
        assert summary["usage"]["total_tokens"] == sum(
            r.usage.total_tokens for r in results if r.usage)
    assert any(line.split()[:2] == ["the-agent", "3"]
               for line in capsys.readouterr().out.splitlines())


def test_an_unreachable_agent_stops_the_run_before_any_item(tmp_path, capsys):
    endpoint = f"http://127.0.0.1:{closed_port()}/"
    files = tmp_path / "ev.yaml"
    files.write_text(manifests(endpoint))
    assert main(["run", "-q", "-f", str(files), "--output-dir", str(tmp_path / "o")]) == 3
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"agent unreachable at {endpoint}" in err
    assert not (tmp_path / "o" / "results.jsonl").exists()
    assert not (tmp_path / "o" / "items").exists()


def test_a_noop_agent_gives_no_op(tmp_path):
    with start_reference_agent("noop") as server:
        docs = parse_manifests(manifests(server.url, rows=2))
        run_evaluation(docs[0], tmp_path, progress=False, agents=docs[1:])
    results = ResultsFolder(tmp_path).load()
    assert {r.outcome for r in results} == {Outcome.NO_OP}
    assert all(r.error_message.startswith("no patch") for r in results)


def test_the_evaluation_needs_its_agent_manifest(tmp_path):
    docs = parse_manifests(manifests("http://127.0.0.1:1/"))
    with pytest.raises(EngineError, match="pass its AgentUnderTest manifest"):
        run_evaluation(docs[0], tmp_path, progress=False, agents=[])


def test_an_unreachable_variants_model_stops_the_run_before_anything(tmp_path, monkeypatch):
    monkeypatch.setenv("PROCTOR_VARIANTS_API_BASE", "http://127.0.0.1:9")  # refused
    store = tmp_path / "store.jsonl"
    text = manifests("http://127.0.0.1:1/").replace(
        "  maxConcurrentRows: 2\n",
        "  maxConcurrentRows: 2\n  promptSensitivity: {enabled: true, strategy: llm, "
        f"model: ollama/nope, variantsFile: {store}}}\n")
    docs = parse_manifests(text)
    out = tmp_path / "out"
    with pytest.raises(NotRun, match=r"variants' model ollama/nope .* cannot be used"):
        run_evaluation(docs[0], out, progress=False, agents=docs[1:])
    assert not out.exists() and not store.exists()  # stopped before anything was written


def _restated(prompt: str) -> str:
    report = prompt.split("variations of this report:\n\n", 1)[1]
    return json.dumps({"variant_1": "In short: " + report, "variant_2": report + " (as seen)"})


def test_llm_variants_are_asked_once_and_every_run_sees_the_same(tmp_path, monkeypatch):
    """The model writes each task's variants once; a second run (another agent's, say)
    reuses them byte for byte, and the summary names the model."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")
    model = ScriptedModel("openai")
    monkeypatch.setenv("PROCTOR_VARIANTS_API_BASE", model.base + "/v1")
    model.script = [_restated]
    store = tmp_path / "store.jsonl"
    with start_reference_agent("oracle") as server:
        text = manifests(server.url, rows=1, taskData="true").replace(
            "  maxConcurrentRows: 2\n",
            "  maxConcurrentRows: 2\n  promptSensitivity: {enabled: true, strategy: llm, "
            f"numVariations: 2, model: openai/test-model, variantsFile: {store}}}\n")
        docs = parse_manifests(text)
        for out in (tmp_path / "a", tmp_path / "b"):
            run_evaluation(docs[0], out, progress=False, agents=docs[1:])
    model.close()
    assert len(model.calls) == 1
    results = ResultsFolder(tmp_path / "a").load()
    assert sorted(r.variant_id for r in results) == ["llm-1", "llm-2", "original"]
    recorded = read_variants(tmp_path / "a")
    for r in results:
        prompt = (tmp_path / "a" / "items" / r.instance_id / r.variant_id / "0" /
                  "prompt.txt").read_text()
        assert prompt == recorded[(r.instance_id, r.variant_id)]["text"]
    assert recorded[(results[0].instance_id, "llm-1")]["text"].startswith("In short: ")
    assert ((tmp_path / "a" / "variants.jsonl").read_bytes()
            == (tmp_path / "b" / "variants.jsonl").read_bytes())
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["green_agent_model"] == "openai/test-model"
    # The one call's tokens (100 in, 50 out on the scripted server), shared by its variants.
    assert summary["variants_usage"]["input_tokens"] == 100
    assert summary["variants_usage"]["output_tokens"] == 50


def test_service_agents_need_a_cluster(tmp_path):
    text = manifests("x").replace("  endpoint: x\n", "  service: {image: agent:1}\n")
    docs = parse_manifests(text)
    with pytest.raises(EngineError, match="needs a cluster"):
        run_evaluation(docs[0], tmp_path, progress=False, agents=docs[1:])


def _sensitivity(text: str, repeats: int = 2) -> str:
    return text.replace("  maxConcurrentRows: 2\n",
                        f"  maxConcurrentRows: 2\n  repeats: {repeats}\n"
                        "  promptSensitivity: {enabled: true, strategy: template, "
                        "numVariations: 3}\n")


@pytest.mark.parametrize("task_data", [False, True])
def test_template_variants_and_repeats_run_on_one_machine(tmp_path, task_data):
    """Each variant's text reaches the agent in place of the problem statement; only with
    taskData can the oracle tell which task a reworded text is, and a resume runs nothing."""
    with start_reference_agent("oracle") as server:
        extra = {"taskData": "true"} if task_data else {}
        docs = parse_manifests(_sensitivity(manifests(server.url, rows=1, **extra)))
        out = tmp_path / "o"
        run_evaluation(docs[0], out, progress=False, agents=docs[1:])
        results = ResultsFolder(out).load()
        assert sorted((r.variant_id, r.repeat) for r in results) == sorted(
            (v, k) for v in ("original", "reordered", "outline", "steps") for k in (0, 1))
        resolved = {r.variant_id for r in results if r.outcome == Outcome.RESOLVED}
        assert resolved == ({"original", "reordered", "outline", "steps"} if task_data
                            else {"original"})
        recorded = read_variants(out)
        for r in results:
            prompt = (out / "items" / r.instance_id / r.variant_id / str(r.repeat) /
                      "prompt.txt").read_text()
            assert prompt == recorded[(r.instance_id, r.variant_id)]["text"]
        run_evaluation(docs[0], out, progress=False, agents=docs[1:])
        assert len(ResultsFolder(out).load()) == 8
        assert (out / "results.jsonl").read_text().count("\n") == 8  # no repeat ran twice


def test_template_variants_from_a_variants_file_are_the_ones_it_makes(tmp_path, capsys):
    """`proctor variants generate` writes the template variants to a file; a run naming it
    reads them there: the same items and texts as a run without it, and an edit in the
    file reaches the agent (read, not made again)."""
    store = tmp_path / "store.jsonl"
    with start_reference_agent("oracle") as server:
        plain = _sensitivity(manifests(server.url, rows=1), repeats=1)
        filed = plain.replace("numVariations: 3}", f"numVariations: 3, variantsFile: {store}}}")
        (tmp_path / "ev.yaml").write_text(filed)
        assert main(["variants", "generate", "-f", str(tmp_path / "ev.yaml"),
                     "--output", str(store)]) == 0
        assert "1 of 1 tasks have variants" in capsys.readouterr().out
        for name, text in (("plain", plain), ("filed", filed)):
            docs = parse_manifests(text)
            run_evaluation(docs[0], tmp_path / name, progress=False, agents=docs[1:])
        record = json.loads(store.read_text())
        record["variants"][0]["text"] = "Edited: " + record["variants"][0]["text"]
        store.write_text(json.dumps(record) + "\n")
        docs = parse_manifests(filed)
        run_evaluation(docs[0], tmp_path / "edited", progress=False, agents=docs[1:])

    def items(name: str) -> list[tuple[str, str]]:
        return sorted((r.item_id, r.variant_id) for r in ResultsFolder(tmp_path / name).load())

    assert items("filed") == items("plain")
    assert [v for _, v in items("plain")].count("original") == 1 and len(items("plain")) == 4
    assert ((tmp_path / "filed" / "variants.jsonl").read_bytes()
            == (tmp_path / "plain" / "variants.jsonl").read_bytes())
    edited = read_variants(tmp_path / "edited")
    assert edited[(record["instance_id"], "reordered")]["text"].startswith("Edited: ")
