"""`proctor run`: an Evaluation on this machine, its results uploaded if asked."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from proctor.cli.options import (
    add_agent_options,
    add_s3_endpoint,
    add_sandbox_options,
    agent_token,
    load_evaluation,
    sandbox_options,
    store_client,
)
from proctor.cli.summaries import print_summary
from proctor.core import exits


def add_parser(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="run an Evaluation on this machine")
    run.add_argument("-f", "--file", action="append", required=True,
                     help="a YAML file with the Evaluation (and its AgentUnderTest); repeatable")
    run.add_argument("--output-dir", required=True, help="results folder (resumed if present)")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    run.add_argument("--upload", type=_s3_url, metavar="s3://BUCKET/PREFIX",
                     help="after the run, put the results folder in this S3-compatible "
                          "store, at PREFIX/<the folder's name>/ (keys from AWS_ACCESS_KEY_ID "
                          "and AWS_SECRET_ACCESS_KEY)")
    add_s3_endpoint(run)
    add_agent_options(run)
    add_sandbox_options(run, default="auto")
    run.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    from proctor.local.engine import run_evaluation

    evaluation, agents = load_evaluation(args.file)
    store = store_client(args) if args.upload else None  # no credentials: before the run
    summary = run_evaluation(evaluation, Path(args.output_dir), progress=not args.quiet,
                             agents=agents, retry_errors=args.retry_errors,
                             sandbox=sandbox_options(args), agent_wait_s=args.agent_wait,
                             agent_token=agent_token(args, os.environ))
    print_summary(summary, Path(args.output_dir))
    if store is not None:
        _upload(store, Path(args.output_dir), args.upload)
    return exits.for_summaries([summary])


def _upload(store, output_dir: Path, to) -> None:
    """The results folder, to `to`/<its name>/; a failure keeps the folder and says so."""
    from proctor.results import LOCK_FILE
    from proctor.store import s3
    from proctor.store.location import StoreError

    where = to.child(output_dir.resolve().name)
    try:
        count = s3.upload_folder(store, output_dir, where, skip={LOCK_FILE})
    except (StoreError, s3.StoreUnreachable) as exc:
        raise type(exc)(f"{exc}; the results are kept in {output_dir}/ (run the same "
                        f"command again to upload them)") from None
    print(f"Uploaded {count} files of {output_dir}/ to {where}/ (proctor results pull "
          f"{where} --output-dir DIR gets them back)")


def _s3_url(text: str):
    from proctor.store.location import StoreError, parse_s3_url

    try:
        return parse_s3_url(text)
    except StoreError as exc:  # argparse would print only "invalid value"
        raise argparse.ArgumentTypeError(str(exc)) from None
