"""The `llm` variants strategy through litellm, against model servers on loopback: an
OpenAI-compatible one and one speaking Ollama's protocol (the default model string's).
Good replies and bad ones; the store's reuse; real Verified statements kept whole."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from proctor.cli.main import main
from proctor.core.model import Instance
from proctor.variants import store
from proctor.variants.llm import ModelSettings, ModelUnreachable, check, generate
from proctor.variants.spans import protected_spans
from proctor.variants.template import reword
from support.calc_task import make_instance
from support.llm_servers import HTTP500, SLOW, ScriptedModel
from support.paths import SHARED_DATA

ISSUE = ("Hi, calling `Table.read` on a file fails.\n\n"
         "```python\nfrom astro.io import Table\nTable.read('data/x.qdp')\n```\n\n"
         "I expected it to load the table, but it raises an error. Could someone look at "
         "this please?")
REWORDED = [ISSUE.replace("Hi, calling", "Hello, invoking").replace("Could someone look at "
                                                                    "this please?",
                                                                    "Please take a look."),
            ISSUE.replace("I expected it to load the table, but it raises an error.",
                          "Loading the table was the expectation; an error is raised.")]


def _reply(*texts: str) -> str:
    return json.dumps({f"variant_{i}": t for i, t in enumerate(texts, 1)})


def _rewordings(prompt: str) -> str:
    """A scripted model: the report in the prompt, reworded by two fixed styles."""
    report = prompt.split("variations of this report:\n\n", 1)[1]
    return _reply(reword(report, "formal"), reword(report, "terse"))


@pytest.fixture(params=["openai", "ollama"])
def server(request, monkeypatch):
    """A scripted model server and the settings that reach it through litellm."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")  # the client wants one; unchecked
    srv = ScriptedModel(request.param)
    if request.param == "openai":
        settings = ModelSettings("openai/test-model", srv.base + "/v1", timeout_s=1.0)
    else:
        settings = ModelSettings("ollama/test-model", srv.base, timeout_s=1.0)
    yield srv, settings
    srv.close()


def _model_calls(srv: ScriptedModel) -> int:
    return sum(1 for c in srv.calls if not c["path"].endswith("/api/show"))


def test_a_good_reply_gives_the_variants_whole(server):
    srv, settings = server
    srv.script = [_reply(*REWORDED)]
    gen = generate(ISSUE, 2, settings)
    assert gen.ok and gen.texts == REWORDED and gen.attempts == 1
    assert gen.prompt_tokens == 100 and gen.completion_tokens == 50
    assert ISSUE in srv.calls[0]["prompt"]


BAD = {
    "empty": ("", "empty reply"),
    "echo": (_reply(ISSUE, REWORDED[1]), "variant_1: same as the original"),
    "code altered": (_reply(REWORDED[0].replace("x.qdp", "y.qdp"), REWORDED[1]),
                     "variant_1: protected span changed or missing"),
    "split over lines": ("\n".join(REWORDED), "reply is not JSON"),
    "invalid JSON": ('{"variant_1": "Hello, invoking', "reply is not JSON"),
    "duplicate": (_reply(REWORDED[0], REWORDED[0]), "variant_2: same as variant_1"),
    "missing field": (json.dumps({"variant_1": REWORDED[0]}), "reply lacks variant_2"),
    "too short": (_reply(REWORDED[0], "Table.read fails"), "variant_2: "),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_reply_is_retried_then_recorded_as_failed_never_the_original(server, case):
    srv, settings = server
    reply, reason = BAD[case]
    srv.script = [reply] * settings.attempts
    gen = generate(ISSUE, 2, settings)
    assert not gen.ok and gen.texts == [] and reason in gen.reason
    assert _model_calls(srv) == settings.attempts


def test_a_bad_reply_then_a_good_one_succeeds_on_the_retry(server):
    srv, settings = server
    srv.script = ["\n".join(REWORDED), _reply(*REWORDED)]
    gen = generate(ISSUE, 2, settings)
    assert gen.ok and gen.attempts == 2 and gen.texts == REWORDED


@pytest.mark.parametrize(("step", "reason"), [(SLOW, "Timeout"), (HTTP500, "InternalServerError")])
def test_timeouts_and_server_errors_are_retried_then_recorded(server, step, reason):
    srv, settings = server
    srv.script = [step] * settings.attempts
    gen = generate(ISSUE, 2, settings)
    assert not gen.ok and gen.reason.startswith("model call failed") and reason in gen.reason
    assert gen.attempts == settings.attempts


def test_a_model_that_does_not_exist_stops_at_once(server):
    srv, settings = server
    missing = ModelSettings(settings.model.replace("test-model", "no-such-model"),
                            settings.api_base, timeout_s=1.0)
    with pytest.raises(ModelUnreachable, match=r"no-such-model .* cannot be used"):
        generate(ISSUE, 2, missing)
    assert _model_calls(srv) == 1  # not retried


def test_a_server_that_is_not_there_stops_at_once():
    settings = ModelSettings("ollama/qwen2.5-coder:7b", "http://127.0.0.1:9", timeout_s=1.0)
    with pytest.raises(ModelUnreachable, match="nothing was run"):
        generate(ISSUE, 2, settings)


def _instance(iid: str, text: str) -> Instance:
    return make_instance("a" * 40, instance_id=iid, problem_statement=text)


def test_stored_variants_are_reused_byte_for_byte_with_no_model_call(server, tmp_path):
    srv, settings = server
    # Time enough that no first request is given up on and sent again: a request given up
    # on under load can still reach the server after the first pass, and count as a call.
    settings = dataclasses.replace(settings, timeout_s=60.0)
    path = tmp_path / "variants.jsonl"
    tasks = [_instance("o__r-1", ISSUE), _instance("o__r-2", ISSUE + "\n\nThanks!")]
    srv.script = [_rewordings] * 2
    source = store.llm_source(settings)
    first = store.ensure(path, tasks, "verified", "rev1", source, 2)
    stored = path.read_bytes()
    calls = len(srv.calls)
    seen: list[str] = []
    again = store.ensure(path, tasks, "verified", "rev1", source, 2,
                         progress=lambda done, total, iid, what: seen.append(what))
    assert len(srv.calls) == calls and seen == ["stored", "stored"]
    assert path.read_bytes() == stored and again == first
    assert store.variants_of(again)["o__r-1"][0].text == reword(ISSUE, "formal")
    # Another N (or model, revision) is another key: made anew.
    srv.script = [lambda p: _reply(*REWORDED, REWORDED[0] + " Thank you.")]
    store.ensure(path, tasks[:1], "verified", "rev1", source, 3)
    assert len(srv.calls) > calls


def test_a_failed_generation_stays_failed_until_retry_failed(server, tmp_path):
    srv, settings = server
    path = tmp_path / "variants.jsonl"
    tasks = [_instance("o__r-1", ISSUE)]
    srv.script = [""] * settings.attempts
    source = store.llm_source(settings)
    failed = store.ensure(path, tasks, "verified", "", source, 2)["o__r-1"]
    assert failed["status"] == "failed" and "empty reply" in failed["reason"]
    assert store.variants_of({"o__r-1": failed}) == {}  # left out, not the original
    calls = len(srv.calls)
    assert store.ensure(path, tasks, "verified", "", source, 2)["o__r-1"] == failed
    assert len(srv.calls) == calls
    srv.script = [_reply(*REWORDED)]
    retried = store.ensure(path, tasks, "verified", "", source, 2, retry_failed=True)
    assert retried["o__r-1"]["status"] == "ok"
    assert [v.text for v in store.variants_of(retried)["o__r-1"]] == REWORDED
    assert [r["status"] for r in store.load(path).values()] == ["ok"]  # replaces the failure


VERIFIED = SHARED_DATA / "swebench-verified"
MULTI_PARAGRAPH = ["astropy__astropy-14365", "matplotlib__matplotlib-24149",
                   "scikit-learn__scikit-learn-25973"]


def _statements() -> dict[str, str]:
    import pyarrow.parquet as pq

    path = VERIFIED / "SWE-bench_Verified_test.parquet"
    if not path.exists():
        pytest.skip("the SWE-bench Verified parquet is not on this machine")
    rows = pq.read_table(path, columns=["instance_id", "problem_statement"]).to_pylist()
    return {r["instance_id"]: r["problem_statement"] for r in rows
            if r["instance_id"] in MULTI_PARAGRAPH}


def test_real_verified_statements_come_back_whole_with_every_span_intact(server):
    srv, settings = server
    statements = _statements()
    assert sorted(statements) == sorted(MULTI_PARAGRAPH)
    for iid, text in statements.items():
        assert "```" in text and "Traceback (most recent call last)" in text, iid
        srv.script = [_rewordings]
        gen = generate(text, 2, settings)
        assert gen.ok, (iid, gen.reason)
        assert gen.texts == [reword(text, "formal"), reword(text, "terse")]
        for variant in gen.texts:
            assert variant.count("\n") >= text.count("\n") - 5  # whole, not fragments
            assert all(span in variant for span in protected_spans(text))


def test_check_names_each_problem():
    problems = check(ISSUE, [ISSUE, "short", REWORDED[0], REWORDED[0]])
    assert problems[0] == ["same as the original"]
    assert any("protected span" in p for p in problems[1])
    assert any("length" in p for p in problems[1])
    assert problems[2] == [] and problems[3] == ["same as variant_3"]


EVALUATION = """apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {{name: ev}}
spec:
  dataset: {{name: proctor-demo, maxRows: 2}}
  predictions: {{source: gold}}
  promptSensitivity: {{enabled: true, numVariations: 2{extra}}}
"""


@pytest.fixture
def ollama(monkeypatch):
    """An Ollama-protocol server serving the default greenAgentModel, found by litellm
    through OLLAMA_API_BASE as a local Ollama would be."""
    srv = ScriptedModel("ollama", models=("qwen2.5-coder:7b",))
    monkeypatch.setenv("OLLAMA_API_BASE", srv.base)
    monkeypatch.delenv("PROCTOR_VARIANTS_API_BASE", raising=False)
    yield srv
    srv.close()


def _restated(prompt: str) -> str:
    report = prompt.split("variations of this report:\n\n", 1)[1]
    return _reply("In short: " + report, report + " (as reported)")


def test_variants_generate_then_show_with_the_default_model(tmp_path, ollama, capsys):
    manifest = tmp_path / "ev.yaml"
    manifest.write_text(EVALUATION.format(extra=""))
    out = tmp_path / "variants.jsonl"
    ollama.script = [_restated, "not json", "not json", "not json"]
    assert main(["variants", "generate", "-f", str(manifest), "--output", str(out)]) == 1
    captured = capsys.readouterr()
    assert "1/2" in captured.err and "2/2" in captured.err and "1 failed" in captured.out
    made = out.read_bytes()
    calls = len(ollama.calls)
    # Again: the stored variants and the stored failure, with no model call.
    assert main(["variants", "generate", "-f", str(manifest), "--output", str(out)]) == 1
    assert len(ollama.calls) == calls and out.read_bytes() == made
    ollama.script = [_restated]
    assert main(["variants", "generate", "-f", str(manifest), "--output", str(out),
                 "--retry-failed"]) == 0
    assert len(ollama.calls) > calls
    capsys.readouterr()
    records = list(store.load(out).values())
    first = records[0]["instance_id"]
    assert main(["variants", "show", str(out), "--instance", first]) == 0
    shown = capsys.readouterr().out
    assert f"=== {first}  model ollama/qwen2.5-coder:7b  N 2  ok ===" in shown
    assert "--- original ---" in shown
    assert re.search(r"--- llm-1: similarity 0\.\d{3}, checks passed ---", shown)
    assert re.search(r"(?m)^llm-1 +1 +0\.\d{3}", shown)  # the per-variant summary
    assert "In short: " in shown
    if protected_spans(records[0]["original"]):
        assert "⟦" in shown


def test_variants_generate_stops_with_one_line_when_the_model_is_missing(tmp_path, ollama,
                                                                         capsys):
    manifest = tmp_path / "ev.yaml"
    manifest.write_text(EVALUATION.format(extra=", model: ollama/no-such-model"))
    out = tmp_path / "variants.jsonl"
    assert main(["variants", "generate", "-f", str(manifest), "--output", str(out)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ollama/no-such-model" in err[0] and "nothing was run" in err[0]
    assert not out.exists()


def test_variants_show_names_a_bad_file(tmp_path, capsys):
    bad = tmp_path / "v.jsonl"
    bad.write_text("{not json\n")
    assert main(["variants", "show", str(bad)]) == 2
    assert "v.jsonl:1: not a variants record" in capsys.readouterr().err
    assert main(["variants", "show", str(tmp_path / "none.jsonl")]) == 2
    manifest = tmp_path / "ev.yaml"
    manifest.write_text(EVALUATION.format(extra=""))
    capsys.readouterr()
    assert main(["variants", "generate", "-f", str(manifest), "--output", str(bad)]) == 2
    assert "v.jsonl:1: not a variants record" in capsys.readouterr().err


def test_one_file_holds_both_strategies_and_each_uses_its_own(tmp_path, ollama, capsys):
    """llm and template records side by side: each Evaluation takes the records of its
    own strategy (another strategy's key differs), the llm ones with no new model call."""
    from proctor.formats.manifest import parse_manifests
    from proctor.prepare import load_selection, prompt_variants
    from proctor.variants import variants_for

    out = tmp_path / "variants.jsonl"
    llm, template = tmp_path / "llm.yaml", tmp_path / "template.yaml"
    llm.write_text(EVALUATION.format(extra=f", variantsFile: {out}"))
    template.write_text(EVALUATION.format(extra=f", strategy: template, variantsFile: {out}"))
    ollama.script = [_restated] * 2
    assert main(["variants", "generate", "-f", str(llm), "--output", str(out)]) == 0
    calls = len(ollama.calls)
    assert main(["variants", "generate", "-f", str(template), "--output", str(out)]) == 0
    records = list(store.load(out).values())
    assert sorted(r["strategy"] for r in records) == ["llm", "llm", "template", "template"]
    capsys.readouterr()
    assert main(["variants", "show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "  model ollama/qwen2.5-coder:7b  N 2  ok ===" in shown
    assert "  strategy template  N 2  ok ===" in shown and "--- reordered: similarity" in shown
    for manifest in (llm, template):
        evaluation = parse_manifests(manifest.read_text())[0]
        selection = load_selection(evaluation)
        variants = prompt_variants(evaluation, selection)
        if manifest == llm:
            assert {v.variant_id for vs in variants.values() for v in vs} == {"llm-1", "llm-2"}
            assert all(vs[0].text.startswith("In short: ") for vs in variants.values())
        else:
            assert variants == variants_for(selection.instances, 2)
    assert len(ollama.calls) == calls and len(store.load(out)) == 4


def test_variants_generate_refuses_more_template_variants_than_exist(tmp_path, capsys):
    manifest = tmp_path / "ev.yaml"
    manifest.write_text(EVALUATION.format(extra=", strategy: template").replace(
        "numVariations: 2", "numVariations: 16"))
    out = tmp_path / "variants.jsonl"
    assert main(["variants", "generate", "-f", str(manifest), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "at most 14" in err[0] and not out.exists()
