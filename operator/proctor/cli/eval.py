"""`proctor eval`: predictions (or an agent) graded with the swebench harness's options,
its logs and run report written too (the options' translation: `eval_options`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from proctor.cli.options import (
    add_agent_options,
    add_sandbox_options,
    agent_token,
    sandbox_options,
)
from proctor.cli.summaries import print_summary
from proctor.core import exits
from proctor.core.exits import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("eval", help="grade predictions (or an agent) with the swebench "
                                     "harness's options; writes its logs and run report too")
    what = ev.add_argument_group("what to evaluate (one of)")
    what.add_argument("-p", "--predictions", "--predictions_path", metavar="FILE|gold|empty",
                      help="a swebench predictions file (.json or .jsonl), or gold or empty")
    what.add_argument("--agent", metavar="URL", help="an A2A agent already running there")
    what.add_argument("-f", "--file", metavar="AGENT.yaml", help="an AgentUnderTest manifest")
    ev.add_argument("-d", "--dataset", "--dataset_name", default="SWE-bench/SWE-bench_Verified",
                    help="hub dataset id, short name or alias (verified, lite, full, "
                         "multilingual, ...), proctor-demo, or a local .json/.jsonl/.parquet")
    ev.add_argument("-s", "--split", default="test")
    ev.add_argument("-i", "--instance_ids", "--instance-ids", nargs="+", action="extend",
                    metavar="ID", help="only these instances (default: all of the dataset's, "
                                       "or the predictions file's)")
    ev.add_argument("-j", "--max_workers", "--max-workers", "--workers", type=int, default=4,
                    help="instances evaluated at once")
    ev.add_argument("--run_id", "--run-id", default="run",
                    help="names the run: its logs' folders and its run report; running a run "
                         "id again resumes it")
    ev.add_argument("-t", "--timeout", type=int, default=1800,
                    help="seconds each instance's tests may run")
    ev.add_argument("--output-dir", default=".", help="where logs/ and the run reports go, "
                    "many run ids side by side, Proctor's results of each in "
                    "logs/proctor/<run_id>/ (default: here)")
    ev.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_agent_options(ev)
    add_sandbox_options(ev, default="auto")
    ev.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    from proctor.cli.eval_options import SOURCES, EvalOptions, evaluation_manifest
    from proctor.core.spec import Evaluation
    from proctor.formats.harness_logs import results_dir, write_run_logs
    from proctor.formats.manifest import parse_kind
    from proctor.formats.predictions import load_predictions
    from proctor.local.engine import run_evaluation
    from proctor.prepare import Refusal, load_selection

    if sum(bool(x) for x in (args.predictions, args.agent, args.file)) != 1:
        raise UsageError("give one of --predictions FILE|gold|empty, --agent URL, "
                         "-f AGENT.yaml")
    agents = _eval_agents(args)
    preds = load_predictions(args.predictions) if args.predictions not in (None, *SOURCES) \
        else None
    options = EvalOptions(predictions=args.predictions, agent=agents[0].name if agents else None,
                          dataset=args.dataset, split=args.split,
                          instance_ids=tuple(args.instance_ids or ()),
                          max_workers=args.max_workers, run_id=args.run_id, timeout=args.timeout)
    evaluation = parse_kind(evaluation_manifest(options, preds.patches if preds else None),
                            Evaluation, "proctor eval's options")
    out = Path(args.output_dir)
    run_dir = results_dir(out, options.run_id)
    try:
        selection = load_selection(evaluation)  # once, for the run and the harness's logs
    except Refusal:
        if preds:  # an id the dataset lacks: name the predictions file's line, not the id
            load_predictions(args.predictions, _dataset_ids(evaluation))
        raise
    summary = run_evaluation(evaluation, run_dir, progress=not args.quiet, agents=agents,
                             sandbox=sandbox_options(args), selection=selection,
                             retry_errors=args.retry_errors, agent_wait_s=args.agent_wait,
                             inputs={"predictions_sha256": preds.digest} if preds else None,
                             agent_token=agent_token(args, os.environ),
                             advice=f"use another --run_id, or remove {run_dir} to start "
                                    f"the run again")
    report = write_run_logs(out, evaluation, selection, args.run_id, summary.agent,
                            preds.patches if preds else None, options.instance_ids)
    print_summary(summary, run_dir)
    print(f"swebench's logs in {out / 'logs' / 'run_evaluation' / args.run_id}/, "
          f"its run report in {report}")
    return exits.for_summaries([summary])


def _eval_agents(args: argparse.Namespace) -> list:
    """The agent `proctor eval` evaluates, if any: from -f AGENT.yaml or --agent URL."""
    from proctor.cli.eval_options import agent_manifest
    from proctor.core.spec import AgentUnderTest
    from proctor.formats.manifest import load_manifests, parse_resource

    if args.agent:
        return [parse_resource(agent_manifest(args.agent), f"--agent {args.agent}")]
    if not args.file:
        return []
    agents = [d for d in load_manifests(Path(args.file)) if isinstance(d, AgentUnderTest)]
    if len(agents) != 1:
        raise UsageError(f"expected exactly one AgentUnderTest in {args.file}, "
                         f"found {len(agents)}")
    return agents


def _dataset_ids(evaluation) -> set[str]:
    """Every instance id of the evaluation's dataset (read again: only on a refusal)."""
    from proctor.datasets import read_rows

    ds = evaluation.spec.dataset
    return {str(r.get("instance_id")) for r in read_rows(ds.name, ds.split, ds.revision)}
