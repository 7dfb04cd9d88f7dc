"""Frozen variants: generated once, stored, and reused byte for byte by every later run.

A store is a JSON-lines file, one record per task's generation, addressed by the sha256
of what decides the variants: dataset, revision, instance, strategy, model, prompt version
and N. Both strategies use it: a `Source` says who writes the variants (the llm's model,
or the template styles, whose records have no model and no usage). A later record of the
same key replaces an earlier one (the file is only appended to, so a run stopped half-way
keeps what it made). A failed generation is recorded too, with its reason, and is tried
again only when asked (`retry_failed`): every agent evaluated with the same settings sees
the same variants, or the same absence of them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from proctor.core.model import Instance, Usage
from proctor.core.plan import Variant
from proctor.variants import template, text_hash
from proctor.variants.llm import PROMPT_VERSION, Generation, ModelSettings, generate


class StoreError(ValueError):
    """A variants file that is not one; the message names the file and line."""


@dataclass(frozen=True)
class Source:
    """Who writes a task's variants: the strategy, its model ('' for template), the
    version of its prompt (or styles), the ids of N variants, and the writer itself."""

    strategy: str
    model: str
    version: str
    ids: Callable[[int], list[str]]
    write: Callable[[str, int], Generation]


def llm_source(settings: ModelSettings) -> Source:
    """The llm strategy: `settings.model` paraphrases, checked (see `llm.generate`)."""
    return Source("llm", settings.model, PROMPT_VERSION,
                  lambda n: [f"llm-{i}" for i in range(1, n + 1)],
                  lambda text, n: generate(text, n, settings))


def _template_write(text: str, n: int) -> Generation:
    return Generation(texts=[template.reword(text, vid) for vid in template.style_ids()[:n]])


TEMPLATE = Source("template", "", template.VERSION, lambda n: template.style_ids()[:n],
                  _template_write)
"""The template strategy: the first N styles, the same texts it writes without a store."""


@dataclass(frozen=True)
class StoreKey:
    """What decides a task's variants (besides the text, which the revision fixes)."""

    dataset: str
    revision: str
    instance_id: str
    source: Source
    n: int
    text_sha256: str
    """The original's hash: a dataset read at its latest revision may change a text."""

    @property
    def digest(self) -> str:
        fields = {"dataset": self.dataset, "revision": self.revision,
                  "instance_id": self.instance_id, "text_sha256": self.text_sha256,
                  "strategy": self.source.strategy, "model": self.source.model,
                  "prompt_version": self.source.version, "n": self.n}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def default_path() -> Path:
    """Where `proctor run` keeps LLM variants when the Evaluation names no variantsFile:
    one file per user, shared by every run on this machine."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "proctor" / "variants.jsonl"


def load(path: Path) -> dict[str, dict]:
    """The store's records by key (the last of a key wins); empty when there is none."""
    if not path.exists():
        return {}
    out: dict[str, dict] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            out[record["key"]] = record
        except (json.JSONDecodeError, KeyError, TypeError):
            raise StoreError(f"{path}:{number}: not a variants record") from None
    return out


def _append(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def record_for(key: StoreKey, original: str, gen: Generation) -> dict:
    """A store record of one generation (pure); usage only when a model wrote it."""
    source, priced = key.source, bool(key.source.model)
    share = max(1, len(gen.texts))
    usage = {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens,
             "cost_usd": gen.cost_usd}
    # One call writes all N: each variant carries its share of the call's usage.
    each = {name: value / share for name, value in usage.items()}
    return {
        "key": key.digest, "dataset": key.dataset, "revision": key.revision,
        "instance_id": key.instance_id, "strategy": source.strategy, "model": source.model,
        "prompt_version": source.version, "n": key.n,
        "status": "ok" if gen.ok else "failed", "reason": gen.reason,
        "attempts": gen.attempts, "original": original, "original_sha256": text_hash(original),
        **(usage if priced else {}),
        "variants": [{"variant_id": vid, "text": text, "sha256": text_hash(text),
                      **(each if priced else {})}
                     for vid, text in zip(source.ids(key.n), gen.texts, strict=False)],
    }


Progress = Callable[[int, int, str, str], None]
"""(done, total, instance id, what happened: stored, made, failed)."""


def ensure(path: Path, instances: Sequence[Instance], dataset: str, revision: str,
           source: Source, n: int, *, retry_failed: bool = False,
           progress: Progress | None = None) -> dict[str, dict]:
    """Each instance's record, by instance id: the stored one when there is one (a failed
    one too, unless `retry_failed`), else a new generation, appended to the store at once.
    ModelUnreachable stops it; what was made before stays stored."""
    stored = load(path)
    out: dict[str, dict] = {}
    for done, inst in enumerate(instances, 1):
        key = StoreKey(dataset, revision, inst.instance_id, source, n,
                       text_hash(inst.problem_statement))
        record = stored.get(key.digest)
        if record and (record["status"] == "ok" or not retry_failed):
            what = "stored"
        else:
            record = record_for(key, inst.problem_statement,
                                source.write(inst.problem_statement, n))
            _append(path, record)
            what = "made" if record["status"] == "ok" else "failed"
        out[inst.instance_id] = record
        if progress:
            progress(done, len(instances), inst.instance_id, what)
    return out


def variants_of(records: dict[str, dict]) -> dict[str, list[Variant]]:
    """The plan's variants: those of good records only (a failed one gives none)."""
    return {iid: [Variant(v["variant_id"], v["text"], _usage(v)) for v in r["variants"]]
            for iid, r in records.items() if r["status"] == "ok"}


def _usage(variant: dict) -> Usage | None:
    if "cost_usd" not in variant:
        return None  # written by no model
    tokens = (variant["prompt_tokens"], variant["completion_tokens"])
    return Usage(input_tokens=round(tokens[0]), output_tokens=round(tokens[1]),
                 total_tokens=round(sum(tokens)), cost_usd=variant["cost_usd"])


RECORDS_LINE_KEY = "proctorVariants"
"""The key of the one JSON line a cluster's variants Job prints with its records: the
operator reads them from the pod's log (a termination message is too small for them)."""


def records_line(records: dict[str, dict]) -> str:
    """Every task's record as one JSON line (`records_from_log` reads it back)."""
    return json.dumps({RECORDS_LINE_KEY: records}, sort_keys=True)


def records_from_log(log: str) -> dict[str, dict] | None:
    """The records of the last records line in a pod's log; None when it has none (the
    progress lines around it are skipped)."""
    for line in reversed(log.splitlines()):
        if RECORDS_LINE_KEY not in line:
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and isinstance(value.get(RECORDS_LINE_KEY), dict):
            return value[RECORDS_LINE_KEY]
    return None
