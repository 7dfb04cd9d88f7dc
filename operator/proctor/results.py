"""The results folder of one evaluation, and the rules that keep it whole.

    <output-dir>/
      spec.json       the spec the folder was made with; another spec is refused
      results.jsonl   one RunResult per line, appended (and fsynced) as each item ends
      summary.json    the figures (fractions 0-1, Agentbeats' EvalResult names)
      report.md       the same for people, in percent, with one row per item
      items/<instance>/<variant>/<repeat>/
                      the work folder: patch.diff, test_output.txt, apply.log,
                      eval.sh, report.json (swebench's per-instance report), ...

Both engines write it: `proctor run` as items end, `proctor results pull` from what the
operator kept on a cluster.

A run killed at any moment loses nothing already finished: a result is on disk
before the next item is counted, and a torn last line (killed mid-write) is
dropped and its item done again.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from proctor.metrics import aggregate
from proctor.model import Instance, RunResult, Summary, WorkItem
from proctor.prepare import agent_label
from proctor.report import render
from proctor.runner.workdir import WorkDir, write_json
from proctor.spec import Evaluation

# Fields that may change between runs on the same folder (as on the cluster, where
# the spec is immutable except these).
MUTABLE_FIELDS = ("maxConcurrentRows", "suspend")


class ResultsFolderError(ValueError):
    """The folder belongs to another evaluation, or is damaged beyond repair."""


class ResultsFolder:
    """Appends results safely and finds what an earlier run already finished."""

    def __init__(self, root: Path):
        self.root = root
        self.results_path = root / "results.jsonl"
        self._lock = threading.Lock()

    def work_dir(self, item: WorkItem) -> WorkDir:
        return WorkDir(self.root / "items" / item.instance_id / item.variant_id /
                       str(item.repeat))

    def claim(self, identity: dict[str, Any]) -> None:
        """Record the spec, or refuse if the folder was made with a different one."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / "spec.json"
        if path.exists():
            before = json.loads(path.read_text())
            diff = _differences(_stable(before), _stable(identity))
            if diff:
                raise ResultsFolderError(
                    f"{self.root} holds results of a different evaluation ({'; '.join(diff)}); "
                    f"use another --output-dir, or remove the folder to start again")
        write_json(path, identity)

    def load(self) -> list[RunResult]:
        """Results on disk; a torn last line (killed mid-write) is cut off."""
        if not self.results_path.exists():
            return []
        raw = self.results_path.read_bytes()
        results, good_end = [], 0
        for line in raw.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            try:
                results.append(RunResult.model_validate_json(line))
            except ValidationError:
                if line.strip():
                    break
            good_end += len(line)
        if good_end != len(raw):
            with open(self.results_path, "r+b") as fh:
                fh.truncate(good_end)
        return _latest_per_item(results)

    def append(self, result: RunResult) -> None:
        """Add one result durably: it is on disk when this returns."""
        line = result.model_dump_json() + "\n"
        with self._lock, open(self.results_path, "a") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())


def _latest_per_item(results: list[RunResult]) -> list[RunResult]:
    latest: dict[str, RunResult] = {}
    for r in results:
        latest[r.item_id] = r
    return list(latest.values())


def _stable(identity: dict[str, Any]) -> dict[str, Any]:
    spec = {k: v for k, v in identity.get("spec", {}).items() if k not in MUTABLE_FIELDS}
    return {**identity, "spec": spec}


def _differences(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new)):
            out += _differences(old.get(key), new.get(key), f"{path}.{key}" if path else key)
        return out
    return [] if old == new else [f"{path}: {old!r} then, {new!r} now"]


def write_outputs(folder: ResultsFolder, evaluation: Evaluation,
                  instances: Mapping[str, Instance], planned: int) -> Summary:
    """summary.json and report.md from the results on disk."""
    results = folder.load()
    summary = aggregate(results, instances, evaluation=evaluation.name,
                        agent=agent_label(evaluation),
                        green_agent_model=evaluation.spec.green_agent_model,
                        items_planned=planned)
    write_json(folder.root / "summary.json", summary.model_dump(mode="json"))
    (folder.root / "report.md").write_text(render(summary, results))
    return summary
