"""What the agent sent back for an item, kept bounded: `transcript.json.gz` in its work folder.

The transcript holds the agent's messages (oldest first, the final one last), its
artifacts and the metadata of every event, as A2A delivered them (protobuf JSON). It is
bounded before it is written: a string longer than STRING_CAP keeps its head and tail;
then, while the whole is over TOTAL_CAP, messages are dropped from the middle (the first
and the last ones tell most). What was cut is recorded in its `cut` field. gzip then
shrinks what is left (agent prose and diffs compress about tenfold).
"""

from __future__ import annotations

import gzip
import json
from typing import Any

from proctor.runner.workdir import WorkDir

FILE = "transcript.json.gz"
STRING_CAP = 32 * 1024
TOTAL_CAP = 512 * 1024
KEEP_FIRST = 2


def _cap_strings(value: Any, cut: dict[str, int]) -> Any:
    """The value with every string over STRING_CAP cut to its head and tail."""
    if isinstance(value, str) and len(value) > STRING_CAP:
        half = STRING_CAP // 2
        cut["strings_cut"] += 1
        cut["chars_cut"] += len(value) - 2 * half
        return f"{value[:half]}\n... [{len(value) - 2 * half} characters cut by Proctor] ...\n" \
               f"{value[-half:]}"
    if isinstance(value, dict):
        return {k: _cap_strings(v, cut) for k, v in value.items()}
    if isinstance(value, list):
        return [_cap_strings(v, cut) for v in value]
    return value


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


def bound(transcript: dict[str, Any]) -> dict[str, Any]:
    """The transcript within the caps, with `cut` saying what was taken out (pure)."""
    cut = {"strings_cut": 0, "chars_cut": 0, "messages_dropped": 0, "metadata_dropped": 0,
           "bytes_before": _size(transcript)}
    kept = _cap_strings(transcript, cut)
    messages, metadata = list(kept.get("messages", [])), list(kept.get("metadata", []))
    # Sizes are counted once: dropping one entry takes its size (and a separator) off.
    size = _size(kept)
    while size > TOTAL_CAP:
        if metadata:  # event metadata goes first: the messages say more
            size -= _size(metadata.pop(len(metadata) // 2)) + 2
            cut["metadata_dropped"] += 1
        elif len(messages) > KEEP_FIRST + 1:
            size -= _size(messages.pop(KEEP_FIRST)) + 2
            cut["messages_dropped"] += 1
        else:
            break
    kept = {**kept, "messages": messages, "metadata": metadata}
    return {**kept, "cut": cut if any(v for k, v in cut.items() if k != "bytes_before")
            else None}


def write_transcript(work: WorkDir, transcript: dict[str, Any]) -> None:
    data = json.dumps(bound(transcript), ensure_ascii=False, indent=1).encode()
    (work / FILE).write_bytes(gzip.compress(data, mtime=0))


def read_transcript(work: WorkDir) -> dict[str, Any] | None:
    path = work / FILE
    return json.loads(gzip.decompress(path.read_bytes())) if path.exists() else None
