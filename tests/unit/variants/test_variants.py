"""Template variants: every protected span of all 500 Verified statements survives each
rewording verbatim; variants are deterministic, differ from the original, and are recorded
with their hash."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from pathlib import Path

import pytest

from proctor.core.model import Instance
from proctor.datasets import demo
from proctor.variants import (
    MAX_VARIATIONS,
    read_variants,
    template_variants,
    text_hash,
    write_variants,
)
from proctor.variants.similarity import similarity
from proctor.variants.spans import blocks, protected_spans
from proctor.variants.template import STYLES, reword, style_ids
from support.paths import SHARED_DATA

VERIFIED = SHARED_DATA / "swebench-verified"
PARQUET_NAME = "SWE-bench_Verified_test.parquet"


def _verified_statements() -> list[tuple[str, str]]:
    import pyarrow.parquet as pq

    if (VERIFIED / PARQUET_NAME).exists():
        table = pq.read_table(VERIFIED / PARQUET_NAME, columns=["instance_id",
                                                               "problem_statement"])
        return list(zip(*(table.column(c).to_pylist() for c in table.column_names),
                        strict=True))
    pytest.skip("the SWE-bench Verified parquet is not on this machine")


# Checked independently of the detector in `spans`: what an agent must read exactly.
_INDEPENDENT = [
    re.compile(r"(?ms)^[ \t]*```.*?^[ \t]*```"),                  # fenced code blocks
    re.compile(r"https?://[^\s<>\"')\]]+"),                   # URLs
    re.compile(r"``[^`\n]+``|(?<!`)`[^`\n]+`(?!`)"),         # inline code
    re.compile(r"(?m)^.*Traceback \(most recent call last\).*$"),
    re.compile(r"(?m)^\s*File \".*\", line \d+.*$"),         # traceback frames
    re.compile(r"[\w./-]*[/\\][\w./\\-]+\.\w+"),             # file paths
    re.compile(r"\b[A-Za-z_]\w*_\w+\b"),                      # snake_case identifiers
    re.compile(r"\b[A-Za-z_][\w]*\.[A-Za-z_][\w.]*\("),       # dotted calls
    re.compile(r"(?m)^>>> .*$"),                              # interpreter input
    re.compile(r"(?m)^[ \t]+\S.*$"),                          # indented lines
]


def _must_keep(text: str) -> Counter[str]:
    found: Counter[str] = Counter(protected_spans(text))
    for pattern in _INDEPENDENT:
        found.update(m.group(0) for m in pattern.finditer(text))
    return found


def test_every_protected_span_of_every_verified_statement_survives_every_variant():
    rows = _verified_statements()
    assert len(rows) == 500
    failures = []
    for instance_id, text in rows:
        keep = _must_keep(text)
        for vid in style_ids():
            variant = reword(text, vid)
            if variant == text:
                failures.append(f"{instance_id}/{vid}: equals the original")
            lost = [s for s, n in keep.items() if variant.count(s) < min(n, text.count(s))]
            if lost:
                failures.append(f"{instance_id}/{vid}: lost {lost[0][:80]!r}")
    assert not failures, f"{len(failures)} failures, e.g. {failures[:5]}"


def test_variants_reword_the_prose():
    text = ("Hi all,\nI think the parser doesn't handle `None` here. It's really a bug in "
            "src/parse.py, please fix it. Thanks!")
    formal = reword(text, "formal")
    assert "does not handle `None`" in formal and "defect in src/parse.py" in formal
    terse = reword(text, "terse")
    assert "Hi all" not in terse and "I think" not in terse and "Thanks" not in terse
    assert "src/parse.py" in terse and "`None`" in terse
    steps = reword(text.replace("Thanks!", "Calling it with an empty string raises. It "
                                "should return an empty list. Thanks!"), "steps")
    assert steps.index("Problem: The parser doesn't handle `None` here.") \
        < steps.index("What happens:\n1. It's a bug in src/parse.py, fix it.\n"
                      "2. Calling it with an empty string raises.") \
        < steps.index("What should happen:\n3. It should return an empty list.")


def test_reordered_puts_parts_last_first_and_keeps_a_label_with_its_block():
    text = "Intro prose here.\n\n### Steps\nRun it.\n\n### Expected\nNo crash."
    out = reword(text, "reordered")
    assert out.index("### Expected") < out.index("### Steps") < out.index("Intro prose")
    text = ("It fails. Nobody knows why. Since 2.0.\n\nThis fails with:\n\n"
            "```\nboom()\n```\n\nGood:\n\n    ok()\n")
    out = reword(text, "reordered")
    assert out.index("Good:") < out.index("ok()") < out.index("This fails with:") \
        < out.index("boom()") < out.index("Nobody knows why. Since 2.0. It fails.")


def test_outline_files_every_sentence_under_a_heading():
    text = ("The parser crashes on empty input. It raises an error. It should return "
            "an empty list. Run the snippet below.\n\n```\nparse('')\n```\n")
    out = reword(text, "outline")
    assert out.index("Summary: The parser crashes") < out.index("Observed behaviour:\n- It "
                                                                 "raises an error.")
    assert out.index("How to reproduce:\n- Run the snippet below.") < out.index("parse('')")
    assert out.index("parse('')") < out.index("Expected behaviour:\n- It should return")


def test_outline_files_a_traceback_under_observed_before_the_code_that_raises_it():
    text = ("Summing an empty list fails.\n\nI ran this:\n\n```\nsum_all([])\n```\n\n"
            "and got:\n\n```\n"
            "Traceback (most recent call last):\nValueError: empty\n```\n\n"
            "It should return 0.")
    out = reword(text, "outline")
    assert out.index("Summary: Summing an empty list fails.") < out.index("Observed behaviour:") \
        < out.index("and got:\n\n```\nTraceback") \
        < out.index("How to reproduce:") < out.index("I ran this:\n\n```\nsum_all([])") \
        < out.index("Expected behaviour:\n- It should return 0.")


def test_the_words_a_quoted_block_completes_move_with_it():
    """A sentence that runs into a block ("could be changed to") and the lower-case words
    that finish it after the block stay beside the block wherever a style moves it."""
    text = ("Names may end in a newline.\n\nThe regex could be changed to\n\n"
            "    r'\\A\\w+\\Z'\n\nso that it rejects them.\n\nNobody noticed before. It is old.")
    for style in ("reordered", "outline", "steps"):
        out = reword(text, style)
        assert "The regex could be changed to\n\n    r'\\A\\w+\\Z'\n\nso that it rejects " \
            "them." in out, style


def test_a_paragraph_with_code_lines_keeps_its_sentences_rewordable():
    """A tracker without blank lines (Django's Trac) puts prose and code in one paragraph:
    the indented code is protected, the sentences around it are not."""
    text = ("The save call uses the wrong database.\nFor example:\n"
            "\tcontent_type.save(update_fields={'model'})\n"
            "It should pass the alias it was given, like the other calls do.")
    kinds = [(b.text, b.protected) for b in blocks(text)]
    assert kinds == [("The save call uses the wrong database.", False),
                     ("For example:\n\tcontent_type.save(update_fields={'model'})", True),
                     ("It should pass the alias it was given, like the other calls do.",
                      False)]
    formal = reword(text, "formal")
    assert "employs the incorrect database" in formal
    assert "\tcontent_type.save(update_fields={'model'})" in formal


def test_similarity_is_one_for_the_same_text_and_falls_as_parts_move_or_change():
    text = "First part of the report. Second part, with more words in it."
    assert similarity(text, text) == 1.0
    moved = similarity(text, "Second part, with more words in it. First part of the report.")
    changed = similarity(text, "Opening of the report. Later portion, containing extra words.")
    assert 0 < changed < moved < 1


def test_styles_vary_most_different_first_within_length_and_the_span_test_holds_above():
    """Over the first 60 Verified statements: each style's median similarity, in the order
    variants are taken, rises (most different first); the first three pooled at most 0.8
    (token-level here; benchmarks/variant_similarity.py prints issue 26's character-level
    figure). Every variant of every statement stays within 75-150% of the original's
    length."""
    rows = _verified_statements()
    medians = {}
    for style in STYLES:
        medians[style] = statistics.median(similarity(t, reword(t, style)) for _, t in rows[:60])
    pooled = statistics.median(similarity(t, reword(t, s)) for _, t in rows[:60]
                               for s in style_ids()[:3])
    print("median similarity over 60 statements:",
          ", ".join(f"{s} {m:.3f}" for s, m in medians.items()), f"; first three {pooled:.3f}")
    assert list(medians.values()) == sorted(medians.values())
    assert pooled <= 0.8  # 0.90 with template VERSION 2, 0.985 with VERSION 1
    for instance_id, text in rows:
        for vid in style_ids():
            ratio = len(reword(text, vid)) / len(text)
            assert 0.75 <= ratio <= 1.5, (instance_id, vid, ratio)


def test_code_block_with_blank_lines_is_one_protected_block():
    text = "Look:\n\n    a = 1\n\n    b = 2\n\nThat is all."
    kinds = [(b.text, b.protected) for b in blocks(text)]
    assert kinds == [("Look:", False), ("    a = 1\n\n    b = 2", True),
                     ("That is all.", False)]


def test_variants_are_deterministic_with_stable_ids():
    inst = Instance.model_validate(demo.load_rows()[0])
    first, again = template_variants(inst, 3), template_variants(inst, 3)
    assert first == again
    assert [v.variant_id for v in first] == ["reordered", "outline", "steps"]
    assert [v.variant_id for v in template_variants(inst, 5)][:3] == [
        "reordered", "outline", "steps"]
    assert len(set(style_ids())) == MAX_VARIATIONS == 14
    with pytest.raises(ValueError, match="at most 14"):
        template_variants(inst, 15)


def test_variants_file_records_each_text_with_its_hash(tmp_path: Path):
    inst = Instance.model_validate(demo.load_rows()[0])
    variants = {inst.instance_id: template_variants(inst, 2)}
    write_variants(tmp_path, [inst], variants)
    rows = read_variants(tmp_path)
    assert set(rows) == {(inst.instance_id, v) for v in ("original", "reordered", "outline")}
    for row in rows.values():
        assert row["sha256"] == text_hash(row["text"])
        assert row["similarity"] == (1.0 if row["variant_id"] == "original" else round(
            similarity(inst.problem_statement, row["text"]), 4))
    assert rows[(inst.instance_id, "original")]["text"] == inst.problem_statement


def test_a_store_keeps_template_variants_apart_from_llm_ones(tmp_path: Path):
    """Template records: strategy template, no model, no usage, the texts the strategy
    makes; an llm record of the same task is another key, never taken for them."""
    from proctor.variants import store
    from proctor.variants.llm import Generation, ModelSettings

    inst = Instance.model_validate(demo.load_rows()[0])
    path = tmp_path / "v.jsonl"
    llm = store.llm_source(ModelSettings("openai/m"))
    written = Generation(texts=["a", "b"], prompt_tokens=10, completion_tokens=4)
    offline = store.Source(llm.strategy, llm.model, llm.version, llm.ids, lambda t, n: written)
    store.ensure(path, [inst], "d", "r", offline, 2)
    made = store.ensure(path, [inst], "d", "r", store.TEMPLATE, 2)[inst.instance_id]
    assert (made["strategy"], made["model"]) == ("template", "")
    assert "cost_usd" not in made and all("cost_usd" not in v for v in made["variants"])
    assert store.variants_of({inst.instance_id: made}) == {
        inst.instance_id: template_variants(inst, 2)}
    stored = list(store.load(path).values())
    assert [r["strategy"] for r in stored] == ["llm", "template"]
    assert stored[0]["variants"][0]["prompt_tokens"] == 5  # its share of the call
