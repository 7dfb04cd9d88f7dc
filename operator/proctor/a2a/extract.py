"""The patch and the usage figures in an agent's reply (pure functions).

Agents answer in many shapes, so Proctor looks where they put it, in this order:
the task's artifacts, then the final message (a Message reply), then the task's
status message. In each place, part by part, the first patch found wins:

* a data part with a `patch` field (or `diff`, `model_patch`);
* a file part (bytes, or a text of a .diff/.patch file);
* text: `<patch>…</patch>` (the SWE-bench prompt convention), a ```diff or
  ```patch fence, or a bare unified diff from its first `diff --git` / `--- `
  line on.

Last come the agent's earlier messages in the task history, newest first.

Nothing here checks that a patch is safe or applies: `proctor.core.patches` and the
test step do that for every patch alike.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from a2a.types import Artifact, Message, Part, Role, Task
from google.protobuf.json_format import MessageToDict

from proctor.core.model import Usage

PATCH_KEYS = ("patch", "diff", "model_patch")
_PATCH_TAG = re.compile(r"<patch>(.*?)</patch>", re.DOTALL)
_FENCE = re.compile(r"^```[ \t]*(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$",
                    re.DOTALL | re.MULTILINE)
_DIFF_START = re.compile(r"^(?:diff --git |--- \S.*\n\+\+\+ )", re.MULTILINE)
_DIFF_SUFFIXES = (".diff", ".patch")
_DIFF_MEDIA = ("text/x-diff", "text/x-patch", "text/diff", "application/x-patch")


def patch_from_text(text: str) -> str:
    """The patch in a free-text answer, or "" when it holds none."""
    tagged = _PATCH_TAG.search(text)
    if tagged and tagged.group(1).strip():
        return _finish(tagged.group(1))
    fenced = [m["body"] for m in _FENCE.finditer(text)
              if m["lang"].lower() in ("diff", "patch") or
              (not m["lang"] and _DIFF_START.match(m["body"]))]
    # One fence per file is common: their concatenation is the whole patch.
    fenced = [body for body in fenced if _DIFF_START.search(body)]
    if fenced:
        return _finish("".join(body if body.endswith("\n") else body + "\n" for body in fenced))
    bare = _DIFF_START.search(text)
    if bare:
        return _finish(_cut_closing_fence(text[bare.start():]))
    return ""


def _cut_closing_fence(text: str) -> str:
    """A bare diff that ends in an unlabelled fence: drop the fence and what follows."""
    match = re.search(r"^```[ \t]*$", text, re.MULTILINE)
    return text[:match.start()] if match else text


def _finish(patch: str) -> str:
    # Only newlines come off the end: a last context line may be a lone space.
    patch = re.sub(r"\A(?:[ \t]*\n)+", "", patch).rstrip("\n")
    return patch + "\n" if patch else ""


def _data_patch(data: Any) -> str:
    if isinstance(data, Mapping):
        for key in PATCH_KEYS:
            value = data.get(key)
            if isinstance(value, str) and value.strip():
                return value if value.endswith("\n") else value + "\n"
    return ""


def _is_diff_file(part: Part) -> bool:
    name = part.filename.lower()
    return name.endswith(_DIFF_SUFFIXES) or part.media_type.lower() in _DIFF_MEDIA


def patch_from_part(part: Part) -> str:
    """The patch one part carries, or ""."""
    kind = part.WhichOneof("content")
    if kind == "data":
        return _data_patch(MessageToDict(part.data))
    if kind == "raw":
        content = part.raw.decode("utf-8", "surrogateescape")
        if _is_diff_file(part) and content.strip():
            return content if content.endswith("\n") else content + "\n"
        return patch_from_text(content)
    if kind == "text":
        return patch_from_text(part.text)
    return ""  # a URL part: Proctor fetches nothing an agent points at


def patch_from_parts(parts: Iterable[Part]) -> str:
    """The first patch among parts, or ""."""
    for part in parts:
        found = patch_from_part(part)
        if found:
            return found
    return ""


def agent_history(task: Task) -> list[Message]:
    """The agent's messages in a task's history, oldest first."""
    return [m for m in task.history if m.role == Role.ROLE_AGENT]


def find_patch(artifacts: Iterable[Artifact], final_message: Message | None = None,
               status_message: Message | None = None,
               history: Iterable[Message] = ()) -> tuple[str, str | None]:
    """The patch of a reply and where it was found; ("", None) when there is none.

    Artifacts first, then the final message (a Message reply), then the task's
    status message, then the agent's earlier messages, newest first (an agent
    may post its answer in a `working` update and complete without a message).
    """
    sources: list[tuple[str, Iterable[Part]]] = [
        (f"artifact {a.name or a.artifact_id}", a.parts) for a in artifacts]
    sources += [(name, m.parts) for name, m in (("final message", final_message),
                                                 ("status message", status_message)) if m]
    sources += [("history", m.parts) for m in reversed(list(history))]
    for where, parts in sources:
        found = patch_from_parts(parts)
        if found:
            return found, where
    return "", None


def find_patch_in_task(task: Task) -> tuple[str, str | None]:
    """The patch of a finished Task, looked for where `find_patch` looks."""
    status = task.status.message if task.status.HasField("message") else None
    return find_patch(task.artifacts, None, status, agent_history(task))


# Where the frameworks people build A2A agents with put usage in a reply's metadata.
#
# * Proctor's own keys (its reference agents and `--kind llm`): `usage` holding
#   input_tokens, output_tokens, total_tokens, cost_usd (and steps, for an agent loop).
# * Google ADK: every A2A event it converts from an ADK event carries
#   `adk_usage_metadata`, the model response's usage in Gemini's camelCase names
#   (promptTokenCount, candidatesTokenCount, totalTokenCount, thoughtsTokenCount...),
#   one model call per event, with the event's id in `adk_event_id` (google/adk-python,
#   src/google/adk/a2a/converters/event_converter.py, `_get_context_metadata`: on the
#   status update event; ADK 2.x, from_adk_event.py, `_add_event_metadata`: on the
#   status message or the artifact). a2a-sdk's task store merges each update's
#   metadata into the task's, so a Task snapshot holds only the last call's: streamed
#   events are summed, each ADK event once.
# * LangChain / LangGraph: an AIMessage's `usage_metadata` {input_tokens, output_tokens,
#   total_tokens}, which agents that forward it put under that key. The a2a-samples
#   LangGraph agent (samples/python/agents/langgraph, app/agent_executor.py) emits none.
# * Strands: its A2A executor (strands-agents sdk-python, src/strands/multiagent/a2a/
#   executor.py) sends text artifacts and status messages without metadata: none.
# * a2a-sdk's own samples (a2a-samples helloworld and friends): none.
# * OpenAI-style `usage` {prompt_tokens, completion_tokens, total_tokens} and
#   `token_usage`, which hand-written agents copy from their model's reply.
ADK_USAGE_KEY = "adk_usage_metadata"
_USAGE_SCOPES = ("usage", "token_usage", "usage_metadata", ADK_USAGE_KEY)
_INPUT_KEYS = ("input_tokens", "prompt_tokens", "inputTokens", "promptTokens",
               "promptTokenCount", "prompt_token_count")
_OUTPUT_KEYS = ("output_tokens", "completion_tokens", "outputTokens", "completionTokens",
                "candidatesTokenCount", "candidates_token_count")
_TOTAL_KEYS = ("total_tokens", "totalTokens", "totalTokenCount", "total_token_count")
_COST_KEYS = ("cost_usd", "cost", "total_cost", "costUsd", "total_cost_usd")
_STEP_KEYS = ("steps", "n_steps", "api_calls")
_FIELDS = (("input_tokens", _INPUT_KEYS), ("output_tokens", _OUTPUT_KEYS),
           ("total_tokens", _TOTAL_KEYS), ("cost_usd", _COST_KEYS), ("steps", _STEP_KEYS))


def _number(mapping: Mapping[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        value = mapping.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float) and math.isfinite(value) and value >= 0:
            return float(value)
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                continue
            if math.isfinite(number) and number >= 0:
                return number
    return None


def _mapping(value: Any) -> Mapping[str, Any] | None:
    """A metadata value as a mapping: ADK's newer releases send a JSON string."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, Mapping) else None


def _usage_of(metadata: Mapping[str, Any]) -> dict[str, float]:
    """The usage figures one metadata mapping reports, by Usage field name."""
    scopes = [m for m in (*(_mapping(metadata.get(k)) for k in _USAGE_SCOPES), metadata) if m]
    found: dict[str, float] = {}
    for name, keys in _FIELDS:
        for scope in scopes:
            value = _number(scope, keys)
            if value is not None:
                found[name] = value
                break
    return found


def _to_usage(figures: Mapping[str, float]) -> Usage | None:
    if not figures:
        return None
    counts = {k: int(v) for k, v in figures.items() if k != "cost_usd"}
    if "total_tokens" not in counts and {"input_tokens", "output_tokens"} <= counts.keys():
        counts["total_tokens"] = counts["input_tokens"] + counts["output_tokens"]
    return Usage(**counts, cost_usd=figures.get("cost_usd"))


def extract_usage(*metadatas: Mapping[str, Any] | None) -> Usage | None:
    """The usage an agent reported in metadata; earlier mappings win field by field.

    Numbers arrive as floats over A2A (protobuf Struct), so counts are rounded down to
    ints. Reads the keys listed above, under `usage`, `token_usage`, `usage_metadata`,
    `adk_usage_metadata` or at the top level.
    """
    merged: dict[str, float] = {}
    for metadata in metadatas:
        for key, value in (_usage_of(metadata) if metadata else {}).items():
            merged.setdefault(key, value)
    return _to_usage(merged)


def adk_call_usage(events: Iterable[Mapping[str, Any]]) -> Usage | None:
    """ADK's usage summed over the streamed events that carry it (one model call each;
    partial events, which repeat a call's usage, are skipped); None when none does."""
    total: dict[str, float] = {}
    calls, seen = 0, set()
    for metadata in events:
        usage = _mapping(metadata.get(ADK_USAGE_KEY))
        if usage is None or metadata.get("adk_partial") is True:
            continue
        event_id = metadata.get("adk_event_id")
        if event_id is not None:
            if event_id in seen:  # the same ADK event, seen on another object
                continue
            seen.add(event_id)
        calls += 1
        for name, value in _usage_of(usage).items():
            total[name] = total.get(name, 0.0) + value
    if calls:
        total.setdefault("steps", float(calls))
    return _to_usage(total)


def metadata_of(obj: Any) -> dict[str, Any]:
    """The metadata of a protobuf Task, Message, Artifact or event, as a dict."""
    if obj is None or not obj.HasField("metadata"):
        return {}
    return MessageToDict(obj.metadata)


CONFIDENCE_KEY = "confidence"
"""The metadata key an agent reports its confidence under: a number from 0 to 1, its
probability that the answer it gives resolves the task (HAL's reliability work reads the
same key, `confidence`, from each task's result). Put it in the metadata of the final
status message, of the artifact that holds the patch, or of the Task; the last one
reported wins. A percentage, a string, a bool or anything outside 0..1 is not read."""


def extract_confidence(*metadatas: Mapping[str, Any] | None) -> float | None:
    """The agent's confidence in its answer, from the first mapping that reports one
    (callers pass the latest first); None when none does."""
    for metadata in metadatas:
        value = metadata.get(CONFIDENCE_KEY) if metadata else None
        if isinstance(value, int | float) and not isinstance(value, bool) \
                and math.isfinite(value) and 0 <= value <= 1:
            return float(value)
    return None
