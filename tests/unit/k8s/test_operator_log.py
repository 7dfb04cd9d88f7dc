"""The operator's log: one line per decision, none per watch event or probe."""

from __future__ import annotations

import logging

from proctor.k8s import controller
from proctor.k8s.controller import EVENT_HANDLERS, not_per_event


def record(message: str, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("kopf.objects", level, __file__, 1, message, None, None)


def test_kopfs_line_per_watch_event_is_dropped() -> None:
    for handler in EVENT_HANDLERS:  # each the name of a handler the module registers
        assert callable(getattr(controller, handler, None)), handler
        assert not not_per_event(record(f"Handler '{handler}' succeeded."))


def test_other_lines_are_kept() -> None:
    assert not_per_event(record("Handler 'reconcile' succeeded."))
    assert not_per_event(record("Handler '_child_event' failed with an exception.",
                                 logging.ERROR))
    assert not_per_event(record("Created Job demo-3f2a1c item=t/original/0"))
