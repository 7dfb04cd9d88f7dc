"""Where a secret went: the files of a folder that hold it, read whole or gunzipped."""

from __future__ import annotations

import gzip
from pathlib import Path


def files_holding(folder: Path, secret: str) -> list[str]:
    """The files under `folder` whose bytes (or, gzipped, whose content) hold `secret`."""
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        if secret.encode() in data:
            found.append(str(path.relative_to(folder)))
    return found
