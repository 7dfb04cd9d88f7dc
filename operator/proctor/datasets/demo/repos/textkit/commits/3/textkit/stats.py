"""Simple statistics about a piece of text."""

import re
from collections import Counter

_WORD = re.compile(r"[\w']+")

#: Average adult silent reading speed, in words per minute.
WORDS_PER_MINUTE = 200


def words(text):
    """Return the words of ``text``; apostrophes stay inside words."""
    return _WORD.findall(text)


def word_count(text):
    """Return the number of words in ``text``."""
    return len(words(text))


def char_frequency(text, ignore_case=True, ignore_whitespace=True):
    """Return a :class:`collections.Counter` of the characters in ``text``."""
    if ignore_case:
        text = text.lower()
    if ignore_whitespace:
        text = "".join(text.split())
    return Counter(text)


def reading_time(text, wpm=20):
    """Estimate how many whole minutes it takes to read ``text``.

    Any non-empty text takes at least one minute; partial minutes are
    rounded up.  Empty text takes zero minutes.
    """
    if wpm <= 0:
        raise ValueError("wpm must be > 0")
    return word_count(text) // wpm
