"""Template variants: every protected span of all 500 Verified statements survives each
rewording verbatim; variants are deterministic, differ from the original, and are recorded
with their hash."""

from __future__ import annotations

import re
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
from proctor.variants.spans import blocks, protected_spans
from proctor.variants.template import reword, style_ids

VERIFIED = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench-verified"
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
    steps = reword(text, "steps")
    assert re.search(r"(?m)^1\. ", steps) and re.search(r"(?m)^2\. ", steps)


def test_sections_reordered_moves_the_first_section_last():
    text = "Intro prose here.\n\n### Steps\nRun it.\n\n### Expected\nNo crash."
    out = reword(text, "reordered")
    assert out.index("### Steps") < out.index("### Expected") < out.index("Intro prose")


def test_code_block_with_blank_lines_is_one_protected_block():
    text = "Look:\n\n    a = 1\n\n    b = 2\n\nThat is all."
    kinds = [(b.text, b.protected) for b in blocks(text)]
    assert kinds == [("Look:", False), ("    a = 1\n\n    b = 2", True),
                     ("That is all.", False)]


def test_variants_are_deterministic_with_stable_ids():
    inst = Instance.model_validate(demo.load_rows()[0])
    first, again = template_variants(inst, 3), template_variants(inst, 3)
    assert first == again
    assert [v.variant_id for v in first] == ["formal", "terse", "steps"]
    assert [v.variant_id for v in template_variants(inst, 5)][:3] == ["formal", "terse", "steps"]
    assert len(set(style_ids())) == MAX_VARIATIONS == 15
    with pytest.raises(ValueError, match="at most 15"):
        template_variants(inst, 16)


def test_variants_file_records_each_text_with_its_hash(tmp_path: Path):
    inst = Instance.model_validate(demo.load_rows()[0])
    variants = {inst.instance_id: template_variants(inst, 2)}
    write_variants(tmp_path, [inst], variants)
    rows = read_variants(tmp_path)
    assert set(rows) == {(inst.instance_id, v) for v in ("original", "formal", "terse")}
    for row in rows.values():
        assert row["sha256"] == text_hash(row["text"])
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
