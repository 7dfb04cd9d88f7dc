"""`proctor export swebench-submission`: a results folder as the SWE-bench leaderboard's
submission folder."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    exp = sub.add_parser("export", help="a results folder in another tool's layout")
    exp_sub = exp.add_subparsers(dest="export_command", required=True)
    sub_exp = exp_sub.add_parser("swebench-submission",
                                 help="the SWE-bench leaderboard's submission folder: "
                                      "all_preds.jsonl, logs/, trajs/, metadata.yaml and "
                                      "README.md stubs")
    sub_exp.add_argument("results", help="a results folder (proctor run, eval, demo, "
                                         "results pull)")
    sub_exp.add_argument("--output", required=True, help="the submission folder to write "
                                                         "(new or empty)")
    sub_exp.set_defaults(func=cmd_export_submission)


def cmd_export_submission(args: argparse.Namespace) -> int:
    from proctor.formats.swebench_submission import export

    done = export(Path(args.results), Path(args.output))
    print(f"Wrote {done.folder}/: all_preds.jsonl and logs/ of {done.tasks} tasks "
          f"({done.resolved} resolved), trajs/ of {done.trajectories}; fill in "
          f"metadata.yaml and README.md, then add the folder to evaluation/<split>/ "
          f"of the leaderboard's repository as <date>_<model>")
    if done.left_out:
        print(f"{done.left_out} items besides each task's first attempt were left out "
              f"(the leaderboard takes one attempt per task)")
    return 0
