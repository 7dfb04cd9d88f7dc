"""`proctor variants show`: a store's records as text a person checks by eye (pure).

Each task: its model (or strategy template), status and reason, the original, then each
variant with the original's protected spans marked ⟦like this⟧ where they were found, and
the checks' results and its similarity to the original, so a reader sees at once what the
model kept and what it reworded; at the end, the similarity per variant id.
"""

from __future__ import annotations

from collections import defaultdict

from proctor.variants.llm import check
from proctor.variants.similarity import similarity, spread
from proctor.variants.spans import protected_spans

OPEN, CLOSE = "⟦", "⟧"


def mark(text: str, spans: list[str]) -> str:
    """`text` with each of `spans` marked where it is found, in order (a span not found is
    skipped: the checks name it)."""
    out, pos = [], 0
    for span in spans:
        at = text.find(span, pos)
        if at < 0:
            continue
        out += [text[pos:at], OPEN, span, CLOSE]
        pos = at + len(span)
    return "".join(out) + text[pos:]


def render(record: dict) -> str:
    """One task's record: the original and each variant, marked, with the checks."""
    who = f"model {record['model']}" if record.get("model") else "strategy template"
    head = f"=== {record['instance_id']}  {who}  N {record['n']}  {record['status']}"
    lines = [head + (f": {record['reason']}" if record.get("reason") else "") + " ==="]
    original = record.get("original", "")
    spans = protected_spans(original)
    lines += ["--- original ---", mark(original, spans)]
    texts = [v["text"] for v in record["variants"]]
    for variant, problems in zip(record["variants"], check(original, texts), strict=True):
        verdict = "checks passed" if not problems else "; ".join(problems)
        near = similarity(original, variant["text"])
        lines += [f"--- {variant['variant_id']}: similarity {near:.3f}, {verdict} ---",
                  mark(variant["text"], spans)]
    return "\n".join(lines)


def similarity_table(records: list[dict]) -> str:
    """Per variant id: how many, and the median, lowest and highest similarity to the
    original (token-level difflib ratio, 1 = the same text), then all pooled."""
    by: dict[str, list[float]] = defaultdict(list)
    for record in records:
        for variant in record["variants"]:
            by[variant["variant_id"]].append(similarity(record.get("original", ""),
                                                        variant["text"]))
    rows = [(vid, *spread(values)) for vid, values in by.items()]
    rows.append(("all", *spread(v for values in by.values() for v in values)))
    lines = ["=== similarity to the original (token-level difflib ratio; 1 = same text) ===",
             f"{'variant':<22} {'n':>5} {'median':>7} {'min':>6} {'max':>6}"]
    lines += [f"{vid:<22} {n:>5} {med:>7.3f} {lo:>6.3f} {hi:>6.3f}"
              for vid, n, med, lo, hi in rows]
    return "\n".join(lines)


def render_store(records: dict[str, dict], instance_id: str | None = None) -> str:
    """Every record (of one instance, when given), in the store's order."""
    chosen = [r for r in records.values()
              if instance_id is None or r["instance_id"] == instance_id]
    with_variants = [r for r in chosen if r.get("variants")]
    summary = [similarity_table(with_variants)] if with_variants else []
    return "\n\n".join([*(render(r) for r in chosen), *summary])
