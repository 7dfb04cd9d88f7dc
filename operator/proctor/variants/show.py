"""`proctor variants show`: a store's records as text a person checks by eye (pure).

Each task: its model (or strategy template), status and reason, the original, then each
variant with the original's protected spans marked ⟦like this⟧ where they were found, and
the checks' results, so a reader sees at once what the model kept and what it reworded.
"""

from __future__ import annotations

from proctor.variants.llm import check
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
        lines += [f"--- {variant['variant_id']}: {verdict} ---", mark(variant["text"], spans)]
    return "\n".join(lines)


def render_store(records: dict[str, dict], instance_id: str | None = None) -> str:
    """Every record (of one instance, when given), in the store's order."""
    chosen = [r for r in records.values()
              if instance_id is None or r["instance_id"] == instance_id]
    return "\n\n".join(render(r) for r in chosen)
