"""Finding the patch and the usage in an agent's reply."""

from __future__ import annotations

import pytest
from a2a.helpers import new_data_part, new_raw_part, new_text_part, new_url_part
from a2a.types import Artifact, Message, Role, Task, TaskState, TaskStatus

from proctor.a2a.extract import (
    extract_usage,
    find_patch,
    find_patch_in_task,
    patch_from_part,
    patch_from_text,
)
from proctor.core.model import Usage
from proctor.core.patches import check_patch

PATCH = ("diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n"
         "@@ -1,5 +1,5 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n \n \n"
         " def sub(a, b):\n")
PLAIN = "--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


def test_the_fixture_patch_is_a_valid_diff():
    assert check_patch(PATCH).ok


@pytest.mark.parametrize("text", [
    f"<patch>\n{PATCH}</patch>",
    f"Sure! Here it is:\n<patch>{PATCH}</patch>\nCheers",
    f"I fixed it.\n\n```diff\n{PATCH}```\n\nDone.",
    f"```patch\n{PATCH}```",
    f"```\n{PATCH}```",
    PATCH,
    f"The fix is below.\n\n{PATCH}",
])
def test_patch_from_text_shapes(text):
    assert patch_from_text(text) == PATCH


def test_bare_diff_from_the_first_file_header():
    assert patch_from_text(f"Explanation first.\n{PLAIN}") == PLAIN


def test_one_fence_per_file_is_joined():
    other = PATCH.replace("calc.py", "other.py")
    text = f"First:\n```diff\n{PATCH}```\nSecond:\n```diff\n{other}```\n"
    assert patch_from_text(text) == PATCH + other


def test_bare_diff_ends_at_a_closing_fence():
    assert patch_from_text(f"Apply this:\n{PATCH}```\nThanks") == PATCH


def test_a_blank_last_context_line_survives():
    # A trailing " " context line is part of the hunk: stripping it corrupts the patch.
    ends_blank = PATCH.rsplit(" def sub", 1)[0]
    assert patch_from_text(f"<patch>\n{ends_blank}</patch>") == ends_blank


@pytest.mark.parametrize("text", ["", "I could not fix it.", "```python\nprint('hi')\n```",
                                  "--- not a header line"])
def test_text_without_a_diff_gives_nothing(text):
    assert patch_from_text(text) == ""


@pytest.mark.parametrize("key", ["patch", "diff", "model_patch"])
def test_data_part_keys(key):
    assert patch_from_part(new_data_part({key: PATCH, "other": 1})) == PATCH


def test_data_part_without_patch_key_gives_nothing():
    assert patch_from_part(new_data_part({"answer": PATCH})) == ""
    assert patch_from_part(new_data_part(["not", "a", "dict"])) == ""


def test_file_part_diff_bytes_taken_whole():
    part = new_raw_part(PATCH.encode(), media_type="text/x-diff", filename="fix.patch")
    assert patch_from_part(part) == PATCH
    named = new_raw_part(PLAIN.encode(), filename="answer.diff")
    assert patch_from_part(named) == PLAIN


def test_other_file_part_is_read_as_text():
    part = new_raw_part(f"notes\n```diff\n{PATCH}```\n".encode(), filename="notes.md")
    assert patch_from_part(part) == PATCH


def test_url_part_is_never_fetched():
    assert patch_from_part(new_url_part("https://example.com/fix.diff")) == ""


def _message(*parts, role=Role.ROLE_AGENT) -> Message:
    return Message(role=role, message_id="m", parts=list(parts))


def test_artifacts_come_first_then_final_then_status_then_history():
    other = PATCH.replace("calc.py", "z.py")
    artifact = Artifact(artifact_id="a", name="answer", parts=[new_data_part({"patch": PATCH})])
    final = _message(new_text_part(f"<patch>{other}</patch>"))
    assert find_patch([artifact], final, final) == (PATCH, "artifact answer")
    assert find_patch([], final, None) == (other, "final message")
    assert find_patch([], None, final) == (other, "status message")
    assert find_patch([], None, None, [final]) == (other, "history")
    assert find_patch([], None, None) == ("", None)


def test_history_newest_first():
    old = _message(new_text_part(PATCH))
    new = _message(new_text_part(PLAIN))
    assert find_patch([], None, None, [old, new]) == (PLAIN, "history")


def test_task_patch_ignores_the_users_own_message():
    user = _message(new_text_part(f"Here is a hint:\n{PLAIN}"), role=Role.ROLE_USER)
    task = Task(id="t", context_id="c", history=[user],
                status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED,
                                  message=_message(new_text_part("no idea"))))
    assert find_patch_in_task(task) == ("", None)
    task.artifacts.append(Artifact(artifact_id="x", parts=[new_text_part(PATCH)]))
    assert find_patch_in_task(task) == (PATCH, "artifact x")


def test_usage_openai_and_anthropic_names():
    assert extract_usage({"usage": {"prompt_tokens": 10.0, "completion_tokens": 5.0}}) == \
        Usage(input_tokens=10, output_tokens=5, total_tokens=15)
    assert extract_usage({"usage": {"input_tokens": 7, "output_tokens": 3,
                                    "total_tokens": 11}, "cost_usd": 0.5}) == \
        Usage(input_tokens=7, output_tokens=3, total_tokens=11, cost_usd=0.5)


def test_usage_top_level_keys_and_cost():
    assert extract_usage({"input_tokens": 1200.0, "cost": "0.25"}) == \
        Usage(input_tokens=1200, cost_usd=0.25)


def test_usage_earlier_metadata_wins_field_by_field():
    got = extract_usage({"usage": {"input_tokens": 1}}, None,
                        {"usage": {"input_tokens": 99, "output_tokens": 2}})
    assert got == Usage(input_tokens=1, output_tokens=2, total_tokens=3)


@pytest.mark.parametrize("metadata", [None, {}, {"usage": "lots"}, {"usage": {"input_tokens": -1}},
                                      {"input_tokens": True}, {"cost": "free"}])
def test_no_usage(metadata):
    assert extract_usage(metadata) is None
