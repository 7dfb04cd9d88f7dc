"""The `template` strategy: deterministic rewordings of a problem statement's prose.

Four styles, each a pure function of the text: `formal` (contractions spelled out,
informal words replaced), `terse` (greetings, thanks and filler dropped), `steps` (the
report as numbered steps, one sentence a line), `reordered` (sections, or the evidence
and the description, in another order). Beyond four, styles are combined
(`formal-steps`, ...). Only the prose between protected spans changes (see `spans`);
each style also adds its own lead line, so a variant never equals the original.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

from proctor.variants.spans import Block, Piece, blocks, pieces

_FORMAL = [
    (r"\bcan't\b", "cannot"), (r"\bwon't\b", "will not"), (r"\blet's\b", "let us"),
    (r"\b(\w+)n't\b", r"\1 not"), (r"\bI'm\b", "I am"), (r"\b(\w+)'re\b", r"\1 are"),
    (r"\b(\w+)'ve\b", r"\1 have"), (r"\b(\w+)'ll\b", r"\1 will"), (r"\bI'd\b", "I would"),
    (r"\b(it|that|there|what|here)'s\b", r"\1 is"), (r"\bgonna\b", "going to"),
    (r"\bwanna\b", "want to"), (r"\ba lot of\b", "many"), (r"\bkind of\b", "somewhat"),
    (r"\bseems\b", "appears"), (r"\bseem\b", "appear"), (r"\bbug\b", "defect"),
    (r"\bbugs\b", "defects"), (r"\bbig\b", "large"), (r"\bHi\b", "Hello"),
    (r"\bThanks\b", "Thank you"),
]
_TERSE = [
    (r"^(?:Hi|Hello|Hey)(?: (?:all|everyone|there|folks))?[,!.]\s*", ""),
    (r"\b(?:Thanks|Thank you)(?: in advance| a lot| very much)?[!.]?\s*$", ""),
    (r"\b(?:I think|I believe|I guess|It seems that|It seems like|Basically|Actually),? ",
     ""),
    (r"\b(?:just|really|very|simply|quite|basically|actually|please) ", ""),
    (r"\bin order to\b", "to"), (r"\bdue to the fact that\b", "because"),
    (r"\bis able to\b", "can"), (r"\bare able to\b", "can"), (r"\ba lot of\b", "many"),
]
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])|\0")
_TITLE_BREAK = re.compile(r"(?<=[A-Za-z0-9])\n(?=[A-Z])")


def _ci(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE | re.MULTILINE)


def _keep_case(old: str, new: str) -> str:
    return new[:1].upper() + new[1:] if old[:1].isupper() and new else new


def _substitute(rules: list[tuple[str, str]], text: str) -> str:
    for pattern, repl in rules:
        text = _ci(pattern).sub(lambda m, r=repl: _keep_case(m.group(0), m.expand(r)), text)
    return text


def _map_prose(block: Block, change: Callable[[str], str]) -> Block:
    """The paragraph with `change` applied to its prose pieces only."""
    if block.protected:
        return block
    out = []
    for i, p in enumerate(pieces(block.text)):
        if p.protected:
            out.append(p.text)
            continue
        text = re.sub(r"(?<=\S) {2,}(?=\S)", " ", change(p.text))
        text = re.sub(r"(?m)^ +", "", text) if i == 0 else text
        out.append(text[:1].upper() + text[1:] if i == 0 else text)
    return Block("".join(out), False)


def _join(lead: str, parts: list[Block]) -> str:
    return "\n\n".join([lead, *(b.text for b in parts if b.text.strip())])


def formal(text: str) -> str:
    body = [_map_prose(b, lambda s: _substitute(_FORMAL, s)) for b in blocks(text)]
    return _join("The following issue has been reported.", body)


def terse(text: str) -> str:
    body = [_map_prose(b, lambda s: _substitute(_TERSE, s)) for b in blocks(text)]
    return _join("Issue:", body)


def _sentences(block: Block) -> list[str]:
    """A prose paragraph as sentences; a list or heading paragraph stays whole."""
    lines = block.text.splitlines()
    if block.is_heading or any(re.match(r"\s*(?:[-*+]|\d+[.)])\s", ln) for ln in lines):
        return [block.text]
    split: list[Piece] = []
    for p in pieces(block.text):
        # A line break is a sentence break when the next line starts with a capital and
        # the line has no end mark (an issue's title line); otherwise a space.
        text = p.text if p.protected else _TITLE_BREAK.sub("\0", p.text).replace("\n", " ")
        split.append(Piece(text if p.protected else _SENTENCE_END.sub("\0", text), p.protected))
    return [s.strip() for s in "".join(p.text for p in split).split("\0") if s.strip()]


def steps(text: str) -> str:
    body: list[Block] = []
    number = 0
    for block in blocks(text):
        if block.protected:
            body.append(block)
            continue
        lines = []
        for sentence in _sentences(block):
            number += 1
            lines.append(f"{number}. {sentence}" if "\n" not in sentence else sentence)
        body.append(Block("\n".join(lines), False))
    return _join("Work through this report step by step:", body)


def _sections(parts: list[Block]) -> list[list[Block]]:
    out: list[list[Block]] = []
    for block in parts:
        if block.is_heading or not out:
            out.append([])
        out[-1].append(block)
    return out


def reordered(text: str) -> str:
    parts = blocks(text)
    sections = _sections(parts)
    if len(sections) >= 2:
        moved = [b for s in sections[1:] + sections[:1] for b in s]
        return _join("The report's sections, the first one last:", moved)
    evidence = [b for b in parts if b.protected] + [b for b in parts if not b.protected]
    if len(parts) >= 2 and evidence != parts:
        return _join("The evidence first, then the description:", evidence)
    if len(parts) >= 2:
        return _join("The report, its first part last:", parts[1:] + parts[:1])
    sentences = _sentences(parts[0]) if parts and not parts[0].protected else []
    if len(sentences) >= 2:
        return _join("The report, its first sentence last:",
                     [Block(" ".join(sentences[1:] + sentences[:1]), False)])
    return _join("The report:", parts)


STYLES: dict[str, Callable[[str], str]] = {
    "formal": formal, "terse": terse, "steps": steps, "reordered": reordered}


def _combined(names: tuple[str, ...]) -> Callable[[str], str]:
    def apply(text: str) -> str:
        for name in names:
            text = STYLES[name](text)
        return text
    return apply


def style_ids() -> list[str]:
    """Every template variant id, in the order variants are taken: singles, then pairs..."""
    names = list(STYLES)
    return ["-".join(c) for n in range(1, len(names) + 1)
            for c in itertools.combinations(names, n)]


VERSION = "1"
"""Bumped whenever a style's rewording changes: stored template variants of another
version are not reused."""
MAX_VARIATIONS = len(style_ids())
"""How many distinct template variants exist (15)."""


def reword(text: str, variant_id: str) -> str:
    """The text in the style `variant_id` names (one of `style_ids()`)."""
    names = tuple(variant_id.split("-"))
    if variant_id not in style_ids():
        raise ValueError(f"unknown template variant {variant_id!r}")
    return _combined(names)(text)
