"""What outlives a pod: the patch and the logs, compressed, the test log capped.

The grade step prints them after the result (one JSON line each), so the operator can
read everything from the grade container's log and keep it in objects the Evaluation
owns; `proctor results pull` writes them back as files.
"""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

from proctor.runner.workdir import WorkDir

HEAD_BYTES = 128 * 1024
TAIL_BYTES = 128 * 1024
KEPT_FILES = ("patch.diff", "test_output.txt", "apply.log")
ARTIFACTS_KEY = "proctor_artifacts"


def cap(data: bytes, head: int = HEAD_BYTES, tail: int = TAIL_BYTES) -> bytes:
    """The head and the tail of `data`, with a note of what was cut between them."""
    if len(data) <= head + tail:
        return data
    cut = len(data) - head - tail
    return data[:head] + f"\n... [{cut} bytes cut by Proctor] ...\n".encode() + data[-tail:]


def pack(data: bytes) -> str:
    """Compressed and base64-encoded, as ConfigMap binaryData holds it."""
    return base64.b64encode(gzip.compress(data, mtime=0)).decode()


def unpack(text: str) -> bytes:
    return gzip.decompress(base64.b64decode(text))


def collect(work: WorkDir) -> dict[str, str]:
    """`{file.gz: packed}` for each kept file that exists (the test log capped)."""
    found = {}
    for name in KEPT_FILES:
        path = work / name
        if path.exists():
            data = path.read_bytes()
            found[f"{name}.gz"] = pack(cap(data) if name != "patch.diff" else data)
    return found


def artifacts_line(work: WorkDir) -> str:
    return json.dumps({ARTIFACTS_KEY: collect(work)})


def parse_grade_log(log: str) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The full result and the artifacts from a grade container's log."""
    result, artifacts = None, {}
    for line in log.splitlines():
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and ARTIFACTS_KEY in data:
            artifacts = data[ARTIFACTS_KEY]
        elif isinstance(data, dict) and "outcome" in data and "item_id" in data:
            result = data
    return result, artifacts
