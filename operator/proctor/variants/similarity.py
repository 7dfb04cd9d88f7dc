"""How far a variant's text is from the original: the figure that shows variants differ (pure).

similarity = difflib's ratio 2M / (a + b) over word and punctuation tokens, M the tokens in
matching blocks (found in order, autojunk off), a and b the two texts' token counts: 1 for
the same text, lower as words change or parts move (a part moved elsewhere no longer
matches in order). Tokens rather than characters: the same reading, and fast enough for the
longest Verified statements (a character-level ratio takes over a minute on some).
"""

from __future__ import annotations

import difflib
import re
import statistics
from collections.abc import Iterable

_TOKEN = re.compile(r"\w+|[^\w\s]")


def similarity(original: str, variant: str) -> float:
    """Token-level difflib ratio of the two texts (1 = the same tokens in the same order)."""
    a, b = _TOKEN.findall(original), _TOKEN.findall(variant)
    if not a and not b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def spread(values: Iterable[float]) -> tuple[int, float, float, float]:
    """(count, median, min, max) of similarity values; NaNs for none."""
    found = sorted(values)
    if not found:
        return 0, float("nan"), float("nan"), float("nan")
    return len(found), statistics.median(found), found[0], found[-1]
