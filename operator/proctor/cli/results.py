"""`proctor results pull`: results kept on a cluster or in an object store, as the folder
`proctor run` writes."""

from __future__ import annotations

import argparse
from pathlib import Path

from proctor.cli.options import add_s3_endpoint, store_client


def add_parser(sub: argparse._SubParsersAction) -> None:
    res = sub.add_parser("results", help="results kept on a cluster or in an object store")
    res_sub = res.add_subparsers(dest="results_command", required=True)
    pull = res_sub.add_parser("pull", help="write a cluster Evaluation's results, or a run "
                                           "stored with --upload, as the folder `proctor run` "
                                           "writes")
    pull.add_argument("evaluation", help="the Evaluation's name, or s3://BUCKET/PREFIX/RUN")
    pull.add_argument("-n", "--namespace", default="default")
    pull.add_argument("-o", "--output-dir", required=True)
    add_s3_endpoint(pull)
    pull.set_defaults(func=cmd_results_pull)


def cmd_results_pull(args: argparse.Namespace) -> int:
    if "://" in args.evaluation:  # an Evaluation's name has none
        return _pull_from_store(args)
    from proctor.k8s.pull import pull_from_cluster

    count = pull_from_cluster(args.namespace, args.evaluation, Path(args.output_dir),
                              args.s3_endpoint)
    print(f"Pulled {count} results of {args.namespace}/{args.evaluation} into "
          f"{args.output_dir}/ (summary.json, report.md, results.jsonl)")
    return 0


def _pull_from_store(args: argparse.Namespace) -> int:
    from proctor.store import s3
    from proctor.store.location import parse_s3_url

    where = parse_s3_url(args.evaluation)
    count = s3.download_folder(store_client(args), where, Path(args.output_dir))
    print(f"Pulled {count} files of {where}/ into {args.output_dir}/")
    return 0
