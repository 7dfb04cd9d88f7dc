import pytest

from textkit import fill, truncate, wrap


def test_truncate_short_text_is_unchanged():
    assert truncate("Hello", 10) == "Hello"


def test_truncate_text_exactly_width_is_unchanged():
    assert truncate("Hello", 5) == "Hello"


def test_truncate_negative_width():
    with pytest.raises(ValueError):
        truncate("Hello", -1)


def test_wrap_basic():
    text = "the quick brown fox jumps over the lazy dog"
    assert wrap(text, 16) == ["the quick brown", "fox jumps over", "the lazy dog"]


def test_wrap_collapses_whitespace():
    assert wrap("  one   two\n three  ", 40) == ["one two three"]


def test_wrap_long_word_gets_its_own_line():
    assert wrap("a supercalifragilistic word", 10) == ["a", "supercalifragilistic", "word"]


def test_wrap_empty_text():
    assert wrap("", 10) == []


def test_wrap_rejects_non_positive_width():
    with pytest.raises(ValueError):
        wrap("text", 0)


def test_fill_joins_lines():
    assert fill("aaa bbb ccc", 8) == "aaa bbb\nccc"
