"""The `template` strategy: deterministic rewordings of a problem statement.

Five styles, each a pure function of the text, the most different from the original
first (median similarity over Verified, see `similarity`): `reordered` (the report's parts
last first: sections, and in each the paragraphs and quoted blocks, each prose paragraph
with the second half of its sentences first), `outline` (a summary, then every sentence as
a bullet under a heading chosen by its words, each quoted block under the heading its
label or content names: a traceback under Observed behaviour before the code under How to
reproduce), `steps` (the problem, then the sentences numbered one a line, filler cut,
in the phases one works through: reproduce, what happens, what should happen, context,
each with its quoted blocks), `formal` (contractions spelled out, a formal vocabulary),
`terse` (greetings, thanks and filler dropped). Beyond five, pairs of styles are applied
in turn (`reordered-outline`, ...). Only prose changes; protected spans (see `spans`)
move whole, a paragraph ending in a colon moves with the block it introduces, and each
style adds its own lead line, so a variant never equals the original.
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
# The formal register's vocabulary, one pass (so that `issue` and `problem` swap).
_REGISTER = {
    "uses": "employs", "used": "employed", "using": "employing",
    "gets": "obtains", "got": "obtained", "getting": "obtaining",
    "try": "attempt", "tries": "attempts", "tried": "attempted", "trying": "attempting",
    "fixed": "corrected", "fixing": "correcting",
    "issue": "problem", "issues": "problems", "problem": "issue", "problems": "issues",
    "wrong": "incorrect", "needed": "required",
    "show": "display", "shows": "displays", "showing": "displaying", "shown": "displayed",
    "see": "observe", "sees": "observes", "saw": "observed", "seen": "observed",
    "want": "wish", "wants": "wishes", "think": "believe", "also": "additionally",
    "because": "since", "should": "ought to", "currently": "at present",
    "example": "instance", "examples": "instances",
    "expected": "anticipated", "expect": "anticipate", "expects": "anticipates",
    "happens": "occurs", "happen": "occur", "happened": "occurred", "happening": "occurring",
    "maybe": "perhaps", "probably": "likely", "checked": "verified", "checking": "verifying",
    "find": "locate", "finds": "locates", "simple": "straightforward",
    "easy": "straightforward", "allow": "permit", "allows": "permits", "allowed": "permitted",
    "remove": "eliminate", "removes": "eliminates", "removed": "eliminated",
    "removing": "eliminating", "create": "construct", "creates": "constructs",
    "created": "constructed", "creating": "constructing", "add": "include",
    "adds": "includes", "added": "included", "but": "yet", "however": "nevertheless",
    "get rid of": "eliminate", "figure out": "determine", "look at": "examine",
    "looks like": "appears to be", "now": "at present",
}
_REGISTER_WORDS = re.compile(
    r"\b(" + "|".join(sorted(map(re.escape, _REGISTER), key=len, reverse=True)) + r")\b",
    re.IGNORECASE)
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
        def keep_case(m: re.Match[str], r: str = repl) -> str:
            return _keep_case(m.group(0), m.expand(r))
        text = _ci(pattern).sub(keep_case, text)
    return text


def _map_prose(block: Block, change: Callable[[str], str]) -> Block:
    """The paragraph with `change` applied to its prose pieces only."""
    if block.protected:
        return block
    out = []
    # A paragraph that began with a capital begins with one again (after a cut greeting);
    # one in lower case finishes the sentence of the block before it and stays so.
    capital = block.text.lstrip()[:1].isupper()
    for i, p in enumerate(pieces(block.text)):
        if p.protected:
            out.append(p.text)
            continue
        text = re.sub(r"(?<=\S) {2,}(?=\S)", " ", change(p.text))
        text = re.sub(r"(?m)^ +", "", text) if i == 0 else text
        out.append(text[:1].upper() + text[1:] if i == 0 and capital else text)
    return Block("".join(out), False)


_FENCE_LINE = re.compile(r"(?m)^\s*(?:```|~~~)")


def _join(lead: str, parts: list[Block]) -> str:
    """The lead line and the blocks; a block whose code fence never closes (the statement
    ends inside it) stays last wherever a style moved it, or it would swallow what follows."""
    open_ = [b for b in parts if b.protected and len(_FENCE_LINE.findall(b.text)) % 2]
    parts = [b for b in parts if b not in open_] + open_
    return "\n\n".join([lead, *(b.text for b in parts if b.text.strip())])


def _register(text: str) -> str:
    return _REGISTER_WORDS.sub(
        lambda m: _keep_case(m.group(0), _REGISTER[m.group(0).lower()]), text)


def formal(text: str) -> str:
    body = [_map_prose(b, lambda s: _register(_substitute(_FORMAL, s))) for b in blocks(text)]
    return _join("As reported:", body)


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
    # A lone "Description" is the field name under a Trac ticket's title, not a sentence.
    return [s.strip() for s in "".join(p.text for p in split).split("\0")
            if s.strip() and s.strip() != "Description"]


def _halves(block: Block) -> Block:
    """A prose paragraph with the second half of its sentences first (the others kept)."""
    if block.protected:
        return block
    sentences = _sentences(block)
    if len(sentences) < 2:
        return block
    h = len(sentences) // 2
    return Block(" ".join(sentences[h:] + sentences[:h]), False)


# The outline's headings, and the words that put a sentence under one (first match wins).
_KINDS = [
    ("Expected behaviour", re.compile(r"\b(?:expect\w*|should|would like|ought|intended|"
                                      r"desired|instead of)\b", re.IGNORECASE)),
    ("Observed behaviour", re.compile(r"\b(?:error\w*|fail\w*|crash\w*|rais\w+|breaks?|"
                                      r"broken|wrong\w*|incorrect\w*|bug\w*|exception\w*|"
                                      r"actual\w*|instead|returns?|gives?|results? in)\b",
                                      re.IGNORECASE)),
    ("How to reproduce", re.compile(r"\b(?:reproduc\w*|steps?|run\w*|example\w*|"
                                    r"following|below|minimal|snippet|code|call\w*|"
                                    r"try\w*|tried)\b", re.IGNORECASE)),
]


def _kind(sentence: str) -> str:
    """The heading a sentence goes under; a heading or list block by its first line (a
    section `### Actual behavior` whose text quotes an expected value is still actual)."""
    first = sentence.split("\n", 1)[0]
    return next((name for name, words in _KINDS if words.search(first)), "Other details")


_OBSERVED_BLOCK = re.compile(r"Traceback \(most recent call last\)|^\w*(?:Error|Exception|"
                             r"Warning)\b|^E +\w", re.MULTILINE)


def _block_kind(unit: list[Block]) -> str:
    """Where the outline files a quoted block: by the words of the sentence introducing
    it, else under Observed behaviour when it holds a traceback or an error line, else
    under How to reproduce."""
    label = _sentences(unit[0])[-1] if not unit[0].protected else ""
    kind = _kind(label) if label else "Other details"
    if kind != "Other details":
        return kind
    block = next(b for b in unit if b.protected)
    return "Observed behaviour" if _OBSERVED_BLOCK.search(block.text) else \
        "How to reproduce"


def outline(text: str) -> str:
    """The report as an outline: its first sentence as the summary, then every other
    sentence as a bullet under Observed behaviour, How to reproduce, Expected behaviour or
    Other details (by its words), in that order; each quoted block, with the paragraph
    introducing it, under the heading its label or its content names (a traceback under
    Observed behaviour, code under How to reproduce). Every sentence is kept, only its
    place changes."""
    parts = blocks(text)
    units = _grouped(parts)
    prose = [u[0] for u in units if not _quoted(u)]
    sentences = [s for b in prose for s in _sentences(b)]
    if not sentences:
        return _join("The report, as quoted material:", parts)
    groups: dict[str, list[str]] = {"Observed behaviour": [], "How to reproduce": [],
                                    "Expected behaviour": [], "Other details": []}
    quoted: dict[str, list[Block]] = {name: [] for name in groups}
    for sentence in sentences[1:]:
        groups[_kind(sentence)].append(sentence if "\n" in sentence else f"- {sentence}")
    for unit in units:
        if _quoted(unit):
            quoted[_block_kind(unit)] += unit
    body = [Block(f"Summary: {sentences[0]}", False)]
    for heading, lines in groups.items():
        if lines or quoted[heading]:
            body.append(Block("\n".join([f"{heading}:", *lines]), False))
            body += quoted[heading]
    return _join("In outline:", body)


_PHASES = {"How to reproduce": "Reproduce:", "Observed behaviour": "What happens:",
           "Expected behaviour": "What should happen:", "Other details": "Context:"}
"""The steps' phases, in the order one works on a report (the outline's kinds)."""


def steps(text: str) -> str:
    """The report as the steps one works through: the problem (its first sentence), then
    reproducing it, what happens, what should happen and the background, each phase with
    its sentences numbered (one a line, with the terse style's cuts) and the quoted blocks
    the outline would file under it. Every sentence is kept, only its place changes."""
    parts = blocks(text)
    units = [[_map_prose(b, lambda s: _substitute(_TERSE, s)) for b in unit]
             for unit in _grouped(parts)]
    prose = [u[0] for u in units if not _quoted(u)]
    sentences = [s for b in prose for s in _sentences(b)]
    if not sentences:
        return _join("Step by step, the quoted material:", parts)
    groups: dict[str, list[str]] = {name: [] for name in _PHASES}
    quoted: dict[str, list[Block]] = {name: [] for name in _PHASES}
    for sentence in sentences[1:]:
        groups[_kind(sentence)].append(sentence)
    for unit in units:
        if _quoted(unit):
            quoted[_block_kind(unit)] += unit
    body = [Block(f"Problem: {sentences[0]}", False)]
    number = 0
    for name, head in _PHASES.items():
        if not groups[name] and not quoted[name]:
            continue
        lines = [head]
        for sentence in groups[name]:
            number += 1
            lines.append(f"{number}. {sentence}" if "\n" not in sentence else sentence)
        body.append(Block("\n".join(lines), False))
        body += quoted[name]
    return _join("Step by step:", body)


def _sections(parts: list[Block]) -> list[list[Block]]:
    out: list[list[Block]] = []
    for block in parts:
        if block.is_heading or not out:
            out.append([])
        out[-1].append(block)
    return out


def _leads_in(block: Block, first: bool) -> bool:
    """A prose paragraph that introduces the quoted block after it: it ends in a colon
    ("This fails with:") or, unless it is the report's first (its title), runs on into the
    block, ending in a lower-case word or a comma ("the regex could be changed to")."""
    end = block.text.rstrip()
    return not block.protected and not block.is_heading and (
        end.endswith(":") or (not first and (end[-1:].islower() or end.endswith(","))))


def _grouped(parts: list[Block]) -> list[list[Block]]:
    """The blocks in order, each quoted block together with the paragraph that introduces
    it (see `_leads_in`) and the one that finishes its sentence (starting in lower case:
    "in order to reject ..."), every other block alone, so that a style that moves a block
    moves the words around it that need it."""
    out: list[list[Block]] = []
    for i, block in enumerate(parts):
        prev = parts[i - 1] if i else None
        after = parts[i + 1] if i + 1 < len(parts) else None
        labelled = block.protected and prev is not None and out[-1] == [prev] and \
            _leads_in(prev, i == 1)
        finishes = not block.protected and bool(out) and out[-1][-1].protected and \
            block.text.lstrip()[:1].islower() and \
            not (after and after.protected and _leads_in(block, False))
        if labelled or finishes:
            out[-1].append(block)
        else:
            out.append([block])
    return out


def _quoted(unit: list[Block]) -> bool:
    return any(b.protected for b in unit)


def reordered(text: str) -> str:
    """The report's parts last first: sections last first, and in each section (after its
    heading) the paragraphs and quoted blocks last first, a quoted block with the paragraph
    that introduces it; in each prose paragraph the second half of its sentences first."""
    sections = _sections(blocks(text))
    moved: list[Block] = []
    for section in sections[::-1]:
        head = section[:1] if section[0].is_heading and len(sections) > 1 else []
        rest = section[len(head):]
        # Only a paragraph on its own is cut in halves: one around a quoted block must
        # keep the words next to the block.
        moved += head + [b for unit in _grouped(rest)[::-1]
                         for b in (unit if _quoted(unit) else map(_halves, unit))]
    return _join("The report's parts, the last one first:", moved)


STYLES: dict[str, Callable[[str], str]] = {
    "reordered": reordered, "outline": outline, "steps": steps, "formal": formal,
    "terse": terse}
"""Most different from the original first (median difflib similarity over Verified)."""


def _combined(names: tuple[str, ...]) -> Callable[[str], str]:
    """The styles applied in turn; only the last one's lead line is kept."""
    def apply(text: str) -> str:
        for i, name in enumerate(names):
            text = STYLES[name](text)
            if i < len(names) - 1:
                text = text.split("\n\n", 1)[1]
        return text
    return apply


_CLASHING = {("outline", "steps")}
"""Pairs not combined: both lay the prose out as a list."""


def style_ids() -> list[str]:
    """Every template variant id, in the order variants are taken: the single styles (most
    different first), then pairs of them applied in turn."""
    names = list(STYLES)
    return ["-".join(c) for n in (1, 2) for c in itertools.combinations(names, n)
            if c not in _CLASHING]


VERSION = "3"
"""Bumped whenever a style's rewording changes: stored template variants of another
version are not reused."""
MAX_VARIATIONS = len(style_ids())
"""How many distinct template variants exist (5 styles and 9 of their pairs: 14)."""


def reword(text: str, variant_id: str) -> str:
    """The text in the style `variant_id` names (one of `style_ids()`)."""
    names = tuple(variant_id.split("-"))
    if variant_id not in style_ids():
        raise ValueError(f"unknown template variant {variant_id!r}")
    return _combined(names)(text)
