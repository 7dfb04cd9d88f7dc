"""A results folder as a submission to the SWE-bench leaderboard.

The leaderboard's submission repository (SWE-bench/experiments: its README's layout and
its checklist.md) holds one folder per submission, `evaluation/<split>/<date>_<model>/`:

    all_preds.jsonl        one prediction per task: instance_id, model_name_or_path,
                           model_patch
    logs/<instance_id>/    the execution artefacts: patch.diff, eval.sh, test_output.txt,
                           report.json, run_instance.log (as swebench's harness writes them)
    trajs/                 the reasoning traces, one file per task (required by the
                           checklist); here each item's transcript when the run kept one
    metadata.yaml          info (name, site, report, authors, logo) and tags (checked,
                           model, org, os_model, os_system, system.attempts)
    README.md              the system's description and the checklist

`metadata.yaml` and `README.md` are stubs for the submitter to fill in; `results/` is
made by the repository's own `analysis/get_results.py`, so it is not written here. The
leaderboard takes one attempt per task (pass@1): only the original prompt's first
repeat of each task is exported.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from proctor.core.exits import BadInput
from proctor.core.model import ORIGINAL_VARIANT, ErrorKind, RunResult, WorkItem
from proctor.formats.harness_logs import Graded, instance_files
from proctor.results import ResultsFolder

TRANSCRIPT_GLOB = "transcript*"
"""The files of an item's work folder that hold the agent's transcript (its trajectory)."""


class SubmissionError(BadInput):
    """The results folder cannot be exported; the message says why."""


@dataclass(frozen=True)
class Exported:
    folder: Path
    tasks: int
    resolved: int
    trajectories: int
    left_out: int
    """Items besides the first attempt at the original prompt (variants, repeats)."""


def first_attempts(results: list[RunResult]) -> list[RunResult]:
    """One result per task: the original prompt's first repeat, in instance order (pure)."""
    chosen = [r for r in results if r.variant_id == ORIGINAL_VARIANT and r.repeat == 0]
    return sorted(chosen, key=lambda r: r.instance_id)


def _read_folder(root: Path) -> tuple[str, int, list[RunResult]]:
    """The model's name, the test time limit and the results of a results folder."""
    try:
        summary = json.loads((root / "summary.json").read_text())
        spec = json.loads((root / "spec.json").read_text())["spec"]
    except (OSError, json.JSONDecodeError, KeyError) as exc:
        raise SubmissionError(f"{root} is not a results folder with summary.json and "
                              f"spec.json ({exc})") from None
    results = ResultsFolder(root).load()
    if not results:
        raise SubmissionError(f"{root} holds no results")
    limit = int(spec.get("timeouts", {}).get("testSeconds", 1800))
    return str(summary.get("agent") or "model"), limit, results


def metadata_stub(model: str) -> str:
    """metadata.yaml with what Proctor knows and empty fields for the rest."""
    data = {"info": {"name": model, "site": "", "report": "", "authors": "", "logo": ""},
            "tags": {"checked": False, "model": [model], "org": [], "os_model": False,
                     "os_system": False, "system": {"attempts": "1"}}}
    return ("# Fill in info (report: a technical report or blog post is required) and tags\n"
            + yaml.safe_dump(data, sort_keys=False))


def readme_stub(model: str, exported: Exported) -> str:
    left = (f"\nThis run also had {exported.left_out} other items (prompt variants or "
            f"repeats); only each task's first attempt is submitted (pass@1).\n"
            if exported.left_out else "")
    return f"""# {model}

Resolved {exported.resolved} of {exported.tasks} tasks (evaluated with Proctor).
{left}
## System

TODO: describe the system and link its technical report (also `info.report` in
metadata.yaml); name the people who made the submission.

## Checklist

- [ ] Is a pass@1 submission (does not attempt the same task instance more than once)
- [ ] Does not use SWE-bench test knowledge (PASS_TO_PASS, FAIL_TO_PASS)
- [ ] Does not use the hints field in SWE-bench
- [ ] Does not have web-browsing OR has taken steps to prevent lookup of SWE-bench
      solutions via web-browsing
- [ ] Trajectories: {exported.trajectories} of {exported.tasks} tasks have one in trajs/
"""


def export(root: Path, output: Path) -> Exported:
    """Write the submission folder `output` from the results folder `root`."""
    model, limit, results = _read_folder(root)
    if output.exists() and any(output.iterdir()):
        raise SubmissionError(f"{output} is not empty: give a new folder (the stubs you "
                              f"edited there are not overwritten)")
    folder = ResultsFolder(root)
    chosen = first_attempts(results)
    preds, trajectories, resolved = [], 0, 0
    for r in chosen:
        work = folder.work_dir(WorkItem(id=r.item_id, instance_id=r.instance_id))
        patch = None if r.error_kind == ErrorKind.AGENT else work.read("patch.diff") or ""
        preds.append({"instance_id": r.instance_id, "model_name_or_path": model,
                      "model_patch": patch or ""})
        logs = output / "logs" / r.instance_id
        logs.mkdir(parents=True)
        graded = Graded(r, patch, work.read("test_output.txt"), work.read("eval.sh") or "")
        for name, text in instance_files(graded, limit).items():
            (logs / name).write_text(text)
        trajectories += _copy_transcript(work.root, output / "trajs", r.instance_id)
        resolved += r.outcome.value == "resolved"
    (output / "all_preds.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    exported = Exported(output, len(chosen), resolved, trajectories,
                        len(results) - len(chosen))
    (output / "metadata.yaml").write_text(metadata_stub(model))
    (output / "README.md").write_text(readme_stub(model, exported))
    return exported


def _copy_transcript(work: Path, trajs: Path, instance_id: str) -> int:
    """The item's transcript as trajs/<instance_id><suffix>; 1 if there was one."""
    found = sorted(work.glob(TRANSCRIPT_GLOB))
    if not found:
        return 0
    trajs.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(found[0], trajs / f"{instance_id}{''.join(found[0].suffixes)}")
    return 1
