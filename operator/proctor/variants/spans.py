"""What a rewording must keep verbatim: the problem text cut into prose and protected pieces.

A problem statement mixes prose with things an agent must read exactly: code blocks,
tracebacks, file paths, identifiers, URLs, quoted output. The text is cut in two steps:

* blocks: fenced code, then paragraphs (runs of non-blank lines); in a paragraph with any
  code-like line (indented, a prompt such as `>>>` or `$`, a traceback, dense in symbols)
  every line is protected except those that read as sentences, and neighbouring
  protected blocks merge with the blank lines between them, so an indented block with
  blank lines inside stays one piece;
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


def _prose_line(line: str) -> bool:
    """A line that reads as a sentence: not code-like, starting with a capitalised plain
    word, at least three plain words and three in four of its tokens plain (so `import x`,
    `ValueError: msg` or `def f(x):` are not)."""
    tokens = line.split()
    plain = [t for t in tokens if _WORD.match(t) and not _is_name(t)]
    return (not _code_like(line) and bool(tokens) and tokens[0] in plain
            and tokens[0][:1].isupper() and len(plain) >= 3
            and len(plain) >= 0.75 * len(tokens))


def _line_runs(para: list[str]) -> list[tuple[str, bool]]:
    """A paragraph without code-like lines, whole and prose; with any, cut into runs of
    lines: prose where a line reads as a sentence, protected otherwise. Issue trackers
    without blank lines (Django's Trac) put a whole report in one paragraph, and one
    indented line would otherwise freeze all of its prose."""
    if not any(map(_code_like, para)):
        return [("\n".join(para), False)]
    runs: list[list[str]] = []  # alternating: sentence lines, other lines
    for line in para:
        if runs and _prose_line(line) == _prose_line(runs[-1][0]):
            runs[-1].append(line)
        else:
            runs.append([line])
    # A run of other lines is protected when it holds a code-like line; without one it is
    # prose (as in a paragraph without code), so that a rewording cut into paragraphs
    # again finds the same protected runs.
    out: list[tuple[str, bool]] = []
    for lines in runs:
        protected = not _prose_line(lines[0]) and any(map(_code_like, lines))
        if out and not protected and not out[-1][1]:
            out[-1] = (out[-1][0] + "\n" + "\n".join(lines), False)
        else:
            out.append(("\n".join(lines), protected))
    return out


def _raw_blocks(text: str) -> list[tuple[str, bool]]:
    """Fenced blocks, paragraphs and the blank runs between them, in order."""
    lines = text.split("\n")
    out: list[tuple[str, bool]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if fence := _FENCE.match(line):
            mark = fence.group(1)
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
            out += _line_runs(lines[i:j])
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
