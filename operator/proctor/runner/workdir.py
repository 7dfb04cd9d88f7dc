"""The work folder: the one contract between the steps of a work item.

Each step reads and writes plain files in one folder (`/proctor` in a Kubernetes
pod, `<output-dir>/items/<instance>/<variant>/<repeat>` on one machine):

    instance.json       the task (an Instance), written before solve
    item.json           the work item (id, instance, variant, repeat)
    patch.diff          the agent's patch, as it came; absent when there is none or it was refused
    apply.diff          what the test step applies instead, when screening dropped parts of
                        patch.diff that touch the test machinery (core/integrity.py)
    patch_refused       why the patch was refused (not a diff, unsafe path), if it was
    paths.txt           the paths the applied patch touches, one per line (for undoing attempts)
    eval.sh             the task's eval script as swebench 5 runs it
                        (make_test_spec(row).eval_script: records the test exit code),
                        with Proctor's guard before its test command (core/integrity.py)
    run.sh              the test step (bash and git only); the same text for every item
    time_limit          the eval script's limit in seconds
    test_without_patch  present when the tests run even without a patch (validation)
    apply.log           every apply attempt's output
    apply_method        the command that applied the patch, `none`, or `no patch`
    test_output.txt     the eval script's log, with swebench's Start/End markers (in Docker and
                        the process sandbox: the test step's stdout as captured outside it;
                        stdout.part while the process sandbox runs it)
    eval_exit           the eval script's exit status
    eval_clock          start and end of the eval script (bash EPOCHREALTIME)
    timed_out           present when the eval script passed its limit
    sandbox_error       why the test step itself broke, if it did (one machine)
    infra_error         why the test step could not start: its image is missing (Docker)
    result.json         the graded RunResult
    solve.json          how the exchange with the agent ended: state, error, usage, confidence,
                        latency; `resumed_task`: the id of the task sent by an earlier
                        attempt, when this one followed it instead of sending the item
    transcript.json.gz  what the agent sent back (messages, artifacts, metadata), bounded
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from proctor.core.integrity import Screened, guard_eval_script, protected_paths, screen_patch
from proctor.core.model import Instance, RunResult, WorkItem
from proctor.core.patches import PatchCheck, check_patch
from proctor.core.result_files import RESULT_FILE, result_files

RUN_SCRIPT = resources.files("proctor.runner").joinpath("run.sh").read_text()
# What run.sh reads, and what it writes, in the work folder. A sandbox that runs it from a
# copy (Docker, the process sandbox) brings back only the outputs, never the inputs or
# the log: the grade step reads the task, the patch and the scripts from its own copy.
TEST_STEP_INPUTS = ("run.sh", "eval.sh", "patch.diff", "apply.diff", "paths.txt",
                    "time_limit", "test_without_patch")
TEST_STEP_OUTPUTS = ("apply.log", "apply_method", "eval_exit", "eval_clock", "timed_out")


@dataclass(frozen=True)
class WorkDir:
    """Paths of one work folder."""

    root: Path

    def __truediv__(self, name: str) -> Path:
        return self.root / name

    def read(self, name: str) -> str | None:
        path = self.root / name
        return path.read_text(errors="replace") if path.exists() else None

    def instance(self) -> Instance:
        return Instance.model_validate_json((self.root / "instance.json").read_text())

    def item(self) -> WorkItem:
        return WorkItem.model_validate_json((self.root / "item.json").read_text())


def eval_script_of(instance: Instance) -> str:
    """The eval script exactly as swebench 5's harness runs it."""
    # Imported here: swebench.harness costs ~2 s to import and only this needs it.
    from swebench.harness.utils import make_test_spec

    script: str = make_test_spec(instance.swebench_row()).eval_script  # swebench: untyped
    return script


def write_task(work: WorkDir, instance: Instance, item: WorkItem) -> None:
    """Start a work folder: the task and the item, before anyone is asked to solve it."""
    work.root.mkdir(parents=True, exist_ok=True)
    (work / "instance.json").write_text(instance.model_dump_json(indent=1))
    (work / "item.json").write_text(item.model_dump_json())


def screen(instance: Instance | None, patch_text: str) -> Screened:
    """The patch with its test-machinery parts dropped (the one policy, core/integrity.py)."""
    if instance is None:
        return screen_patch(patch_text)
    tests = [*instance.FAIL_TO_PASS, *instance.PASS_TO_PASS]
    return screen_patch(patch_text, protected_paths(instance.test_patch, tests))


def write_patch(work: WorkDir, patch_text: str) -> PatchCheck | None:
    """Record the patch to test, or why it is refused; None when there is no patch.

    The agent's patch is kept whole in patch.diff; when screening drops parts of it,
    what remains goes to apply.diff, which the test step applies instead."""
    for stale in ("patch.diff", "apply.diff", "patch_refused", "paths.txt"):
        (work / stale).unlink(missing_ok=True)
    if not patch_text.strip():
        return None
    if not patch_text.endswith("\n"):
        patch_text += "\n"  # git apply calls a diff without it corrupt
    check = check_patch(patch_text)
    screened = screen(work.instance() if (work / "instance.json").exists() else None,
                      patch_text)
    if not check.ok and not (screened.findings and screened.kept != patch_text):
        (work / "patch_refused").write_text(check.refused or "")
        return check
    (work / "patch.diff").write_text(patch_text)
    if screened.findings:
        check = check_patch(screened.kept) if screened.kept else PatchCheck(paths=())
        if not check.ok:  # what is left reaches outside the repository: nothing applies
            (work / "patch_refused").write_text(check.refused or "")
            return check
        (work / "apply.diff").write_text(screened.kept)
    (work / "paths.txt").write_text("".join(f"{p}\n" for p in check.paths))
    return check


def write_test_step(work: WorkDir, instance: Instance, time_limit: int,
                    test_without_patch: bool = False) -> None:
    """Write the scripts the test step runs (in the task's image or the process sandbox)."""
    (work / "eval.sh").write_text(guard_eval_script(
        eval_script_of(instance), instance.base_commit, instance.test_patch))
    (work / "run.sh").write_text(RUN_SCRIPT)
    (work / "time_limit").write_text(f"{int(time_limit)}\n")
    marker = work / "test_without_patch"
    if test_without_patch:
        marker.write_text("")
    else:
        marker.unlink(missing_ok=True)
    for stale in ("apply.log", "apply_method", "test_output.txt", "eval_exit", "eval_clock",
                  "timed_out", "sandbox_error", "infra_error", RESULT_FILE):
        (work / stale).unlink(missing_ok=True)


def bring_back(inner: Path, work: WorkDir) -> None:
    """Copy the test step's outputs from the folder it ran in into the work folder: only
    those names, only regular files (a symbolic link could point the grade step anywhere).
    An output the test step did not write is absent here too."""
    for name in TEST_STEP_OUTPUTS:
        (work / name).unlink(missing_ok=True)
        source = inner / name
        if source.is_file() and not source.is_symlink():
            (work / name).write_bytes(source.read_bytes())


def write_result(work: WorkDir, result: RunResult) -> None:
    """Keep the graded result in the work folder: result.json and report.json, as
    `proctor.core.result_files` makes them (the object store gets the same bytes)."""
    for name, data in result_files(result, work.read("test_output.txt")).items():
        write_bytes(work / name, data)


def write_json(path: Path, data: object) -> None:
    """Write JSON atomically: a reader never sees half a file."""
    write_bytes(path, (json.dumps(data, indent=1) + "\n").encode())


def write_bytes(path: Path, data: bytes) -> None:
    """Write a file atomically: a reader never sees half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk must not leave half a file behind
        raise
