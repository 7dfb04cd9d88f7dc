"""The bundled demo dataset: small SWE-bench-format tasks that need no Docker.

The tasks live in two tiny pure-Python repositories shipped as git bundles
(``data/<name>.bundle``); ``data/dataset.jsonl`` holds one SWE-bench 5 row per
task.  Each row's ``eval_script`` is portable: it runs the tests of the
repository checked out at ``$TESTBED`` with the ``python`` found on ``PATH``.
``python -m proctor.datasets.demo.build`` rebuilds everything from ``repos/``.
"""

from __future__ import annotations

import json
from pathlib import Path

DATASET_NAME = "proctor-demo"

_DATA_DIR = Path(__file__).resolve().parent / "data"


def dataset_path() -> Path:
    """Return the path of the shipped ``dataset.jsonl``."""
    return _DATA_DIR / "dataset.jsonl"


def bundle_path(repo: str) -> Path | None:
    """Return the shipped git bundle for ``repo`` (e.g. ``proctor-demo/textkit``).

    Returns None for repositories that are not part of the demo dataset.
    """
    owner, sep, name = repo.partition("/")
    if owner != DATASET_NAME or not sep or not name or "/" in name or name.startswith("."):
        return None
    path = _DATA_DIR / f"{name}.bundle"
    return path if path.is_file() else None


def load_rows() -> list[dict]:
    """Return the raw dataset rows, in file order."""
    with dataset_path().open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


__all__ = ["DATASET_NAME", "bundle_path", "dataset_path", "load_rows"]
