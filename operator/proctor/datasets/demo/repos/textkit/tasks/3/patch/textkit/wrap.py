"""Fit text into a limited number of columns."""

DEFAULT_PLACEHOLDER = "..."


def truncate(text, width, placeholder=DEFAULT_PLACEHOLDER):
    """Shorten ``text`` to at most ``width`` characters.

    If the text is too long it is cut and ``placeholder`` is appended, so that
    the result, placeholder included, is never longer than ``width``.  If
    not even the placeholder fits, the placeholder itself is cut.

    >>> truncate("Hello, world", 8)
    'Hello...'
    """
    if width < 0:
        raise ValueError("width must be >= 0")
    if len(text) <= width:
        return text
    if width <= len(placeholder):
        return placeholder[:width]
    return text[: width - len(placeholder)] + placeholder


def wrap(text, width=70):
    """Greedily wrap ``text`` into lines of at most ``width`` characters.

    Whitespace between words is collapsed.  A single word longer than
    ``width`` is kept whole on a line of its own.
    """
    if width <= 0:
        raise ValueError("width must be > 0")
    lines = []
    current = ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) < width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def fill(text, width=70):
    """Like :func:`wrap`, but return a single string with newlines."""
    return "\n".join(wrap(text, width))
