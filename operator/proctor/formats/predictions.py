"""Where a patch comes from when no agent is asked: gold, empty, or a predictions file.

A predictions file is checked whole before any item runs, more strictly than swebench
(which keeps the last of duplicate ids and reads a missing patch as none): an unknown
instance id, a missing or non-string `model_patch`, a repeated instance id, more than one
`model_name_or_path`, or no prediction at all is each an error naming the file and line.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proctor.core.exits import BadInput
from proctor.core.model import Instance


class PredictionsError(BadInput):
    """A predictions file that cannot be used, with a message naming the problem."""


@dataclass(frozen=True)
class Predictions:
    """A checked predictions file: one model's patch for each instance it names."""

    model: str
    """The model_name_or_path every row shares: whom the results belong to."""
    patches: dict[str, str]
    """instance_id -> patch ("" for a prediction of no change)."""

    @property
    def digest(self) -> str:
        """A sha256 of what the predictions say (not of how the file spells it): a
        results folder made from other predictions must not be resumed with these."""
        text = json.dumps([self.model, sorted(self.patches.items())], ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()


def _rows(path: Path) -> list[tuple[str, Any]]:
    """(where, row) for each prediction: `line N` of a .jsonl, `entry N` of a .json."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PredictionsError(f"{path}: not UTF-8 text ({exc.reason})") from None
    if path.suffix == ".jsonl":
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                rows.append((f"line {number}", _json(path, line, f"line {number}")))
        return rows
    data = _json(path, text, "")
    if isinstance(data, dict):  # swebench's {instance_id: prediction} form
        return [(f"entry {key!r}", row) for key, row in data.items()]
    if isinstance(data, list):
        return [(f"entry {n}", row) for n, row in enumerate(data, start=1)]
    raise PredictionsError(f"{path}: expected a JSON list or object of predictions")


def _json(path: Path, text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        at = where or f"line {exc.lineno}"
        raise PredictionsError(f"{path} {at}: not valid JSON ({exc.msg})") from None


def _check_row(row: Any) -> str | None:
    """What is wrong with one prediction, or None."""
    if not isinstance(row, dict):
        return f"expected an object, got {type(row).__name__}"
    for key in ("instance_id", "model_name_or_path"):
        if not isinstance(row.get(key), str) or not row[key]:
            return f"{key} is missing or not a string"
    if "model_patch" not in row:
        return f"{row['instance_id']} has no model_patch (use \"\" for no change)"
    if not isinstance(row["model_patch"], str):
        return (f"{row['instance_id']}: model_patch is {type(row['model_patch']).__name__}, "
                f"not a string")
    return None


def load_predictions(path: str | Path, known_ids: Collection[str] | None = None) -> Predictions:
    """A swebench predictions file (.json list or dict, or .jsonl), checked whole;
    `known_ids` are the dataset's instance ids (every row must name one)."""
    path = Path(path)
    if path.is_dir():
        raise PredictionsError(f"predictions file {path} is a folder, not a file")
    if not path.is_file():
        raise PredictionsError(f"predictions file {path} does not exist")
    rows = _rows(path)
    if not rows:
        raise PredictionsError(f"{path} holds no predictions")
    first_at: dict[str, str] = {}
    patches: dict[str, str] = {}
    models: dict[str, str] = {}
    for where, row in rows:
        problem = _check_row(row)
        if problem:
            raise PredictionsError(f"{path} {where}: {problem}")
        iid = row["instance_id"]
        if iid in first_at:
            raise PredictionsError(f"{path} {where}: {iid} again (first at {first_at[iid]}); "
                                   f"keep one prediction per instance")
        if known_ids is not None and iid not in known_ids:
            raise PredictionsError(f"{path} {where}: {iid} is not in the dataset")
        models.setdefault(row["model_name_or_path"], where)
        first_at[iid], patches[iid] = where, row["model_patch"]
    if len(models) > 1:
        named = ", ".join(f"{m!r} ({w})" for m, w in models.items())
        raise PredictionsError(f"{path}: predictions of more than one model ({named}); "
                               f"evaluate each model's file on its own")
    return Predictions(next(iter(models)), patches)


def patch_for(source: str, instance: Instance, predictions: Mapping[str, str] | None) -> str:
    """The patch to test for one task, by predictions source."""
    if source == "gold":
        return instance.patch
    if source == "empty":
        return ""
    if source == "file":
        return (predictions or {}).get(instance.instance_id, "")
    raise ValueError(f"predictions source {source!r} needs an agent, not a predictions file")
