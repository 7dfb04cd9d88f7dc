"""Human-friendly durations such as ``"1h30m"`` or ``"2d 4h"``."""

import re
from datetime import timedelta

_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_COMPONENT = re.compile(r"(\d+)\s*([dhms])")


def parse_duration(text):
    """Parse a duration like ``"1h30m"``, ``"2d 4h"`` or ``"1.5h"``.

    Units are ``d``, ``h``, ``m`` and ``s``; whitespace between components is
    allowed and case is ignored.  Raises :class:`ValueError` if ``text`` is not
    a valid duration.
    """
    total = 0
    for amount, unit in _COMPONENT.findall(text.lower()):
        total += int(amount) * _UNIT_SECONDS[unit]
    return timedelta(seconds=total)


def format_duration(delta):
    """Format a :class:`~datetime.timedelta` compactly, e.g. ``"1d 2h 5m"``.

    Zero-valued components are omitted and fractions of a second are dropped.
    """
    parts = []
    if delta.days:
        parts.append(f"{delta.days}d")
    hours, rest = divmod(delta.seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        parts.append(f"{hours}h")
    if minutes:
        parts.append(f"{minutes}m")
    if seconds:
        parts.append(f"{seconds}s")
    return " ".join(parts)
