"""`proctor runner`: one step of a work item, what a Job's containers run (solve, test,
grade, keep-log)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from proctor.cli.options import seconds
from proctor.core.exits import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    runner = sub.add_parser("runner", help="one step of a work item (what a Job runs)")
    steps = runner.add_subparsers(dest="step", required=True)
    _add_solve(steps)
    _add_test(steps)
    _add_grade(steps)
    _add_keep_log(steps)


def _add_solve(steps: argparse._SubParsersAction) -> None:
    solve = steps.add_parser("solve", help="get the item's patch: ask the agent, or take one "
                                           "given; then write the test step's scripts")
    solve.add_argument("--work-dir", required=True)
    solve.add_argument("--task-dir", help="folder with instance.json, item.json, prompt.txt "
                                          "to start the work folder from")
    solve.add_argument("--endpoint", help="the agent's A2A endpoint (credentials, if any, from "
                                          "PROCTOR_AGENT_TOKEN, _AUTH_HEADER, _AUTH_SCHEME)")
    solve.add_argument("--timeout", type=float, default=1800, help="seconds to wait for it")
    solve.add_argument("--repo-dir", help="the agent's checkout, sent as REPO_DIR")
    solve.add_argument("--card-wait", type=seconds, metavar="SECONDS",
                       help="fetch the agent's card first, retrying this long (a sidecar "
                            "agent); if it never answers, the item is an agent error naming "
                            "it, and no task is sent")
    solve.add_argument("--no-hints", action="store_true", help="do not send hints_text")
    solve.add_argument("--task-data", action="store_true",
                       help="also send the data part naming the task (AgentUnderTest taskData)")
    solve.add_argument("--patch-file", help="use this patch instead of asking ('' = none)")
    solve.add_argument("--resume-task", metavar="ID",
                       help="do not send the item: follow the agent's task ID (sent by an "
                            "earlier attempt, named in its log as `solve: agent task ID`) "
                            "to its answer")
    solve.add_argument("--time-limit", type=int, default=1800, help="eval script limit, s")
    solve.add_argument("--without-patch", action="store_true",
                       help="run the tests even when there is no patch")
    solve.set_defaults(func=cmd_runner_solve)


def _add_test(steps: argparse._SubParsersAction) -> None:
    test = steps.add_parser("test", help="apply the patch and run the eval script")
    test.add_argument("--work-dir", required=True)
    test.add_argument("--time-limit", type=int, default=1800, help="eval script limit, s")
    test.add_argument("--without-patch", action="store_true",
                      help="run the tests even when there is no patch")
    test.add_argument("--script-only", action="store_true",
                      help="write run.sh and eval.sh for the task's image, run nothing")
    test.set_defaults(func=cmd_runner_test)


def _add_grade(steps: argparse._SubParsersAction) -> None:
    grade = steps.add_parser("grade", help="parse the test log and grade it")
    grade.add_argument("--work-dir", required=True)
    grade.add_argument("--legacy-log", action="store_true",
                       help="parse the whole log (old runs without output markers)")
    grade.add_argument("--termination-log", help="also write the compact result (<= 4 KiB) "
                                                 "here, e.g. /dev/termination-log")
    grade.add_argument("--artifacts", action="store_true",
                       help="also print the patch and logs (compressed, the test log capped) "
                            "as a JSON line, for the operator to keep")
    grade.add_argument("--test-dir", help="take the test step's outputs from this folder, "
                                          "where it ran (a pod's test volume)")
    grade.add_argument("--test-log", help="with --test-dir: the test log as the test-log "
                                          "step kept it")
    grade.set_defaults(func=cmd_runner_grade)


def _add_keep_log(steps: argparse._SubParsersAction) -> None:
    keep = steps.add_parser("keep-log", help="keep the eval script's output from a named "
                                             "pipe where the test step cannot rewrite it")
    keep.add_argument("--fifo", required=True, help="the pipe to make and read")
    keep.add_argument("--out", required=True, help="the copy to write")
    keep.set_defaults(func=cmd_runner_keep_log)


def cmd_runner_solve(args: argparse.Namespace) -> int:
    from proctor.runner.solve import (
        AgentTarget,
        init_from_task,
        patch_log,
        solve_step,
        task_line,
    )
    from proctor.runner.workdir import WorkDir, write_patch, write_test_step

    if args.resume_task is not None and not args.resume_task.strip():
        raise UsageError("runner solve --resume-task: the task id is empty")
    if args.resume_task is not None and (args.patch_file is not None or not args.endpoint):
        raise UsageError("runner solve --resume-task needs --endpoint (the agent that has "
                         "the task) and no --patch-file")
    work = WorkDir(Path(args.work_dir))
    if args.task_dir:
        init_from_task(work, Path(args.task_dir))
    if args.patch_file is not None:
        # A given patch (gold, empty, a predictions file) or one kept from an earlier try.
        write_patch(work, Path(args.patch_file).read_text() if args.patch_file else "")
    elif args.endpoint:
        header = _auth_header(os.environ)
        target = AgentTarget(args.endpoint, args.timeout, header, task_data=args.task_data,
                             card_wait_s=args.card_wait)
        def announce(task_id: str) -> None:  # at once: the pod may be killed any moment
            print(task_line(task_id), file=sys.stderr, flush=True)

        result = solve_step(work, target, include_hints=not args.no_hints,
                            repo_dir=args.repo_dir, resume_task=args.resume_task,
                            on_task_id=announce)
        print(f"solve: {result.summary}", file=sys.stderr)
    else:
        raise UsageError("runner solve needs --endpoint (ask an agent) or --patch-file")
    write_test_step(work, work.instance(), args.time_limit,
                    test_without_patch=args.without_patch)
    print(patch_log(work.read("patch.diff") or ""), end="")
    return 0


def _auth_header(env: Mapping[str, str]) -> tuple[str, str] | None:
    """The agent's credentials, as a Job passes them (from AgentUnderTest.spec.auth)."""
    # Stripped as the operator strips it: a Secret made from a file often ends in a newline.
    token = (env.get("PROCTOR_AGENT_TOKEN") or "").strip()
    if not token:
        return None
    scheme = env.get("PROCTOR_AGENT_AUTH_SCHEME", "Bearer")
    return env.get("PROCTOR_AGENT_AUTH_HEADER", "Authorization"), \
        f"{scheme} {token}" if scheme else token


def cmd_runner_test(args: argparse.Namespace) -> int:
    from proctor.runner.workdir import WorkDir, write_test_step
    from proctor.sandboxes.process import ProcessSandbox

    work = WorkDir(Path(args.work_dir))
    instance = work.instance()
    write_test_step(work, instance, args.time_limit, test_without_patch=args.without_patch)
    if args.script_only:
        return 0
    run = ProcessSandbox().run_test_step(work, instance, args.time_limit)
    if run.error:
        print(f"test step broke: {run.error}", file=sys.stderr)
    print(f"apply: {(work.read('apply_method') or '-').strip()}; "
          f"log: {work / 'test_output.txt'}")
    return 0


def cmd_runner_grade(args: argparse.Namespace) -> int:
    from proctor.runner.artifacts import artifacts_line
    from proctor.runner.grade import compact_result, grade_step
    from proctor.runner.workdir import WorkDir

    work = WorkDir(Path(args.work_dir))
    if args.test_dir and not args.test_log:
        raise UsageError("runner grade --test-dir needs --test-log")
    if args.test_dir:  # on a cluster: the outputs and the log from where the test step ran
        from proctor.runner.testlog import collect

        why = collect(work, Path(args.test_dir), Path(args.test_log))
        if why:
            (work / "sandbox_error").write_text(why + "\n")
    result = grade_step(work, legacy_log=args.legacy_log)
    if args.termination_log:
        Path(args.termination_log).write_text(json.dumps(compact_result(result)))
    print(result.model_dump_json())
    if args.artifacts:
        print(artifacts_line(work))
    return 0


def cmd_runner_keep_log(args: argparse.Namespace) -> int:
    from proctor.runner.testlog import serve

    fifo, out = Path(args.fifo), Path(args.out)
    for path in (fifo, out):
        if not path.parent.is_dir():
            raise UsageError(f"runner keep-log: {path.parent} is not a folder")
    serve(fifo, out)
    return 0
