"""Where a patch comes from when no agent is asked: gold, empty, or a predictions file."""

from __future__ import annotations

import json
from pathlib import Path

from proctor.model import Instance


class PredictionsError(ValueError):
    """A predictions file that cannot be read, with a message naming the problem."""


def load_predictions(path: str | Path) -> dict[str, str]:
    """A swebench predictions file (.json list or dict, or .jsonl) -> {instance_id: patch}."""
    path = Path(path)
    if not path.is_file():
        raise PredictionsError(f"predictions file {path} does not exist")
    text = path.read_text()
    try:
        if path.suffix == ".jsonl":
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            data = json.loads(text)
            rows = list(data.values()) if isinstance(data, dict) else data
    except json.JSONDecodeError as exc:
        raise PredictionsError(f"{path}: not valid JSON: {exc}") from exc
    patches: dict[str, str] = {}
    for n, row in enumerate(rows):
        if not isinstance(row, dict) or "instance_id" not in row:
            raise PredictionsError(f"{path}: prediction #{n} has no instance_id")
        patches[row["instance_id"]] = row.get("model_patch") or ""
    return patches


def patch_for(source: str, instance: Instance, predictions: dict[str, str] | None) -> str:
    """The patch to test for one task, by predictions source."""
    if source == "gold":
        return instance.patch
    if source == "empty":
        return ""
    if source == "file":
        return (predictions or {}).get(instance.instance_id, "")
    raise ValueError(f"predictions source {source!r} needs an agent, not a predictions file")
