"""The results folder of one evaluation, and the rules that keep it whole.

    <output-dir>/
      spec.json       the spec the folder was made with (and, for `proctor eval`, a digest
                      of its predictions); another is refused (more rows, by maxRows or
                      instanceIds, extend the run)
      run.lock        held by the run writing the folder (its pid and host inside)
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
dropped and its item done again. Any other damaged line stops the run with its
number, the file untouched.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from proctor.core.exits import BadInput, NotRun, is_disk_full
from proctor.core.metrics import aggregate
from proctor.core.model import ORIGINAL_VARIANT, Instance, RunResult, Summary
from proctor.core.provenance import Provenance
from proctor.core.report import render
from proctor.core.spec import Evaluation
from proctor.prepare import agent_label, variants_model
from proctor.runner.workdir import WorkDir, write_json
from proctor.variants import generation_usage

# Fields that may change between runs on the same folder (as on the cluster, where
# the spec is immutable except these).
MUTABLE_FIELDS = ("maxConcurrentRows", "suspend", "budget")
# The selection of rows: more rows extend a run (items are keyed by their own id), so
# they are not part of what the folder's results mean.
SELECTION_FIELDS = ("maxRows", "instanceIds")
LOCK_FILE = "run.lock"
FOLDER_ADVICE = "use another --output-dir, or remove the folder to start again"
"""What to do when a folder holds another evaluation's results."""


class ItemKey(Protocol):
    """What names an item's folder: a WorkItem, or the RunResult of one."""

    @property
    def instance_id(self) -> str: ...
    @property
    def variant_id(self) -> str: ...
    @property
    def repeat(self) -> int: ...


class ResultsFolderError(BadInput):
    """The folder belongs to another evaluation, or is damaged beyond repair."""


class FolderLocked(NotRun):
    """Another run is writing to the folder."""


class ResultsFolder:
    """Appends results safely and finds what an earlier run already finished."""

    def __init__(self, root: Path):
        self.root = root
        self.results_path = root / "results.jsonl"
        self._lock = threading.Lock()

    def work_dir(self, item: ItemKey) -> WorkDir:
        return WorkDir(self.root / "items" / item.instance_id / item.variant_id /
                       str(item.repeat))

    def make(self) -> None:
        """Create the folder, or say in one line why it cannot be one."""
        if self.root.exists() and not self.root.is_dir():
            raise ResultsFolderError(f"{self.root} is a file, not a folder: give the "
                                     f"output a folder's path")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if is_disk_full(exc):
                raise
            raise ResultsFolderError(f"cannot make the results folder {self.root}: "
                                     f"{exc.strerror}") from exc

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the folder for one run; a second run on it is refused at once.

        An flock, which the kernel frees when the process ends however it ends, so a
        killed run never leaves a lock behind.
        """
        self.make()
        try:
            fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:  # a read-only mount, a folder not ours: the run cannot write
            if is_disk_full(exc):
                raise
            raise ResultsFolderError(f"cannot write in the results folder {self.root}: "
                                     f"{exc.strerror}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
                raise FolderLocked(
                    f"{self.root} is in use by another run ({holder or 'starting'}); wait "
                    f"for it to end, or use another output folder") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)  # which releases the lock

    def claim(self, identity: dict[str, Any], advice: str = FOLDER_ADVICE) -> None:
        """Record the spec, or refuse (saying `advice`) if the folder was made with a
        different one."""
        self.make()
        path = self.root / "spec.json"
        if path.exists():
            before = _read_spec(path)
            diff = _differences(_stable(before), _stable(identity))
            if diff:
                raise ResultsFolderError(
                    f"{self.root} holds results of a different evaluation ({'; '.join(diff)}); "
                    f"{advice}")
        write_json(path, identity)

    def load(self) -> list[RunResult]:
        """Results on disk, the latest of each item.

        Only a torn last line (a run killed mid-write: no newline after it) is repaired:
        cut off, or ended when it is whole. Any other bad line stops with an error naming
        it, and the file is left as it is: a result must never be dropped silently.
        """
        if not self.results_path.exists():
            return []
        raw = self.results_path.read_bytes()
        end = raw.rfind(b"\n") + 1
        results = [_parse_line(self.results_path, n, line)
                   for n, line in enumerate(raw[:end].splitlines(), start=1) if line.strip()]
        torn = raw[end:]
        if torn.strip():
            try:
                results.append(RunResult.model_validate_json(torn))
                with open(self.results_path, "ab") as fh:
                    fh.write(b"\n")
            except ValidationError:
                with open(self.results_path, "r+b") as fh:
                    fh.truncate(end)
        return _latest_per_item(results)

    def append(self, result: RunResult) -> None:
        """Add one result durably: it is on disk when this returns."""
        line = result.model_dump_json() + "\n"
        with self._lock, open(self.results_path, "a") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())


def _read_spec(path: Path) -> dict[str, Any]:
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        spec, why = None, str(exc)
    else:
        why = f"a JSON {type(spec).__name__}, not an object"
    if not isinstance(spec, dict):
        raise ResultsFolderError(f"{path} is damaged ({why}): the folder's spec is unknown; "
                                 f"use another --output-dir, or remove the folder to start "
                                 f"again")
    return spec


def _parse_line(path: Path, number: int, line: bytes) -> RunResult:
    try:
        return RunResult.model_validate_json(line)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ResultsFolderError(
            f"{path} line {number} is not a result ({first['msg']}); the file was left "
            f"unchanged: repair or delete that line, then run again") from None


def _latest_per_item(results: list[RunResult]) -> list[RunResult]:
    latest: dict[str, RunResult] = {}
    for r in results:
        latest[r.item_id] = r
    return list(latest.values())


def _stable(identity: dict[str, Any]) -> dict[str, Any]:
    """What gives the folder's results their meaning: not the rows selected."""
    spec = {k: v for k, v in identity.get("spec", {}).items() if k not in MUTABLE_FIELDS}
    if isinstance(spec.get("dataset"), dict):
        spec["dataset"] = {k: v for k, v in spec["dataset"].items()
                           if k not in SELECTION_FIELDS}
    return {**{k: v for k, v in identity.items() if k != "dataset_fingerprint"}, "spec": spec}


def _differences(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new)):
            out += _differences(old.get(key), new.get(key), f"{path}.{key}" if path else key)
        return out
    return [] if old == new else [f"{path}: {old!r} then, {new!r} now"]


def write_outputs(folder: ResultsFolder, evaluation: Evaluation,
                  instances: Mapping[str, Instance], planned: int, *,
                  planned_ids: Collection[str] | None = None,
                  agent: str | None = None, stopped_by: str | None = None,
                  provenance: Provenance | None = None) -> Summary:
    """summary.json and report.md from the results on disk (of `planned_ids` only, when
    given: a folder may hold results of rows that a smaller selection leaves out), with
    the run's provenance when the caller gathered it."""
    results = folder.load()
    if planned_ids is not None:
        results = [r for r in results if r.item_id in planned_ids]
    spec = evaluation.spec
    varied = spec.prompt_sensitivity.strategy == "llm" and any(
        r.variant_id != ORIGINAL_VARIANT for r in results)
    summary = aggregate(results, instances, evaluation=evaluation.name,
                        agent=agent or agent_label(evaluation),
                        green_agent_model=variants_model(evaluation) if varied else None,
                        items_planned=planned)
    if varied:
        summary = summary.model_copy(update={"variants_usage": generation_usage(folder.root)})
    if stopped_by:
        summary = summary.model_copy(update={"stopped_by": stopped_by})
    if provenance:
        summary = summary.model_copy(update={"provenance": provenance})
    write_json(folder.root / "summary.json", summary.model_dump(mode="json"))
    (folder.root / "report.md").write_text(render(summary, results))
    return summary
