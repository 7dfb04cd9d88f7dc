"""A small real task: the calc repository (`add` subtracts; test_add fails before the fix,
test_sub passes), its gold patch and eval script, and a work folder ready for the test step."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from proctor.core.model import Instance, WorkItem
from proctor.runner.workdir import WorkDir, write_patch, write_task, write_test_step

SOURCE = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
TESTS = ("from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 2) == 4\n\n\n"
         "def test_sub():\n    assert sub(3, 1) == 2\n")
GOLD = """diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,5 +1,5 @@
 def add(a, b):
-    return a - b
+    return a + b


 def sub(a, b):
"""

EVAL = """#!/bin/bash
set -uxo pipefail
cd "$TESTBED"
{pre}
: '>>>>> Start Test Output'
python -m pytest -rA -p no:cacheprovider test_calc.py
: '>>>>> End Test Output'
"""


def git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                           text=True).stdout.strip()


def make_calc_repo(repo: Path) -> str:
    """The calc repository at ``repo``, one commit; its hash."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "calc.py").write_text(SOURCE)
    (repo / "test_calc.py").write_text(TESTS)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "calc")
    return git(repo, "rev-parse", "HEAD")


def make_instance(base: str, pre: str = "", **fields) -> Instance:
    row = dict(instance_id="acme__calc-1", repo="acme/calc", base_commit=base,
               problem_statement="add() subtracts", patch=GOLD, test_patch="",
               FAIL_TO_PASS=json.dumps(["test_calc.py::test_add"]),
               PASS_TO_PASS=json.dumps(["test_calc.py::test_sub"]), version="1.0",
               image="acme/calc:1", eval_script=EVAL.format(pre=pre),
               log_parser="parse_log_pytest", eval_type="pass_and_fail")
    row.update(fields)
    return Instance.model_validate(row)


def prepare_work(tmp_path: Path, instance: Instance, patch: str, time_limit: int = 60,
                 without_patch: bool = False) -> WorkDir:
    work = WorkDir(tmp_path / "work" / instance.instance_id)
    item = WorkItem(id="0" * 32, instance_id=instance.instance_id)
    write_task(work, instance, item)
    write_patch(work, patch)
    write_test_step(work, instance, time_limit, test_without_patch=without_patch)
    return work
