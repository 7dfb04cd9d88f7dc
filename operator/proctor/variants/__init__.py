"""Prompt variants: reworded problem statements, to measure how the wording sways an agent.

`template_variants(instance, n)` gives the first `n` template rewordings of a task's
problem statement (see `template`); the original is never among them (the plan adds
it as variant `original`). Each variant's id is stable (its style) and its text is
recorded with its sha256 beside the results (`variants.jsonl`), so a reader can tell
exactly what each item asked. The `llm` strategy (`llm`: a model's paraphrases, checked)
keeps its variants in a store (`store`) that every later run reuses byte for byte; the
template strategy uses the same store when a variants file is named.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from proctor.core.model import Instance, Usage
from proctor.core.plan import Variant
from proctor.variants.similarity import similarity
from proctor.variants.template import MAX_VARIATIONS, reword, style_ids

VARIANTS_FILE = "variants.jsonl"

__all__ = ["MAX_VARIATIONS", "VARIANTS_FILE", "generation_usage", "read_variants",
           "template_variants",
           "text_hash", "variants_for", "write_variants"]


def text_hash(text: str) -> str:
    """The sha256 of a variant's text, as recorded beside the results."""
    return hashlib.sha256(text.encode()).hexdigest()


def template_variants(instance: Instance, n: int) -> list[Variant]:
    """The first `n` template rewordings of the task's problem statement."""
    if not 0 <= n <= MAX_VARIATIONS:
        raise ValueError(f"the template strategy writes at most {MAX_VARIATIONS} variants "
                         f"per task, not {n}")
    return [Variant(vid, reword(instance.problem_statement, vid)) for vid in style_ids()[:n]]


def variants_for(instances: Sequence[Instance], n: int) -> dict[str, list[Variant]]:
    """Every task's template variants, by instance id."""
    return {inst.instance_id: template_variants(inst, n) for inst in instances}


def write_variants(folder: Path, instances: Sequence[Instance],
                   variants: Mapping[str, Iterable[Variant]]) -> None:
    """variants.jsonl: per task, the original and each variant, with its text and hash,
    each variant's similarity to the original (see `similarity`) and, for llm variants,
    what writing it cost. Each task's variants in id order, so that a run's file and one
    pulled from a cluster (whose ConfigMaps keep them by key) are the same bytes."""
    lines = []
    for inst in instances:
        made = sorted(variants.get(inst.instance_id, ()), key=lambda v: v.variant_id)
        own = [Variant("original", inst.problem_statement), *made]
        lines += [json.dumps({"instance_id": inst.instance_id, "variant_id": v.variant_id,
                              "sha256": text_hash(v.text), "text": v.text,
                              "similarity": 1.0 if v.variant_id == "original" else
                              round(similarity(inst.problem_statement, v.text), 4),
                              **({"usage": v.usage.model_dump()} if v.usage else {})})
                  for v in own]
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (VARIANTS_FILE + ".tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    tmp.replace(folder / VARIANTS_FILE)


def generation_usage(folder: Path) -> Usage | None:
    """What writing the folder's variants cost, summed; None when no model wrote them."""
    usages = [Usage(**r["usage"]) for r in read_variants(folder).values() if r.get("usage")]
    if not usages:
        return None
    return Usage(input_tokens=sum(u.input_tokens or 0 for u in usages),
                 output_tokens=sum(u.output_tokens or 0 for u in usages),
                 total_tokens=sum(u.total_tokens or 0 for u in usages),
                 cost_usd=sum(u.cost_usd or 0.0 for u in usages))


def read_variants(folder: Path) -> dict[tuple[str, str], dict]:
    """variants.jsonl by (instance, variant); empty when the folder has none."""
    path = folder / VARIANTS_FILE
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["instance_id"], r["variant_id"]): r for r in rows}
