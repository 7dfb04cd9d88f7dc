"""Small, dependency-free helpers for everyday text handling."""

from textkit.case import camel_case, kebab_case, pascal_case, snake_case, split_words
from textkit.slug import slugify
from textkit.stats import char_frequency, reading_time, word_count, words
from textkit.wrap import fill, truncate, wrap

__version__ = "1.2.0"

__all__ = [
    "camel_case",
    "char_frequency",
    "fill",
    "kebab_case",
    "pascal_case",
    "reading_time",
    "slugify",
    "snake_case",
    "split_words",
    "truncate",
    "word_count",
    "words",
    "wrap",
]
