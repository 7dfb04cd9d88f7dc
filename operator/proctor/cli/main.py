"""The `proctor` command: run evaluations, validate datasets, run a work item's steps."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from proctor import __version__
from proctor.cli import (
    analyze,
    compare,
    crds,
    export,
    green,
    images,
    render,
    results,
    run,
    validate,
    variants,
)
from proctor.cli import eval as eval_command  # `eval` alone would hide the builtin
from proctor.cli.options import (
    add_sandbox_options,
    sandbox_options,
    seconds,
)
from proctor.cli.summaries import print_errors
from proctor.core import exits
from proctor.core.exits import ExitCode, UsageError

if TYPE_CHECKING:
    from proctor.k8s.election import Election

EXIT_EPILOG = "exit status:\n" + (exits.__doc__ or "").split("\n\n", 1)[1].rstrip()


def _reliability_demo(args: argparse.Namespace) -> int:
    from proctor.analysis.markdown import summary_table
    from proctor.cli.demo import run_reliability_demo

    out = Path(args.output_dir or "proctor-results/demo-reliability")
    found = run_reliability_demo(out, max_concurrent_rows=args.max_concurrent_rows,
                                 progress=not args.quiet, sandbox=sandbox_options(args))
    print("\n".join(summary_table(found.figures)))
    print(f"\nResults in {out}/<agent>/; analysis in {out}/analysis/ (sensitivity_report.md)")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from proctor.cli.demo import run_demo
    from proctor.core.report import leaderboard

    if args.reliability:
        return _reliability_demo(args)
    out = Path(args.output_dir or "proctor-results/demo")
    summaries = run_demo(out, max_concurrent_rows=args.max_concurrent_rows,
                         progress=not args.quiet, sandbox=sandbox_options(args))
    print("\n".join(leaderboard(summaries)))
    print_errors(list(summaries.values()))
    print(f"\nResults in {out}/<agent>/ (summary.json, report.md with every column, "
          f"results.jsonl)")
    return exits.for_summaries(summaries.values())


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


def _auth_header(env: Mapping[str, str]) -> tuple[str, str] | None:
    """The agent's credentials, as a Job passes them (from AgentUnderTest.spec.auth)."""
    # Stripped as the operator strips it: a Secret made from a file often ends in a newline.
    token = (env.get("PROCTOR_AGENT_TOKEN") or "").strip()
    if not token:
        return None
    scheme = env.get("PROCTOR_AGENT_AUTH_SCHEME", "Bearer")
    return env.get("PROCTOR_AGENT_AUTH_HEADER", "Authorization"), \
        f"{scheme} {token}" if scheme else token


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


def cmd_scenario_import(args: argparse.Namespace) -> int:
    from proctor.cli.scenario import import_scenario, pairs, write

    imported = import_scenario(Path(args.scenario), pairs(args.endpoint, "--endpoint"),
                               pairs(args.image, "--image"))
    lines = write(imported, Path(args.output_dir) if args.output_dir else None)
    if lines:
        print("\n".join(lines), file=sys.stdout if args.output_dir else sys.stderr)
    return 0


def cmd_operator(args: argparse.Namespace) -> int:
    from prometheus_client import start_http_server

    from proctor.k8s.controller import check_settings, run

    check_settings(os.environ)  # before anything listens
    election = _election(args) if args.leader_election else None
    start_http_server(args.metrics_port)
    run(args.namespace or [], verbose=args.verbose, probe_port=args.probe_port,
        allow_local_endpoints=args.allow_local_endpoints, election=election)
    return 0


def _election(args: argparse.Namespace) -> Election:
    """The Lease `--leader-election` competes for; a missing namespace or durations out of
    order are bad input (exit 2), said before anything listens."""
    import socket
    import uuid

    from proctor.k8s.election import Election
    from proctor.k8s.leader import Timing

    namespace = args.lease_namespace or os.environ.get("POD_NAMESPACE")
    if not namespace:
        raise exits.BadInput("--leader-election needs the Lease's namespace: "
                             "--lease-namespace or POD_NAMESPACE")
    timing = Timing(lease_seconds=args.lease_duration,
                    renew_deadline_seconds=args.renew_deadline, retry_seconds=args.retry_period)
    try:
        timing.check()
    except ValueError as exc:
        raise exits.BadInput(str(exc)) from None
    # POD_NAME (the chart's): a restarted container takes its own Lease back at once.
    # Elsewhere a random suffix: two processes on one host are two candidates.
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    return Election(namespace, args.lease_name, identity, timing)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} is not above 0")
    return value


def cmd_show(args: argparse.Namespace) -> int:
    from proctor.cli.show import show

    print(show(Path(args.results), args.item))
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, but a mistake in the flags is one line (with where to read more), as
    every other bad input is, not the usage text followed by the error."""

    def error(self, message: str) -> NoReturn:
        self.exit(ExitCode.BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} "
                                      f"--help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="proctor", description=__doc__, epilog=EXIT_EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"proctor {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    from proctor.agents.cli import add_agent_parser

    add_agent_parser(sub)

    run.add_parser(sub)
    eval_command.add_parser(sub)

    dem = sub.add_parser("demo", help="serve the reference agents on loopback and evaluate "
                                      "each over A2A on the demo dataset")
    dem.add_argument("--output-dir", default=None,
                     help="results folder, one subfolder per agent (resumed if present); "
                          "default proctor-results/demo (or demo-reliability)")
    dem.add_argument("--reliability", action="store_true",
                     help="oracle and sensitive with 3 template variants, 3 repeats and a "
                          "fixed seed, then `proctor analyze` of both")
    dem.add_argument("--max-concurrent-rows", type=int, default=2,
                     help="items run at a time (default 2); with --reliability, the oracle's "
                          "only: the seeded sensitive agent runs one at a time")
    dem.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    add_sandbox_options(dem, default="process")
    dem.set_defaults(func=cmd_demo)

    analyze.add_parser(sub)
    compare.add_parser(sub)
    variants.add_parser(sub)
    validate.add_parser(sub)

    scen = sub.add_parser("scenario", help="Agentbeats scenarios")
    scen_sub = scen.add_subparsers(dest="scenario_command", required=True)
    imp = scen_sub.add_parser("import", help="turn an Agentbeats scenario.toml into "
                                             "Proctor's manifests (checked against the CRDs)")
    imp.add_argument("scenario", help="a scenario.toml")
    imp.add_argument("--output-dir", help="write one YAML file per manifest here (default: "
                                          "a YAML stream on stdout)")
    imp.add_argument("--endpoint", action="append", metavar="NAME=URL",
                     help="where participant NAME already runs; repeatable")
    imp.add_argument("--image", action="append", metavar="NAME=IMAGE",
                     help="run participant NAME from this image, as a sidecar of each task's "
                          "pod (cluster); repeatable")
    imp.set_defaults(func=cmd_scenario_import)

    green.add_parser(sub)
    export.add_parser(sub)
    images.add_parser(sub)

    op = sub.add_parser("operator", help="run the Kubernetes operator (kopf)")
    op.add_argument("--namespace", action="append", help="watch only this namespace "
                                                        "(repeatable; default: all)")
    op.add_argument("--metrics-port", type=int, default=9090, help="Prometheus metrics port")
    op.add_argument("--probe-port", type=int, default=8080,
                    help="liveness/readiness probes at /healthz")
    op.add_argument("--verbose", action="store_true")
    op.add_argument("--allow-local-endpoints", action="store_true",
                    help="accept agents at loopback or link-local addresses (a test cluster "
                         "whose pods share the host's network); refused otherwise")
    lead = op.add_argument_group("leader election (several replicas, one active)")
    lead.add_argument("--leader-election", action="store_true",
                      help="run the handlers only while holding a coordination.k8s.io Lease; "
                           "the others wait as ready standbys")
    lead.add_argument("--lease-name", default="proctor-leader", help="the Lease's name")
    lead.add_argument("--lease-namespace", help="the Lease's namespace (default: POD_NAMESPACE)")
    lead.add_argument("--lease-duration", type=_positive_seconds, default=15.0,
                      help="seconds a standby waits on an unrenewed Lease before taking over")
    lead.add_argument("--renew-deadline", type=_positive_seconds, default=10.0,
                      help="seconds without a renewal after which the leader exits "
                           "(below --lease-duration)")
    lead.add_argument("--retry-period", type=_positive_seconds, default=2.0,
                      help="seconds between renewals and between a standby's tries")
    op.set_defaults(func=cmd_operator)

    render.add_parser(sub)
    crds.add_parser(sub)

    sho = sub.add_parser("show", help="one item for a person to read: its task, what the "
                                      "agent sent back, the patch, the test log, the verdict")
    sho.add_argument("results", help="a results folder (proctor run's or eval's --output-dir)")
    sho.add_argument("item", help="instance/variant/repeat, an instance id (its original "
                                  "prompt's first repeat), or the start of an item id")
    sho.set_defaults(func=cmd_show)

    results.add_parser(sub)

    runner = sub.add_parser("runner", help="one step of a work item (what a Job runs)")
    steps = runner.add_subparsers(dest="step", required=True)
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
    test = steps.add_parser("test", help="apply the patch and run the eval script")
    test.add_argument("--work-dir", required=True)
    test.add_argument("--time-limit", type=int, default=1800, help="eval script limit, s")
    test.add_argument("--without-patch", action="store_true",
                      help="run the tests even when there is no patch")
    test.add_argument("--script-only", action="store_true",
                      help="write run.sh and eval.sh for the task's image, run nothing")
    test.set_defaults(func=cmd_runner_test)
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
    keep = steps.add_parser("keep-log", help="keep the eval script's output from a named "
                                             "pipe where the test step cannot rewrite it")
    keep.add_argument("--fifo", required=True, help="the pipe to make and read")
    keep.add_argument("--out", required=True, help="the copy to write")
    keep.set_defaults(func=cmd_runner_keep_log)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status follows `proctor.core.exits` (docs/commands.md lists it)."""
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # a reader gone (`| head`) shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        return _reader_gone()
    except BaseException as exc:
        code = exits.for_exception(exc)
        if code is None:
            raise
        if code == ExitCode.INTERRUPTED:
            print("proctor: interrupted; finished items are kept, run again to resume",
                  file=sys.stderr)
        elif code == ExitCode.BUDGET_SPENT:
            print(f"proctor: {exc}", file=sys.stderr)
        else:
            print(f"proctor: error: {exits.message_for(exc)}", file=sys.stderr)
        return code


def _reader_gone() -> int:
    """The reader of stdout left (`proctor variants show ... | head`): stop quietly, as a
    program killed by SIGPIPE does. stdout goes to devnull so that the interpreter's own
    flush at exit does not fail again (Python's docs, "Note on SIGPIPE")."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: no fileno (captured)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return ExitCode.BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
