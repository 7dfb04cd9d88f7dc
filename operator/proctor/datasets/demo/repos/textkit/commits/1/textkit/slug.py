"""Turn arbitrary titles into URL-friendly slugs."""

import re

_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def slugify(text, separator="-", max_length=None):
    """Return a lowercase, URL-safe slug for ``text``.

    Runs of characters that are not letters or digits collapse into a single
    ``separator``; leading and trailing separators are removed.

    >>> slugify("Hello, World!")
    'hello-world'
    >>> slugify("Hello, World!", separator="_")
    'hello_world'

    When ``max_length`` is given the slug is cut to at most that many
    characters, without leaving a dangling separator at the end.
    """
    if not separator:
        raise ValueError("separator must be a non-empty string")
    if max_length is not None and max_length < 0:
        raise ValueError("max_length must be >= 0")

    slug = _NON_ALNUM.sub(separator, text.lower()).strip(separator)
    if max_length is not None:
        slug = slug[:max_length].rstrip(separator)
    return slug
