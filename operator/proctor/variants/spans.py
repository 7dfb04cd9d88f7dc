"""What a rewording must keep verbatim: the problem text cut into prose and protected pieces.

A problem statement mixes prose with things an agent must read exactly: code blocks,
tracebacks, file paths, identifiers, URLs, quoted output. The text is cut in two steps:

* blocks: fenced code, then paragraphs (runs of non-blank lines); a paragraph with any
  code-like line (indented, a prompt such as `>>>` or `$`, a traceback, dense in symbols)
  is protected whole, and neighbouring protected blocks merge with the blank lines
  between them, so an indented block with blank lines inside stays one piece;
* inside a prose paragraph: inline code, URLs, quoted strings and every token that is not
  a plain word (paths, dotted names, snake_case, CamelCase, numbers, markup) are
  protected; only the plain words between them may be reworded.

Protecting too much only makes a variant closer to the original; protecting too little
could change what the agent must reproduce, so every doubt protects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r"^\s*(```|~~~)")
_PROMPT = re.compile(r"^(>>>|\.\.\.|\$ |In \[|Out\[|#!|\|)")
_TRACEBACK = "Traceback (most recent call last)"
# Inline spans, tried in this order at each position.
_INLINE = re.compile(
    r"`+[^`\n]+`+"                                   # inline code
    r"|(?:https?|ftp)://[^\s<>\"')\]]+|www\.[^\s<>\"')\]]+"  # URLs
    r"|\"[^\"\n]*\""                                 # double-quoted output
    r"|(?<![A-Za-z0-9])'[^'\n]+'(?![A-Za-z0-9])"     # single-quoted, not an apostrophe
    r"|\S+")                                         # any other token
# A plain word: letters, an optional apostrophe ending (don't, it's), light punctuation.
_WORD = re.compile(r"^\(?[A-Za-z][a-z]*(?:'[a-z]+)?\)?[,.;:!?]?$")
_LIST_MARK = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")
_HEADING = re.compile(r"^#{1,6} [A-Za-z][A-Za-z ,.'()/-]*:?\s*$")
"""A Markdown heading in words (`### Steps to Reproduce`): prose, not code."""


@dataclass(frozen=True)
class Piece:
    """A run of the text: prose that may be reworded, or a span kept verbatim."""

    text: str
    protected: bool


@dataclass(frozen=True)
class Block:
    """A paragraph of prose (as pieces), or a protected block kept verbatim."""

    text: str
    protected: bool

    @property
    def is_heading(self) -> bool:
        first = self.text.lstrip().splitlines()[0] if self.text.strip() else ""
        return first.startswith("#") or (first.startswith("**") and first.endswith("**"))


def _code_like(line: str) -> bool:
    if line[:1] in (" ", "\t") or _PROMPT.match(line) or _TRACEBACK in line:
        return True
    if _LIST_MARK.match(line) or _HEADING.match(line):
        return False
    symbols = sum(1 for c in line if not (c.isalnum() or c.isspace() or c in ",.;:!?'\"-()"))
    return symbols > 0.15 * max(1, len(line.strip())) or not any(c.isalpha() for c in line)


def _raw_blocks(text: str) -> list[tuple[str, bool]]:
    """Fenced blocks, paragraphs and the blank runs between them, in order."""
    lines = text.split("\n")
    out: list[tuple[str, bool]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            mark = _FENCE.match(line).group(1)  # type: ignore[union-attr]
            j = i + 1
            while j < len(lines) and not lines[j].lstrip().startswith(mark):
                j += 1
            out.append(("\n".join(lines[i:j + 1]), True))
            i = j + 1
        elif not line.strip():
            out.append((line, True))
            i += 1
        else:
            j = i
            while j < len(lines) and lines[j].strip() and not _FENCE.match(lines[j]):
                j += 1
            para = lines[i:j]
            out.append(("\n".join(para), any(map(_code_like, para))))
            i = j
    return out


def blocks(text: str) -> list[Block]:
    """The text as prose paragraphs and protected blocks, in order (blank lines between
    blocks are dropped; those between protected blocks join them into one)."""
    out: list[Block] = []
    blanks: list[str] = []
    for chunk, protected in _raw_blocks(text):
        if not chunk.strip():  # a blank line (a fenced block never is)
            blanks.append(chunk)
            continue
        if protected and out and out[-1].protected:
            out[-1] = Block("\n".join([out[-1].text, *blanks, chunk]), True)
        else:
            out.append(Block(chunk, protected))
        blanks = []
    return out


def pieces(paragraph: str) -> list[Piece]:
    """A prose paragraph as plain-word runs (rewordable) and protected inline spans."""
    out: list[Piece] = []
    pos = 0
    for m in _INLINE.finditer(paragraph):
        token = m.group(0)
        plain = m.group(0)[0] not in "`\"'" and _WORD.match(token) and not _is_name(token)
        gap = paragraph[pos:m.start()]
        if plain:
            _add(out, gap + token, False)
        else:
            _add(out, gap, False)
            _add(out, token, True)
        pos = m.end()
    _add(out, paragraph[pos:], False)
    return out


def _is_name(token: str) -> bool:
    """An identifier-looking word: ALLCAPS, or a capital after the first letter (CamelCase)."""
    word = token.strip("(),.;:!?")
    return len(word) > 1 and (word.isupper() or any(c.isupper() for c in word[1:]))


def _add(out: list[Piece], text: str, protected: bool) -> None:
    if not text:
        return
    if out and out[-1].protected == protected and not protected:
        out[-1] = Piece(out[-1].text + text, False)
    else:
        out.append(Piece(text, protected))


def protected_spans(text: str) -> list[str]:
    """Every span of `text` a rewording must keep verbatim, in order."""
    spans: list[str] = []
    for block in blocks(text):
        if block.protected:
            spans.append(block.text)
        else:
            spans += [p.text for p in pieces(block.text) if p.protected]
    return spans
