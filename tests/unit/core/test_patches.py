"""Patches are checked before they touch a repository."""

import pytest

from proctor.core.patches import check_patch

GOOD = """diff --git a/src/m.py b/src/m.py
--- a/src/m.py
+++ b/src/m.py
@@ -1 +1 @@
-x = 1
+x = 2
"""


def _diff(path: str, new: bool = False) -> str:
    old = "/dev/null" if new else f"a/{path}"
    return f"diff --git a/{path} b/{path}\n--- {old}\n+++ b/{path}\n@@ -0,0 +1 @@\n+x\n"


def test_a_plain_diff_is_accepted_with_its_paths():
    check = check_patch(GOOD)
    assert check.ok and check.paths == ("src/m.py",)
    assert check.sha256 and check.size_bytes == len(GOOD)


def test_new_file_paths_are_listed():
    assert check_patch(_diff("new/file.py", new=True)).paths == ("new/file.py",)


@pytest.mark.parametrize("path", ["../outside.py", "a/../../etc/passwd", "src/../../x"])
def test_paths_outside_the_repository_are_refused(path):
    check = check_patch(_diff(path))
    assert not check.ok and "outside the repository" in check.refused


def test_absolute_paths_are_refused():
    text = "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n"
    check = check_patch(text)
    assert not check.ok and "absolute path" in check.refused


def test_paths_inside_git_are_refused():
    check = check_patch(_diff(".git/hooks/post-checkout", new=True))
    assert not check.ok and ".git" in check.refused


def test_rename_outside_is_refused():
    text = ("diff --git a/x.py b/x.py\nsimilarity index 100%\nrename from x.py\n"
            "rename to ../x.py\n")
    assert not check_patch(text).ok


def test_symlinks_are_refused():
    text = ("diff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n+++ b/link\n"
            "@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n")
    check = check_patch(text)
    assert not check.ok and "symbolic link" in check.refused


@pytest.mark.parametrize("text", ["I fixed it!", "```python\nprint(1)\n```", "--- a\n+++ b\n"])
def test_text_that_is_not_a_diff_is_refused(text):
    check = check_patch(text)
    assert not check.ok and check.refused == "not a unified diff"
