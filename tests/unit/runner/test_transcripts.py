"""Transcripts: what the agent sent back, kept bounded; `proctor show` prints an item."""

from __future__ import annotations

import gzip
import json

from proctor.agents.server import start_reference_agent
from proctor.cli.main import main
from proctor.formats.harness_logs import results_dir
from proctor.runner.transcript import FILE, STRING_CAP, TOTAL_CAP, bound

ITEM = "proctor-demo__textkit-1"


def _message(text: str) -> dict:
    return {"role": "ROLE_AGENT", "parts": [{"text": text}]}


def test_a_small_transcript_is_kept_whole():
    small = {"task_id": "t", "messages": [_message("hi")], "artifacts": [], "metadata": [{}]}
    assert bound(small) == {**small, "cut": None}


def test_long_strings_keep_head_and_tail_and_the_middle_messages_go_first():
    long = "A" * 10 + "x" * (3 * STRING_CAP) + "Z" * 10
    kept = bound({"messages": [_message(long)], "artifacts": [], "metadata": []})
    text = kept["messages"][0]["parts"][0]["text"]
    assert text.startswith("A" * 10) and text.endswith("Z" * 10) and len(text) < 2 * STRING_CAP
    assert kept["cut"]["strings_cut"] == 1 and kept["cut"]["chars_cut"] == len(long) - STRING_CAP

    many = [_message(f"step {n} " + "y" * 20_000) for n in range(100)]
    kept = bound({"messages": many, "artifacts": [], "metadata": [{"n": n} for n in range(50)]})
    assert len(json.dumps(kept)) <= TOTAL_CAP + 1000
    texts = [m["parts"][0]["text"][:8] for m in kept["messages"]]
    assert texts[:2] == ["step 0 y", "step 1 y"] and texts[-1] == "step 99 "
    assert kept["cut"]["messages_dropped"] == 100 - len(texts)
    assert kept["cut"]["metadata_dropped"] == 50 and kept["metadata"] == []


def test_show_prints_an_items_task_transcript_patch_log_and_verdict(tmp_path, capsys):
    out = tmp_path / "o"
    with start_reference_agent("editor") as agent:
        assert main(["eval", "--agent", agent.url, "-d", "proctor-demo", "-i", ITEM, "-q",
                     "--sandbox", "process", "--output-dir", str(out)]) == 0
    out = results_dir(out, "run")  # proctor eval's results folder of the run
    work = out / "items" / ITEM / "original" / "0"
    kept = json.loads(gzip.decompress((work / FILE).read_bytes()))
    assert kept["state"] == "completed" and kept["cut"] is None
    sent = kept["messages"] + kept["artifacts"]
    assert any("```diff" in p.get("text", "") for m in sent for p in m["parts"])
    assert kept["metadata"][-1]["usage"]["total_tokens"] > 0
    capsys.readouterr()

    assert main(["show", str(out), ITEM]) == 0
    page = capsys.readouterr().out
    titles = [line for line in page.splitlines() if line.startswith("=== ")]
    assert titles == [f"=== {ITEM} / original / repeat 0: resolved", "=== Task",
                      "=== Transcript", "=== Patch", "=== Test log", "=== Verdict"]
    assert "task " in page and "ended completed" in page and "```diff" in page
    assert ">>>>> Start Test Output" in page and "outcome: resolved" in page

    assert main(["show", str(out), "no-such-item"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no item 'no-such-item'" in err[0]
    assert main(["show", str(tmp_path), ITEM]) == 2
