"""What a fresh clone of the repository holds: the files git tracks, links kept as links
(the chart's and the package's crds/ are links to crds/)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from support.paths import ROOT

SYMLINK = "120000"
"""git's mode for a tracked symbolic link."""


def tracked_files(*flags: str) -> list[str]:
    """`git ls-files` of the work tree (tracked files, and new ones not ignored)."""
    return subprocess.run(["git", "ls-files", *flags], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.splitlines()


def copy_tracked(paths: list[str], dest: Path) -> Path:
    """Copy ``paths`` (relative to the repository) into ``dest``, links as links."""
    for name in paths:
        source, target = ROOT / name, dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
        elif source.is_file():
            shutil.copy2(source, target)
    return dest


def fresh_clone(dest: Path) -> Path:
    """The work tree as a fresh clone of it would be (uncommitted edits included)."""
    return copy_tracked(tracked_files("-co", "--exclude-standard"), dest)
