"""swebench 5's run artefacts, written from a results folder as its harness lays them out.

One output folder holds many runs side by side, as the harness's working folder does:

    logs/run_evaluation/<run_id>/run.json          what the run graded against
    logs/run_evaluation/<run_id>/<model>/<instance>/
        patch.diff  eval.sh  test_output.txt  run_instance.log  report.json
    <model>.<run_id>.json                          the run report (schema_version 2)
    logs/proctor/<run_id>/                         Proctor's results folder of the run

An instance gets report.json exactly when swebench's `run_instance` would write one: its
eval script ran, within its time limit. A patch that did not apply, a timeout (its log
then ends with the harness's "Timeout error" line) or a test step that left no log leave
none, and the run report counts the instance among `error_ids`, as swebench's
`make_run_report` does from the same files. Proctor's own results (results.jsonl,
summary.json, report.md, items/, spec.json, run.lock) are kept per run id, so that runs
never touch each other's: a rerun of a run id resumes it, and the same run id with other
inputs is refused (`proctor.results`). They sit under logs/, beside the harness's own
folders there (logs/run_validation/, logs/image_builder/), so that the top of the folder
holds only what the harness's does.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from proctor.core.model import ErrorKind, Instance, RunResult, WorkItem
from proctor.core.report_json import report_json
from proctor.core.result_files import REPORT_FILE
from proctor.core.spec import Evaluation
from proctor.datasets import Selection
from proctor.formats.predictions import patch_for
from proctor.prepare import plan_items
from proctor.results import ResultsFolder

LOG_DIR = Path("logs") / "run_evaluation"
REPORT = REPORT_FILE
TEST_OUTPUT = "test_output.txt"
INSTANCE_LOG = "run_instance.log"
RESULTS_DIR = Path("logs") / "proctor"


def results_dir(root: Path, run_id: str) -> Path:
    """Proctor's results folder of run `run_id` in the output folder `root`."""
    return root / RESULTS_DIR / run_id


@dataclass(frozen=True)
class Graded:
    """One instance's result, with what the harness would have had of it."""

    result: RunResult
    patch: str | None
    """The prediction's patch; None when the agent gave no answer."""
    test_log: str | None = None
    """The eval script's output, when it ran."""
    eval_script: str = ""


def model_dir(model: str) -> str:
    """The model's folder name, as swebench writes it."""
    return model.replace("/", "__")


def instance_files(graded: Graded, time_limit: int) -> dict[str, str]:
    """The files the harness leaves in one instance's log folder (pure)."""
    from swebench.harness.constants import APPLY_PATCH_FAIL, APPLY_PATCH_PASS

    result = graded.result
    files = {INSTANCE_LOG: ""}
    lines = [f"Evaluated by Proctor {result.runner_version} (item {result.item_id})"]
    if graded.patch is not None:
        files["patch.diff"] = graded.patch
        if graded.eval_script:
            files["eval.sh"] = graded.eval_script
        if result.patch.apply_method:
            lines.append(f"{APPLY_PATCH_PASS} ({result.patch.apply_method})")
        elif result.patch.present:
            lines.append(f"{APPLY_PATCH_FAIL}: {result.error_message or ''}".rstrip(": "))
    if result.timings.eval_seconds is not None:
        lines.append(f"Test runtime: {result.timings.eval_seconds:_.2f} seconds")
    if graded.test_log is not None and graded.patch is not None:
        timed_out = result.error_kind == ErrorKind.TIMEOUT
        files[TEST_OUTPUT] = graded.test_log + (
            f"\n\nTimeout error: {time_limit} seconds exceeded." if timed_out else "")
        if not timed_out:
            report = report_json(result, graded.test_log)
            files[REPORT] = json.dumps(report, indent=4)
            lines.append(f"Result for {result.instance_id}: resolved: "
                         f"{report[result.instance_id]['resolved']}")
    if result.error_kind:
        lines.append(f"Error ({result.error_kind.value}): {result.error_message}")
    files[INSTANCE_LOG] = "\n".join(lines) + "\n"
    return files


def run_report(dataset_ids: Collection[str], predictions: Mapping[str, str | None],
               files: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """The run report swebench's `make_run_report` writes (without a Docker client) from
    the predictions and each instance's log folder (`files`, by instance id) (pure)."""
    from swebench.harness.infra_failure import TIER_ENVIRONMENT, classify_text

    sets: dict[str, set[str]] = {k: set() for k in (
        "completed", "resolved", "error", "unresolved", "incomplete", "infra_failure",
        "ambiguous_failure", "empty_patch")}
    for iid in dataset_ids:
        if iid not in predictions:
            sets["incomplete"].add(iid)
        elif predictions[iid] in ("", None):
            sets["empty_patch"].add(iid)
        elif REPORT not in files.get(iid, {}):
            sets["error"].add(iid)
        else:
            sets["completed"].add(iid)
            verdict = _verdict(iid, files[iid][REPORT])
            sets["error" if verdict is None else "resolved" if verdict else "unresolved"].add(iid)
    reasons = {}
    for iid in sets["unresolved"] | sets["error"]:
        logs = [files.get(iid, {}).get(name) for name in (TEST_OUTPUT, INSTANCE_LOG)]
        found = classify_text("\n".join(log for log in logs if log is not None))
        if found:
            reasons[iid] = found[0]
            sets["infra_failure" if found[1] == TIER_ENVIRONMENT else "ambiguous_failure"].add(iid)
    counts = {"total_instances": len(dataset_ids), "submitted_instances": len(predictions)}
    counts |= {f"{k}_instances": len(sets[k]) for k in (
        "completed", "resolved", "unresolved", "infra_failure", "ambiguous_failure",
        "empty_patch", "error")}
    ids = {f"{k}_ids": sorted(sets[k]) for k in ("completed", "incomplete", "empty_patch")}
    ids["submitted_ids"] = sorted(predictions)
    ids |= {f"{k}_ids": sorted(sets[k]) for k in (
        "resolved", "unresolved", "infra_failure", "ambiguous_failure")}
    return {**counts, **ids, "failure_reasons": dict(sorted(reasons.items())),
            "error_ids": sorted(sets["error"]), "schema_version": 2}


def _verdict(instance_id: str, text: str) -> bool | None:
    """The report's `resolved`, or None for a report swebench counts as an error."""
    try:
        return bool(json.loads(text)[instance_id]["resolved"]) if text.strip() else None
    except (json.JSONDecodeError, KeyError, TypeError):
        return None


def graded_items(folder: ResultsFolder, results: Iterable[RunResult],
                 instances: Mapping[str, Instance], source: str,
                 file_patches: Mapping[str, str] | None = None) -> list[Graded]:
    """Each result with its prediction's patch and its test log, from the results folder."""
    graded = []
    for r in results:
        work = folder.work_dir(WorkItem(id=r.item_id, instance_id=r.instance_id,
                                        variant_id=r.variant_id, repeat=r.repeat))
        instance = instances[r.instance_id]
        if source == "agent":
            patch = None if r.error_kind == ErrorKind.AGENT else work.read("patch.diff") or ""
        else:
            patch = patch_for(source, instance, file_patches)
        graded.append(Graded(r, patch, work.read(TEST_OUTPUT), instance.eval_script))
    return graded


def write_harness_logs(root: Path, run_id: str, model: str, graded: Iterable[Graded],
                       dataset_ids: Collection[str], time_limit: int,
                       dataset: tuple[str, str]) -> Path:
    """Write every instance's log folder and the run report under `root`; the report's
    path. An instance's folder is written anew (a resumed run rewrites them all)."""
    run_dir = root / LOG_DIR / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps(
        {"dataset": dataset[0], "split": dataset[1], "task_repo": None,
         "created_at": datetime.now(UTC).isoformat(timespec="seconds")}, indent=2) + "\n")
    predictions, files = {}, {}
    for g in graded:
        iid = g.result.instance_id
        predictions[iid], files[iid] = g.patch, instance_files(g, time_limit)
        folder = run_dir / model_dir(model) / iid
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for name, text in files[iid].items():
            (folder / name).write_text(text)
    path = root / f"{model_dir(model)}.{run_id}.json"
    report = run_report(dataset_ids, predictions, files)
    path.write_text(json.dumps(report, indent=4) + "\n")
    return path


def write_run_logs(root: Path, evaluation: Evaluation, selection: Selection, run_id: str,
                   model: str, file_patches: Mapping[str, str] | None,
                   instance_ids: Collection[str] = ()) -> Path:
    """The harness's artefacts of an evaluation run on `selection` into
    `results_dir(root, run_id)`, written under `root`; the run report's path. As in
    swebench, the run report counts every row of the dataset (within `instance_ids`),
    predicted or not."""
    planned = {i.id for i in plan_items(evaluation, selection)}
    folder = ResultsFolder(results_dir(root, run_id))
    results = [r for r in folder.load() if r.item_id in planned]
    graded = graded_items(folder, results, selection.by_id,
                          evaluation.spec.predictions.source, file_patches)
    rows = selection.dataset_ids & set(instance_ids) if instance_ids else selection.dataset_ids
    ds = evaluation.spec.dataset
    return write_harness_logs(root, run_id, model, graded, sorted(rows),
                              evaluation.spec.timeouts.test_seconds, (ds.name, ds.split))
