"""Status conditions as the Kubernetes API conventions write them (pure).

``type``, ``status`` (True, False, Unknown), ``reason`` (one CamelCase word), ``message``,
``lastTransitionTime`` (changed only when the status flips) and ``observedGeneration``.
The one thing a pass reads back from the old status is a condition's lastTransitionTime;
everything else comes from what is observed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

MESSAGE_MAX = 32768
"""metav1.Condition's limit on a message."""
_REASON = re.compile(r"^[A-Z][A-Za-z0-9]*$")


def find_condition(conditions: Sequence[Mapping[str, Any]], type_: str
                   ) -> Mapping[str, Any] | None:
    """The condition of ``type_``, if present."""
    return next((c for c in conditions if c.get("type") == type_), None)


def set_condition(conditions: Sequence[Mapping[str, Any]], type_: str, status: bool,
                  reason: str, message: str = "", *, now: str,
                  observed_generation: int | None = None) -> list[dict[str, Any]]:
    """``conditions`` with ``type_`` set; a new list, the input left as it was.

    lastTransitionTime becomes ``now`` only when the status changes (or the condition is
    new); a changed reason or message alone keeps it, as the API conventions ask.
    """
    if not _REASON.match(reason):
        raise ValueError(f"condition reason {reason!r} must be one CamelCase word")
    word = "True" if status else "False"
    old = find_condition(conditions, type_)
    changed = old is None or old.get("status") != word
    new: dict[str, Any] = {
        "type": type_, "status": word, "reason": reason, "message": message[:MESSAGE_MAX],
        "lastTransitionTime": now if changed or old is None else old.get("lastTransitionTime", now),
    }
    if observed_generation is not None:
        new["observedGeneration"] = observed_generation
    out = [new if c.get("type") == type_ else dict(c) for c in conditions]
    return out if old is not None else [*out, new]


def now_text() -> str:
    """Now, as a condition's lastTransitionTime says it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
