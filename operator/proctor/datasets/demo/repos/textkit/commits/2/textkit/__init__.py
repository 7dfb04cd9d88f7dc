"""Small, dependency-free helpers for everyday text handling."""

from textkit.case import camel_case, kebab_case, pascal_case, snake_case, split_words
from textkit.slug import slugify
from textkit.wrap import fill, truncate, wrap

__version__ = "1.1.0"

__all__ = [
    "camel_case",
    "fill",
    "kebab_case",
    "pascal_case",
    "slugify",
    "snake_case",
    "split_words",
    "truncate",
    "wrap",
]
