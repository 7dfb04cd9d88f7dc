"""Results folders -> one agent's scores, ready for `proctor.analysis.reliability` (read-only).

Reads `results.jsonl` (the last result per item wins, as a resume leaves it), the agent's
name from `summary.json` or `spec.json`, and `variants.jsonl` for each variant's hash.

As strict as `proctor run` reading the same file: every line must be a result (the
RunResult model); a bad line stops the analysis with one line naming the file and line,
before anything is written. The one exception is the one `run` repairs itself: a torn last
line (no newline after it, a run killed mid-write) is read when whole and skipped when not,
never cut: analysis never writes into a results folder.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import ValidationError

from proctor.analysis.calibration import Answers
from proctor.analysis.reliability import scores_array
from proctor.core.model import Outcome, RunResult
from proctor.core.provenance import Provenance
from proctor.variants import read_variants
from proctor.variants.similarity import similarity

Score = Literal["resolved", "f2p"]


class AnalysisError(ValueError):
    """A folder cannot be analysed; the message says which and why."""


@dataclass
class AgentRun:
    """One agent's results, as arrays indexed [task, variant, repeat]."""

    agent: str
    folder: Path
    scores: np.ndarray
    tasks: list[str]
    variants: list[str]
    resources: dict[str, np.ndarray]
    outcomes: dict[tuple[str, str, int], str]
    errors: int
    hashes: dict[tuple[str, str], str] = field(default_factory=dict)
    answers: Answers | None = None
    """Per item: resolved, the agent's confidence and whether it gave a patch."""
    similarity: dict[tuple[str, str], float] = field(default_factory=dict)
    """Each variant's similarity to its task's original text (variants.jsonl)."""
    provenance: Provenance | None = None
    """Where the run came from (summary.json); None for folders written before it was
    recorded, or with no summary.json."""


def item_score(line: RunResult, score: Score = "resolved") -> float | None:
    """An item's score: 1 if resolved else 0 (or its FAIL_TO_PASS share); None in error."""
    if line.outcome == Outcome.ERROR:
        return None
    if score == "resolved":
        return 1.0 if line.outcome == Outcome.RESOLVED else 0.0
    ok, bad = len(line.FAIL_TO_PASS.success), len(line.FAIL_TO_PASS.failure)
    return ok / (ok + bad) if ok + bad else 0.0


def score_rows(lines: Sequence[RunResult], score: Score = "resolved"
               ) -> list[tuple[str, str, int, float | None]]:
    """Each result as the (task, variant, repeat, score) row `scores_array` reads."""
    return [(ln.instance_id, ln.variant_id, ln.repeat, item_score(ln, score)) for ln in lines]


def _first_error(exc: ValidationError, whole: str) -> tuple[str, str]:
    """Where the first error of a validation is (a dotted path, or ``whole``), and what."""
    first = exc.errors()[0]
    return ".".join(str(p) for p in first.get("loc", ())) or whole, first["msg"]


def _parse(path: Path, number: int, raw: bytes) -> RunResult:
    try:
        return RunResult.model_validate_json(raw)
    except ValidationError as exc:
        where, why = _first_error(exc, "the line")
        raise AnalysisError(f"{path} line {number} is not a result ({where}: {why}); "
                            f"repair or delete that line, then analyse again") from None


def read_results(folder: Path) -> list[RunResult]:
    """The latest result of each item."""
    path = folder / "results.jsonl"
    if not path.is_file():
        raise AnalysisError(f"{folder} has no results.jsonl: give folders written by "
                            f"`proctor run`, `proctor demo` or `proctor results pull`")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise AnalysisError(f"{path} cannot be read: {exc.strerror}") from None
    end = raw.rfind(b"\n") + 1
    latest: dict[str, RunResult] = {}
    for number, line in enumerate(raw[:end].split(b"\n"), start=1):
        if line.strip():
            result = _parse(path, number, line)
            latest[result.item_id] = result
    torn = raw[end:]
    if torn.strip():
        with contextlib.suppress(AnalysisError):  # cut by `run` on resume; not ours to cut
            result = _parse(path, raw.count(b"\n") + 1, torn)
            latest[result.item_id] = result
    if not latest:
        raise AnalysisError(f"{path} holds no results")
    return list(latest.values())


def check_output(out: Path) -> None:
    """The output folder can be written: not a file, and under a folder that exists or can
    be made (checked before anything is computed or written)."""
    for parent in (out, *out.parents):
        if parent.exists():
            if not parent.is_dir():
                raise AnalysisError(f"--output-dir {out}: {parent} is a file, not a folder")
            if not os.access(parent, os.W_OK):
                raise AnalysisError(f"--output-dir {out}: {parent} is not writable")
            return


def agent_name(folder: Path) -> str:
    for name, key in (("summary.json", ("agent",)), ("spec.json", ("spec", "agentRef", "name"))):
        try:
            value = json.loads((folder / name).read_text())
            for k in key:
                value = value[k]
            if value:
                return str(value)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return folder.name


def read_provenance(folder: Path) -> Provenance | None:
    """summary.json's provenance; None when the folder has none (an older run). A damaged
    one stops with a line naming the file: a comparison must not silently lose it."""
    path = folder / "summary.json"
    try:
        found = json.loads(path.read_text()).get("provenance")
    except (OSError, ValueError, AttributeError):  # no summary, or not a JSON object
        return None
    if found is None:
        return None
    try:
        return Provenance.model_validate(found)
    except ValidationError as exc:
        where, why = _first_error(exc, "provenance")
        raise AnalysisError(f"{path}: provenance.{where}: {why}; repair or remove "
                            f"the provenance key, then compare again") from None


def _resources(lines: list[RunResult], tasks: list[str], variants: list[str],
               shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    ti = {t: i for i, t in enumerate(tasks)}
    vi = {v: i for i, v in enumerate(variants)}
    out = {name: np.full(shape, np.nan) for name in ("latency", "tokens", "cost")}
    for line in lines:
        at = (ti[line.instance_id], vi[line.variant_id], line.repeat)
        usage = line.usage
        for name, value in (("latency", line.timings.total_seconds),
                            ("tokens", usage.total_tokens if usage else None),
                            ("cost", usage.cost_usd if usage else None)):
            if value is not None:
                out[name][at] = value
    return {k: v for k, v in out.items() if not np.isnan(v).all()}


def _answers(lines: list[RunResult], tasks: list[str], variants: list[str],
             shape: tuple[int, ...]) -> Answers:
    ti = {t: i for i, t in enumerate(tasks)}
    vi = {v: i for i, v in enumerate(variants)}
    resolved, confidence, patchless = (np.full(shape, np.nan) for _ in range(3))
    for line in lines:
        at = (ti[line.instance_id], vi[line.variant_id], line.repeat)
        if line.confidence is not None:
            confidence[at] = line.confidence
        if line.outcome != Outcome.ERROR:
            resolved[at] = float(line.outcome == Outcome.RESOLVED)
            patchless[at] = float(not line.patch.present)
    return Answers(resolved=resolved, confidence=confidence, patchless=patchless)


def _similarities(stored: dict[tuple[str, str], dict]) -> dict[tuple[str, str], float]:
    """Each variant's similarity to the original: as recorded, else computed from the
    texts (folders written before it was recorded)."""
    out = {}
    for (task, variant), row in stored.items():
        if variant == "original":
            continue
        if isinstance(row.get("similarity"), int | float):
            out[task, variant] = float(row["similarity"])
        elif (task, "original") in stored:
            out[task, variant] = similarity(str(stored[task, "original"]["text"]),
                                            str(row["text"]))
    return out


def load_agent(folder: Path, score: Score = "resolved") -> AgentRun:
    """One results folder as an AgentRun."""
    lines = read_results(folder)
    rows = score_rows(lines, score)
    scores, tasks, variants = scores_array(rows)
    outcomes = {(r[0], r[1], r[2]): ln.outcome.value for r, ln in zip(rows, lines, strict=True)}
    try:
        stored = read_variants(folder)
        hashes = {key: str(row["sha256"]) for key, row in stored.items()}
        near = _similarities(stored)
    except (ValueError, KeyError, TypeError) as exc:
        raise AnalysisError(f"{folder}/variants.jsonl is not a variants file "
                            f"({type(exc).__name__}: {exc})") from None
    return AgentRun(agent=agent_name(folder), folder=folder, scores=scores, tasks=tasks,
                    variants=variants, resources=_resources(lines, tasks, variants,
                                                            scores.shape),
                    outcomes=outcomes, errors=sum(1 for r in rows if r[3] is None),
                    hashes=hashes, answers=_answers(lines, tasks, variants, scores.shape),
                    similarity=near, provenance=read_provenance(folder))


def load_agents(folders: list[Path], score: Score = "resolved") -> list[AgentRun]:
    """Every folder's agent; two folders of the same agent get their folder name added."""
    runs = [load_agent(f, score) for f in folders]
    names = [r.agent for r in runs]
    for run in runs:
        if names.count(run.agent) > 1:
            run.agent = f"{run.agent} ({run.folder.name})"
    return runs
