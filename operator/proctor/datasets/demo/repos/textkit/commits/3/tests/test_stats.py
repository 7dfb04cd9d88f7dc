import pytest

from textkit import char_frequency, reading_time, word_count, words


def test_words_keeps_apostrophes():
    assert words("Don't panic, it's fine.") == ["Don't", "panic", "it's", "fine"]


def test_word_count():
    assert word_count("one two  three\nfour") == 4


def test_word_count_unicode():
    assert word_count("naïve café déjà vu") == 4


def test_word_count_empty():
    assert word_count("") == 0


def test_char_frequency_defaults():
    freq = char_frequency("Aa b")
    assert freq["a"] == 2
    assert freq["b"] == 1
    assert " " not in freq


def test_char_frequency_case_sensitive():
    freq = char_frequency("Aa", ignore_case=False)
    assert freq["A"] == 1
    assert freq["a"] == 1


def test_reading_time_explicit_speed():
    assert reading_time(" ".join(["word"] * 400), wpm=100) == 4


def test_reading_time_empty_text():
    assert reading_time("") == 0


def test_reading_time_rejects_bad_speed():
    with pytest.raises(ValueError):
        reading_time("some text", wpm=0)
