"""Results folders -> one agent's scores, ready for `proctor.analysis.reliability` (read-only).

Reads `results.jsonl` (the last result per item wins, as a resume leaves it; a torn last
line is skipped, never cut: analysis never writes into a results folder), the agent's
name from `summary.json` or `spec.json`, and `variants.jsonl` for each variant's hash.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import orjson

from proctor.analysis.reliability import scores_array
from proctor.variants import read_variants

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


def _score(line: dict, score: Score) -> float | None:
    if line.get("outcome") == "error":
        return None
    if score == "resolved":
        return 1.0 if line.get("outcome") == "resolved" else 0.0
    f2p = line.get("FAIL_TO_PASS") or {}
    ok, bad = len(f2p.get("success") or ()), len(f2p.get("failure") or ())
    return ok / (ok + bad) if ok + bad else 0.0


def read_results(folder: Path) -> list[dict]:
    """The latest result of each item, as plain dicts."""
    path = folder / "results.jsonl"
    if not path.exists():
        raise AnalysisError(f"{folder} has no results.jsonl: give folders written by "
                            f"`proctor run`, `proctor demo` or `proctor results pull`")
    latest: dict[str, dict] = {}
    with open(path, "rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                break  # torn by a kill mid-write; the run redoes that item on resume
            try:
                line = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            latest[line.get("item_id", str(len(latest)))] = line
    return list(latest.values())


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


def _resources(lines: list[dict], tasks: list[str], variants: list[str],
               shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    ti = {t: i for i, t in enumerate(tasks)}
    vi = {v: i for i, v in enumerate(variants)}
    out = {name: np.full(shape, np.nan) for name in ("latency", "tokens", "cost")}
    for line in lines:
        at = (ti[line["instance_id"]], vi[line.get("variant_id", "original")],
              line.get("repeat", 0))
        usage = line.get("usage") or {}
        for name, value in (("latency", (line.get("timings") or {}).get("total_seconds")),
                            ("tokens", usage.get("total_tokens")),
                            ("cost", usage.get("cost_usd"))):
            if value is not None:
                out[name][at] = value
    return {k: v for k, v in out.items() if not np.isnan(v).all()}


def load_agent(folder: Path, score: Score = "resolved") -> AgentRun:
    """One results folder as an AgentRun."""
    lines = read_results(folder)
    rows = [(ln["instance_id"], ln.get("variant_id", "original"), int(ln.get("repeat", 0)),
             _score(ln, score)) for ln in lines]
    scores, tasks, variants = scores_array(rows)
    outcomes = {(r[0], r[1], r[2]): str(ln.get("outcome")) for r, ln in zip(rows, lines,
                                                                           strict=True)}
    hashes = {key: row["sha256"] for key, row in read_variants(folder).items()}
    return AgentRun(agent=agent_name(folder), folder=folder, scores=scores, tasks=tasks,
                    variants=variants, resources=_resources(lines, tasks, variants,
                                                            scores.shape),
                    outcomes=outcomes, errors=sum(1 for r in rows if r[3] is None),
                    hashes=hashes)


def load_agents(folders: list[Path], score: Score = "resolved") -> list[AgentRun]:
    """Every folder's agent; two folders of the same agent get their folder name added."""
    runs = [load_agent(f, score) for f in folders]
    names = [r.agent for r in runs]
    for run in runs:
        if names.count(run.agent) > 1:
            run.agent = f"{run.agent} ({run.folder.name})"
    return runs
