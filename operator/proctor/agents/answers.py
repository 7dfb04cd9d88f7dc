"""What a reference agent reads from a task message and how it shapes its answer.

Kept apart from the server so that the agents' logic is plain functions of
plain data: `TaskRequest` in, `Answer` out. The server turns an `Answer` into
A2A events; `answer_parts` decides the parts, in one of the shapes agents in
the wild use (a data part, a file, a fenced diff, a bare diff, `<patch>` tags).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from a2a.helpers import new_data_part, new_raw_part, new_text_part
from a2a.types import Message, Part
from google.protobuf.json_format import MessageToDict

from proctor.a2a.message import PROBLEM_HEADER, repo_dir_of

State = Literal["completed", "failed", "rejected", "input-required"]
Form = Literal["data", "file", "fence", "bare", "tag"]
Where = Literal["artifact", "status"]


@dataclass(frozen=True)
class TaskRequest:
    """The task as an agent reads it from the message: its text and data parts."""

    text: str
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def instance_id(self) -> str | None:
        value = self.data.get("instance_id")
        return value if isinstance(value, str) and value else None

    @property
    def repo_dir(self) -> str | None:
        """The checkout to edit: the REPO_DIR line of the text, else the data part's field."""
        value = repo_dir_of(self.text) or self.data.get("repo_dir")
        return value if isinstance(value, str) and value else None

    @property
    def problem_text(self) -> str:
        """The text after `Problem Statement:`, up to the next section."""
        _, _, rest = self.text.partition(PROBLEM_HEADER)
        return rest.split("\n\nHints:\n", 1)[0].strip()


def request_of(message: Message | None) -> TaskRequest:
    """The text and the first dict data part of a user message."""
    if message is None:
        return TaskRequest(text="")
    texts = [p.text for p in message.parts if p.WhichOneof("content") == "text"]
    data = next((d for d in (MessageToDict(p.data) for p in message.parts
                             if p.WhichOneof("content") == "data") if isinstance(d, dict)), {})
    return TaskRequest(text="\n".join(texts), data=data)


@dataclass(frozen=True)
class Answer:
    """How the agent ends the task."""

    state: State = "completed"
    text: str = ""
    """Prose for the final status message."""
    patch: str = ""
    """The patch, sent in `form`, in an artifact or in the status message (`where`)."""
    form: Form = "data"
    where: Where = "artifact"
    data_key: str = "patch"
    """The data part's field for the patch (agents use `patch`, `diff`, `model_patch`)."""
    usage: dict[str, float] | None = None
    confidence: float | None = None
    """The agent's probability that this answer resolves the task (metadata `confidence`)."""


def answer_parts(answer: Answer) -> list[Part]:
    """The parts that carry the patch, in the answer's form; [] without a patch."""
    patch = answer.patch
    if not patch:
        return []
    if answer.form == "data":
        return [new_data_part({answer.data_key: patch})]
    if answer.form == "file":
        return [new_raw_part(patch.encode(), media_type="text/x-diff", filename="fix.patch")]
    if answer.form == "fence":
        return [new_text_part(f"Here is the change:\n\n```diff\n{patch}```\n")]
    if answer.form == "tag":
        return [new_text_part(f"<patch>\n{patch}</patch>\n")]
    return [new_text_part(patch)]


# A stand-in price, US dollars per token (a small hosted model's), so that the demo's
# reports show a cost like a real agent's.
PRICE_IN, PRICE_OUT = 0.15e-6, 0.60e-6


def usage_for(request: TaskRequest, patch: str) -> dict[str, float]:
    """A deterministic stand-in for the tokens a model would have spent, in Proctor's
    own keys (`usage` in the reply's metadata)."""
    tokens_in, tokens_out = len(request.text) // 4 + 1, len(patch) // 4
    return {"input_tokens": tokens_in, "output_tokens": tokens_out,
            "total_tokens": tokens_in + tokens_out, "steps": 1,
            "cost_usd": round(tokens_in * PRICE_IN + tokens_out * PRICE_OUT, 8)}
