"""`proctor crds apply`: the CRDs packaged with proctor, applied to the cluster."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    crds = sub.add_parser("crds", help="the CRDs packaged with proctor (crds/)")
    crds_sub = crds.add_subparsers(dest="crds_command", required=True)
    crds_apply = crds_sub.add_parser(
        "apply", help="apply them to the cluster server-side (field manager proctor, forced) "
                      "and say what changed; the chart's upgrade hook runs it")
    crds_apply.add_argument("--dry-run", action="store_true",
                            help="ask the server what would change (dryRun=All), change "
                                 "nothing")
    crds_apply.set_defaults(func=cmd_crds_apply)


def cmd_crds_apply(args: argparse.Namespace) -> int:
    from proctor.k8s.features.crds import apply_packaged

    for line in apply_packaged(dry_run=args.dry_run):
        print(line, flush=True)  # each as it is done: a later refusal keeps them
    return 0
