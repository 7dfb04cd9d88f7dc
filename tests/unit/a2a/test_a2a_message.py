"""The message to the agent: the Agentbeats text layout and the data part."""

from __future__ import annotations

import pytest
from a2a.helpers import get_data_parts, get_text_parts

from proctor.a2a.client import to_a2a_message
from proctor.a2a.message import build_message, repo_dir_of
from proctor.core.model import Instance
from proctor.datasets import demo

ROWS = {row["instance_id"]: row for row in demo.load_rows()}
WITH_HINTS = Instance.model_validate(ROWS["proctor-demo__datekit-2"])
WITHOUT_HINTS = Instance.model_validate(ROWS["proctor-demo__datekit-1"])


def test_shared_filesystem_form_starts_with_repo_dir():
    msg = build_message(WITH_HINTS, WITH_HINTS.problem_statement, "original", True,
                        "/repos/datekit")
    lines = msg.text.splitlines()
    assert lines[0] == "REPO_DIR:/repos/datekit"
    assert lines[2] == "Problem Statement:"
    assert "Repository:" not in msg.text and "Base commit:" not in msg.text
    assert repo_dir_of(msg.text) == "/repos/datekit"


def test_remote_form_names_repository_url_and_base_commit():
    msg = build_message(WITH_HINTS, WITH_HINTS.problem_statement, "original", True, None)
    lines = msg.text.splitlines()
    assert lines[0] == "Repository: https://github.com/proctor-demo/datekit"
    assert lines[1] == f"Base commit: {WITH_HINTS.base_commit}"
    assert "REPO_DIR" not in msg.text and repo_dir_of(msg.text) is None


def test_sections_in_order_problem_then_hints():
    msg = build_message(WITH_HINTS, WITH_HINTS.problem_statement, "original", True, None)
    problem_at = msg.text.index("Problem Statement:\n" + WITH_HINTS.problem_statement.strip())
    hints_at = msg.text.index("\n\nHints:\n" + WITH_HINTS.hints_text.strip())
    assert problem_at < hints_at


@pytest.mark.parametrize(("instance", "include"), [(WITH_HINTS, False), (WITHOUT_HINTS, True)])
def test_no_hints_section_when_off_or_empty(instance, include):
    msg = build_message(instance, instance.problem_statement, "original", include, None)
    assert "Hints:" not in msg.text
    if not include:
        assert instance.hints_text.strip()[:40] not in msg.text


def test_nothing_names_the_instance_by_default():
    msg = build_message(WITH_HINTS, WITH_HINTS.problem_statement, "original", True, "/r")
    assert msg.data == {}
    assert WITH_HINTS.instance_id not in msg.text
    assert [p.WhichOneof("content") for p in to_a2a_message(msg).parts] == ["text"]


def test_task_data_part_fields():
    msg = build_message(WITH_HINTS, WITH_HINTS.problem_statement, "original", True, "/r",
                        task_data=True)
    assert msg.data == {"instance_id": WITH_HINTS.instance_id, "repo": "proctor-demo/datekit",
                        "base_commit": WITH_HINTS.base_commit, "variant_id": "original",
                        "repo_dir": "/r"}
    remote = build_message(WITH_HINTS, WITH_HINTS.problem_statement, "original", True, None,
                           task_data=True)
    assert "repo_dir" not in remote.data


def test_variant_replaces_the_problem_text_and_never_leaks_the_original():
    reworded = "Leap years are wrong for years like 1900; please fix the century rule."
    msg = build_message(WITHOUT_HINTS, reworded, "v2", True, None, task_data=True)
    assert "Problem Statement:\n" + reworded in msg.text
    original_lines = [ln for ln in WITHOUT_HINTS.problem_statement.splitlines() if len(ln) > 20]
    assert original_lines and not any(line in msg.text for line in original_lines)
    assert msg.data["variant_id"] == "v2"
    a2a = to_a2a_message(msg)
    everything = " ".join(get_text_parts(a2a.parts)) + repr(get_data_parts(a2a.parts))
    assert not any(line in everything for line in original_lines)


def test_a2a_message_has_text_then_data_part():
    msg = build_message(WITH_HINTS, WITH_HINTS.problem_statement, "original", False, None,
                        task_data=True)
    a2a = to_a2a_message(msg)
    assert [p.WhichOneof("content") for p in a2a.parts] == ["text", "data"]
    assert get_text_parts(a2a.parts) == [msg.text]
    assert get_data_parts(a2a.parts) == [msg.data]
    assert a2a.message_id and a2a.context_id


@pytest.mark.parametrize("task_data", [False, True])
def test_task_data_reaches_the_solve_step_of_a_cluster_job(task_data):
    from proctor.formats.manifest import parse_resource
    from proctor.k8s.children.manifests import solve_command

    evaluation = parse_resource({"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                                 "metadata": {"name": "ev"}, "spec": {"agentRef": {"name": "a"}}})
    agent = parse_resource({"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
                            "metadata": {"name": "a"},
                            "spec": {"endpoint": "http://a:9009/", "taskData": task_data}})
    assert ("--task-data" in solve_command(evaluation, agent)) == task_data
