"""Convert identifiers between naming conventions."""

import re

# "fooBar" -> "foo Bar", "v2Api" -> "v2 Api"
_LOWER_UPPER = re.compile(r"([a-z0-9])([A-Z])")
_SEPARATORS = re.compile(r"[\s_\-.]+")


def split_words(text):
    """Split an identifier or phrase into its words.

    Understands spaces, underscores, hyphens, dots and camelCase humps.

    >>> split_words("fooBar_baz-qux")
    ['foo', 'Bar', 'baz', 'qux']
    """
    text = _LOWER_UPPER.sub(r"\1 \2", text)
    return [word for word in _SEPARATORS.split(text) if word]


def snake_case(text):
    """Return ``text`` as ``snake_case``."""
    return "_".join(word.lower() for word in split_words(text))


def kebab_case(text):
    """Return ``text`` as ``kebab-case``."""
    return "-".join(word.lower() for word in split_words(text))


def pascal_case(text):
    """Return ``text`` as ``PascalCase``."""
    return "".join(word.capitalize() for word in split_words(text))


def camel_case(text):
    """Return ``text`` as ``camelCase``."""
    words = split_words(text)
    if not words:
        return ""
    return words[0].lower() + "".join(word.capitalize() for word in words[1:])
