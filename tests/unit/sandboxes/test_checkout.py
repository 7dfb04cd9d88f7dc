"""Checkouts hold the task's repository at base_commit and nothing newer."""

from __future__ import annotations

import subprocess

from proctor.datasets import demo, to_instance
from proctor.sandboxes import process


def git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_checkout_holds_nothing_newer_than_base(tmp_path):
    rows = demo.load_rows()
    # the first task of a repository with later commits in its bundle
    row = next(r for r in rows if git(tmp_path, "bundle", "list-heads",
                                      str(demo.bundle_path(r["repo"]))).split()[0]
               != r["base_commit"])
    instance = to_instance(row, 0)
    process.checkout(instance, tmp_path / "repo")
    repo = tmp_path / "repo"
    assert git(repo, "rev-parse", "HEAD") == instance.base_commit
    assert git(repo, "rev-list", "--all") == git(repo, "rev-list", instance.base_commit)
    assert git(repo, "for-each-ref") == ""
    assert git(repo, "status", "--porcelain") == ""
    # no object of a later commit is left behind either
    objects = git(repo, "cat-file", "--batch-all-objects", "--batch-check")
    reachable = git(repo, "rev-list", "--objects", instance.base_commit)
    assert len(objects.splitlines()) == len(reachable.splitlines())


def test_checkouts_are_independent(tmp_path):
    instance = to_instance(demo.load_rows()[0], 0)
    process.checkout(instance, tmp_path / "a")
    (tmp_path / "a" / "README.md").write_text("changed by an agent")
    git(tmp_path / "a", "-c", "user.name=a", "-c", "user.email=a@a", "commit", "-qam", "x")
    process.checkout(instance, tmp_path / "b")
    assert git(tmp_path / "b", "status", "--porcelain") == ""
    assert git(tmp_path / "b", "rev-parse", "HEAD") == instance.base_commit
