"""Turn arbitrary titles into URL-friendly slugs."""

import re
import unicodedata

_NON_ALNUM = re.compile(r"[^a-z0-9]+")

# Lowercase letters that have no Unicode decomposition but a usual ASCII spelling.
_TRANSLITERATIONS = str.maketrans(
    {
        "ß": "ss",
        "æ": "ae",
        "œ": "oe",
        "ø": "o",
        "ł": "l",
        "đ": "d",
        "ð": "d",
        "þ": "th",
        "ı": "i",
    }
)


def _to_ascii(text):
    """Lowercase ``text`` and reduce it to ASCII, transliterating where possible."""
    text = text.lower().translate(_TRANSLITERATIONS)
    text = unicodedata.normalize("NFKD", text)
    return text.encode("ascii", "ignore").decode("ascii")


def slugify(text, separator="-", max_length=None):
    """Return a lowercase, URL-safe slug for ``text``.

    Runs of characters that are not letters or digits collapse into a single
    ``separator``; leading and trailing separators are removed.  Accented
    letters are replaced by their unaccented form (``"é"`` becomes ``"e"``).

    >>> slugify("Hello, World!")
    'hello-world'
    >>> slugify("Crème Brûlée", separator="_")
    'creme_brulee'

    When ``max_length`` is given the slug is cut to at most that many
    characters, without leaving a dangling separator at the end.
    """
    if not separator:
        raise ValueError("separator must be a non-empty string")
    if max_length is not None and max_length < 0:
        raise ValueError("max_length must be >= 0")

    slug = _NON_ALNUM.sub(separator, _to_ascii(text)).strip(separator)
    if max_length is not None:
        slug = slug[:max_length].rstrip(separator)
    return slug
