"""The shape of a JSON value: its keys, nesting and value types, to compare two files'
layout whatever their values."""

from __future__ import annotations

from typing import Any


def shape(value: Any, key: str = "") -> Any:
    """Keys, nesting and value types; the participants' names (any) and ids are one type."""
    if isinstance(value, dict):
        if key == "participants":
            return {"<name>": sorted({type(v).__name__ for v in value.values()})}
        return {k: shape(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value[:1]]
    return type(value).__name__
