"""`proctor show RESULTS ITEM`: one item for a person to read: its task, what the agent
sent back, the patch, the test log and the verdict."""

from __future__ import annotations

import argparse
import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proctor.core.exits import BadInput
from proctor.core.model import RunResult

# The results folder and the transcript's reader are imported where they are used:
# `proctor` imports this module for its parser, whatever the command.
if TYPE_CHECKING:
    from proctor.runner.workdir import WorkDir


def add_parser(sub: argparse._SubParsersAction) -> None:
    sho = sub.add_parser("show", help="one item for a person to read: its task, what the "
                                      "agent sent back, the patch, the test log, the verdict")
    sho.add_argument("results", help="a results folder (proctor run's or eval's --output-dir)")
    sho.add_argument("item", help="instance/variant/repeat, an instance id (its original "
                                  "prompt's first repeat), or the start of an item id")
    sho.set_defaults(func=cmd_show)


def cmd_show(args: argparse.Namespace) -> int:
    print(show(Path(args.results), args.item))
    return 0



def find_result(results: Sequence[RunResult], name: str) -> RunResult:
    """The item named by its key (`instance/variant/repeat`), its instance id (the original
    prompt's first repeat, or its only item), or a prefix of its id."""
    for r in results:
        if name == f"{r.instance_id}/{r.variant_id}/{r.repeat}":
            return r
    of_instance = [r for r in results if r.instance_id == name]
    if len(of_instance) == 1:
        return of_instance[0]
    for r in of_instance:
        if (r.variant_id, r.repeat) == ("original", 0):
            return r
    by_id = [r for r in results if len(name) >= 6 and r.item_id.startswith(name)]
    if len(by_id) == 1:
        return by_id[0]
    known = ", ".join(sorted({r.instance_id for r in results})[:5])
    raise BadInput(f"no item {name!r} in these results (items are named "
                   f"instance/variant/repeat or by instance id: {known}…)")


def _part(part: dict[str, Any]) -> str:
    if "text" in part:
        return part["text"]
    if "data" in part:
        return "[data] " + json.dumps(part["data"], indent=1, ensure_ascii=False)
    if "raw" in part:
        raw = base64.b64decode(part["raw"])
        name = part.get("filename") or part.get("mediaType") or "file"
        try:
            return f"[file {name}]\n{raw.decode()}"
        except UnicodeDecodeError:
            return f"[file {name}: {len(raw)} bytes]"
    if "url" in part:
        return f"[link] {part['url']}"
    return json.dumps(part)


def render_transcript(transcript: dict[str, Any] | None) -> list[str]:
    if transcript is None:
        return ["(none: no agent was asked, or the item predates transcripts)"]
    lines = [f"task {transcript.get('task_id') or '–'}, ended {transcript.get('state') or '–'}"]
    for n, message in enumerate(transcript.get("messages", []), start=1):
        lines += ["", f"--- message {n} ({message.get('role', 'ROLE_AGENT')})",
                  *(_part(p) for p in message.get("parts", []))]
    for artifact in transcript.get("artifacts", []):
        lines += ["", f"--- artifact {artifact.get('name') or artifact.get('artifactId')}",
                  *(_part(p) for p in artifact.get("parts", []))]
    metadata = transcript.get("metadata") or []
    if metadata:
        lines += ["", f"--- metadata of {len(metadata)} events, the last:",
                  json.dumps(metadata[-1], indent=1, ensure_ascii=False)]
    if transcript.get("notes"):
        lines += ["", "notes: " + "; ".join(transcript["notes"])]
    if transcript.get("cut"):
        lines += ["", "cut by Proctor to keep it bounded: " + json.dumps(transcript["cut"])]
    return lines


def verdict(result: RunResult) -> list[str]:
    lines = [f"outcome: {result.outcome.value}"
             + (f" ({result.error_kind.value}: {result.error_message})"
                if result.error_kind else "")]
    if result.tests_ran:
        lines.append(f"FAIL_TO_PASS {len(result.FAIL_TO_PASS.success)}/"
                     f"{result.FAIL_TO_PASS.total}, PASS_TO_PASS "
                     f"{len(result.PASS_TO_PASS.success)}/{result.PASS_TO_PASS.total}")
        failed = result.FAIL_TO_PASS.failure + result.PASS_TO_PASS.failure
        lines += [f"  failed: {t}" for t in failed]
    lines.append(f"patch: {result.patch.size_bytes} bytes, applied with "
                 f"{result.patch.apply_method or '–'}"
                 + (f", refused: {result.patch.refused}" if result.patch.refused else ""))
    if result.usage:
        lines.append("usage: " + ", ".join(f"{k} {v}" for k, v in
                                           result.usage.model_dump().items() if v is not None))
    if result.confidence is not None:
        lines.append(f"confidence: {result.confidence:g} (the agent's, that this resolves)")
    t = result.timings
    lines.append(f"time: agent {t.solve_seconds or 0:.1f} s, tests {t.test_seconds or 0:.1f} s, "
                 f"item {t.total_seconds or 0:.1f} s")
    return lines


def render_item(result: RunResult, work: WorkDir) -> str:
    """The whole page for one item, from its result and its work folder."""
    from proctor.runner.transcript import read_transcript

    task = work.read("prompt.txt")
    if task is None and (work / "instance.json").exists():
        task = work.instance().problem_statement
    sections = [
        (f"{result.instance_id} / {result.variant_id} / repeat {result.repeat}: "
         f"{result.outcome.value}", []),
        ("Task", [task or "(not kept)"]),
        ("Transcript", render_transcript(read_transcript(work))),
        ("Patch", [work.read("patch.diff") or "(none)"]),
        ("Test log", [work.read("test_output.txt") or "(the tests did not run)"]),
        ("Verdict", verdict(result)),
    ]
    out: list[str] = []
    for title, body in sections:
        out += [f"=== {title}", *body, ""]
    return "\n".join(out)


def show(results_dir: Path, name: str) -> str:
    from proctor.results import ResultsFolder

    folder = ResultsFolder(results_dir)
    if not folder.results_path.exists():
        raise BadInput(f"{results_dir} holds no results.jsonl: name a results folder "
                       f"(proctor run's or eval's --output-dir)")
    result = find_result(folder.load(), name)
    return render_item(result, folder.work_dir(result))
