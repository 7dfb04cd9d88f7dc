"""The message that asks an agent under test to solve one task.

The text keeps the layout agents built for the Agentbeats SWE Verified scenario
already parse: `REPO_DIR:<path>` when the agent shares a filesystem with the task
(the embedded engine, the sidecar mode), otherwise the repository URL and base
commit, then a `Problem Statement:` section and, when hints are sent and exist,
a `Hints:` section. Nothing in it names the instance: agent frameworks hand every
part to their model, and an instance id invites recall of the known fix.

Only an agent whose AgentUnderTest sets `taskData: true` also gets a data part
with the task's instance_id, repo, base_commit and variant_id. A prompt variant
replaces only the problem text: the data part names the variant by id and never
carries the original wording, so an agent cannot undo a rewording from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proctor.core.model import Instance

REPO_DIR_PREFIX = "REPO_DIR:"
PROBLEM_HEADER = "Problem Statement:"
HINTS_HEADER = "Hints:"


@dataclass(frozen=True)
class TaskMessage:
    """What the agent is sent, independent of the A2A library: one text, one data part."""

    text: str
    data: dict[str, str] = field(default_factory=dict)


def repository_url(repo: str) -> str:
    """Where the repository lives on GitHub (the form agents expect, for any `owner/name`)."""
    return f"https://github.com/{repo}"


def _location_lines(instance: Instance, repo_dir: str | None) -> list[str]:
    if repo_dir:
        return [f"{REPO_DIR_PREFIX}{repo_dir}"]
    return [f"Repository: {repository_url(instance.repo)}", f"Base commit: {instance.base_commit}"]


def build_message(instance: Instance, problem_text: str, variant_id: str, include_hints: bool,
                  repo_dir: str | None, task_data: bool = False) -> TaskMessage:
    """The message for one work item.

    `problem_text` is the (possibly reworded) problem statement; `repo_dir` is the
    checkout's path when the agent shares the task's filesystem, None otherwise;
    `task_data` adds the data part (AgentUnderTest.spec.taskData).
    """
    sections = ["\n".join(_location_lines(instance, repo_dir)),
                f"{PROBLEM_HEADER}\n{problem_text.strip()}"]
    hints = instance.hints_text.strip() if include_hints else ""
    if hints:
        sections.append(f"{HINTS_HEADER}\n{hints}")
    data = {}
    if task_data:
        data = {"instance_id": instance.instance_id, "repo": instance.repo,
                "base_commit": instance.base_commit, "variant_id": variant_id}
        if repo_dir:
            data["repo_dir"] = repo_dir
    return TaskMessage(text="\n\n".join(sections) + "\n", data=data)


def repo_dir_of(text: str) -> str | None:
    """The REPO_DIR a message names, as an agent would read it (None if it names none)."""
    for line in text.splitlines():
        if line.startswith(REPO_DIR_PREFIX):
            return line[len(REPO_DIR_PREFIX):].strip() or None
    return None
