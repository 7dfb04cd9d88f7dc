import pytest

from textkit import slugify


def test_slugify_basic():
    assert slugify("Hello, World!") == "hello-world"


def test_slugify_collapses_runs_of_punctuation():
    assert slugify("  a -- b__c  ") == "a-b-c"


def test_slugify_keeps_digits():
    assert slugify("Top 10 Python tips (2024)") == "top-10-python-tips-2024"


def test_slugify_custom_separator():
    assert slugify("Hello, World!", separator="_") == "hello_world"


def test_slugify_max_length_does_not_end_with_separator():
    assert slugify("hello big world", max_length=10) == "hello-big"


def test_slugify_empty_string():
    assert slugify("") == ""


def test_slugify_rejects_empty_separator():
    with pytest.raises(ValueError):
        slugify("abc", separator="")


def test_slugify_rejects_negative_max_length():
    with pytest.raises(ValueError):
        slugify("abc", max_length=-1)
