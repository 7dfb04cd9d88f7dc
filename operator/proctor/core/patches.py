"""Checking a patch before it goes near a repository.

An agent's answer is untrusted text. Before the test step applies it, Proctor
makes sure it is a unified diff and that every path it touches stays inside the
repository: no absolute paths, no `..`, nothing under `.git/`, no symbolic links
(a link could point a later write outside the checkout). `git apply` refuses
most of these itself, but the fallback `patch` command is more forgiving, so the
check happens once here, for every method alike.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import partial
from pathlib import PurePosixPath

_DIFF_GIT = re.compile(r"^diff --git (?P<a>\S+) (?P<b>\S+)$")
_FILE_HEADER = re.compile(r"^(?:---|\+\+\+) (?P<path>[^\t\n]+)")
_RENAME_OR_COPY = re.compile(r"^(?:rename|copy) (?:from|to) (?P<path>.+)$")
_SYMLINK_MODE = re.compile(r"^(?:new file mode|new mode|old mode|deleted file mode) 120000")
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")
_BINARY = re.compile(r"^(?:GIT binary patch|Binary files )")


@dataclass(frozen=True)
class PatchCheck:
    """What Proctor found in a patch: its paths, or why it is refused."""

    paths: tuple[str, ...] = ()
    refused: str | None = None
    sha256: str | None = None
    size_bytes: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.refused is None


def _strip_prefix(raw: str) -> str | None:
    """`a/x/y.py` -> `x/y.py`; /dev/null -> None."""
    raw = raw.strip().strip('"')
    if raw == "/dev/null":
        return None
    if raw.startswith(("a/", "b/")):
        return raw[2:]
    return raw


def unsafe_reason(path: str) -> str | None:
    """Why a path from a patch may not be touched, or None if it is fine."""
    if not path or "\0" in path:
        return "an empty path"
    if path.startswith("/") or path.startswith("\\"):
        return f"an absolute path ({path})"
    parts = PurePosixPath(path).parts
    if ".." in parts:
        return f"a path outside the repository ({path})"
    if parts and parts[0] == ".git":
        return f"a path inside .git ({path})"
    return None


def header_paths(line: str) -> list[str]:
    """The repository paths one diff header line names (`diff --git a/x b/x`, `--- a/x`,
    `+++ b/x`, `rename from x`, ...); [] for any other line, and for /dev/null."""
    match = _DIFF_GIT.match(line)
    if match:
        raw = [match["a"], match["b"]]
    else:
        match = _FILE_HEADER.match(line) or _RENAME_OR_COPY.match(line)
        raw = [match["path"]] if match else []
    return [path for path in map(_strip_prefix, raw) if path]


def is_symlink_mode(line: str) -> bool:
    """Whether a header line gives a file git's symbolic-link mode."""
    return bool(_SYMLINK_MODE.match(line))


def _paths_of(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(path for line in lines for path in header_paths(line)))


def check_patch(text: str) -> PatchCheck:
    """Refuse a patch that is not a diff or that reaches outside the repository."""
    data = text.encode("utf-8", "surrogateescape")
    digest = hashlib.sha256(data).hexdigest()
    lines = text.splitlines()
    paths = _paths_of(lines)
    checked = partial(PatchCheck, sha256=digest, size_bytes=len(data))
    has_hunks = any(_HUNK.match(line) or _BINARY.match(line) for line in lines)
    is_git_only = any(_DIFF_GIT.match(line) for line in lines)  # renames, mode changes
    if not paths or not (has_hunks or is_git_only):
        return checked(refused="not a unified diff")
    for path in paths:
        reason = unsafe_reason(path)
        if reason:
            return checked(paths=tuple(paths), refused=f"patch touches {reason}")
    if any(is_symlink_mode(line) for line in lines):
        return checked(paths=tuple(paths), refused="patch creates or changes a symbolic link")
    return checked(paths=tuple(paths))
