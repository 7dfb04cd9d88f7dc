"""The checkout an agent edits: git in it, and its diff against the base commit.

Shared by the reference agents that work in a checkout (`editor`, `mixed`, `llm`).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from proctor.agents.answers import Answer, TaskRequest

Solver = Callable[[TaskRequest], Answer]
"""An agent kind's answer function: one task request in, one answer out."""


class EditError(Exception):
    """The editor could not edit the checkout; the message says why."""


def git(repo: Path, *args: str, env: Mapping[str, str] | None = None,
         stdin: str | None = None) -> str:
    run_env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    # safe.directory: a shared checkout is often owned by another user (the sidecar mode).
    done = subprocess.run(["git", "-c", "core.quotepath=false", "-c", f"safe.directory={repo}",
                           *args], cwd=repo, input=stdin,
                          capture_output=True, text=True, env=run_env)
    if done.returncode != 0:
        raise EditError(f"git {args[0]} failed in {repo}: {done.stderr.strip()[-400:]}")
    return done.stdout


def edit_checkout(repo: Path, patch: str) -> str:
    """Apply `patch` to the files of `repo`, then return the checkout's whole diff."""
    if not (repo / ".git").exists():
        raise EditError(f"REPO_DIR {repo} is not a git checkout")
    git(repo, "apply", "--whitespace=nowarn", "-", stdin=patch)
    return checkout_diff(repo)


def checkout_diff(repo: Path) -> str:
    """`git diff` of everything changed in `repo` against HEAD, new files included.

    A throwaway index keeps the checkout's own index untouched.
    """
    with tempfile.TemporaryDirectory(prefix="proctor-editor-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(repo, "read-tree", "HEAD", env=env)
        git(repo, "add", "-A", env=env)
        return git(repo, "diff", "--cached", "--no-color", "--no-ext-diff", "--binary",
                    "HEAD", env=env)
