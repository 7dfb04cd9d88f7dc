"""`proctor demo`: the reference agents, evaluated over A2A on the demo dataset.

Each reference agent is a real A2A server on a free loopback port; each is
evaluated by the embedded engine on every demo task, exactly as `proctor run`
evaluates any agent (the agent gets a checkout at REPO_DIR, its diff is tested in a
separate pristine checkout). Results go to `<output-dir>/<agent>/`.

`proctor demo --reliability` evaluates the oracle and the `sensitive` agent (seeded)
with 3 template variants and 3 repeats, then analyses both into
`<output-dir>/analysis/`; the sensitive agent one item at a time, so that its figures are
the same on every run. The agents that look tasks up get `taskData: true`: a
reworded text alone does not tell them which task it is.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proctor.cli.options import add_sandbox_options, sandbox_options
from proctor.cli.summaries import print_errors
from proctor.core import exits
from proctor.core.model import Summary

# The agents, the engine and the CRDs' schemas are imported where they are used:
# `proctor` imports this module for its parser, whatever the command.
if TYPE_CHECKING:
    from proctor.analysis.run import Analysis
    from proctor.core.spec import AgentUnderTest, Evaluation
    from proctor.sandboxes.choose import SandboxOptions

DEMO_KINDS = ("oracle", "noop", "editor", "mixed")
RELIABILITY_KINDS = ("oracle", "sensitive")
RELIABILITY_SEED = 7
RELIABILITY_SPEC: dict[str, Any] = {
    "repeats": 3, "promptSensitivity": {"enabled": True, "strategy": "template",
                                        "numVariations": 3}}


def add_parser(sub: argparse._SubParsersAction) -> None:
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


def cmd_demo(args: argparse.Namespace) -> int:
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


def _reliability_demo(args: argparse.Namespace) -> int:
    from proctor.analysis.markdown import summary_table

    out = Path(args.output_dir or "proctor-results/demo-reliability")
    found = run_reliability_demo(out, max_concurrent_rows=args.max_concurrent_rows,
                                 progress=not args.quiet, sandbox=sandbox_options(args))
    print("\n".join(summary_table(found.figures)))
    print(f"\nResults in {out}/<agent>/; analysis in {out}/analysis/ (sensitivity_report.md)")
    return 0


def demo_manifests(kind: str, endpoint: str, max_concurrent_rows: int,
                   extra_spec: dict[str, Any] | None = None
                   ) -> tuple[Evaluation, AgentUnderTest]:
    """The Evaluation and AgentUnderTest of one demo agent, read through the CRDs."""
    from proctor.agents.kinds import LOOKS_UP
    from proctor.core.spec import AgentUnderTest, Evaluation
    from proctor.datasets import demo
    from proctor.formats.manifest import parse_kind

    evaluation = parse_kind({
        "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
        "metadata": {"name": f"demo-{kind}"},
        "spec": {"agentRef": {"name": kind},
                 "dataset": {"name": demo.DATASET_NAME, "maxRows": -1},
                 "maxConcurrentRows": max_concurrent_rows,
                 "timeouts": {"testSeconds": 300}, **(extra_spec or {})}}, Evaluation)
    agent = parse_kind({
        "apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
        "metadata": {"name": kind},
        "spec": {"endpoint": endpoint, "requestTimeoutSeconds": 120,
                 "taskData": kind in LOOKS_UP}}, AgentUnderTest)
    return evaluation, agent


def run_demo(output_dir: Path, kinds: Sequence[str] = DEMO_KINDS, max_concurrent_rows: int = 2,
             progress: bool = True, extra_spec: dict[str, Any] | None = None,
             seed: int | None = None, sandbox: SandboxOptions | None = None
             ) -> dict[str, Summary]:
    """Serve each reference agent and evaluate it; the summaries by agent."""
    from proctor.agents.server import start_reference_agent
    from proctor.local.engine import run_evaluation

    summaries: dict[str, Summary] = {}
    for kind in kinds:
        with start_reference_agent(kind, seed=seed) as server:
            evaluation, agent = demo_manifests(kind, server.url, max_concurrent_rows,
                                               extra_spec)
            summaries[kind] = run_evaluation(evaluation, output_dir / kind, progress,
                                             agents=[agent], sandbox=sandbox)
    return summaries


def run_reliability_demo(output_dir: Path, max_concurrent_rows: int = 2,
                         progress: bool = True, seed: int = RELIABILITY_SEED,
                         sandbox: SandboxOptions | None = None) -> Analysis:
    """The oracle and the sensitive agent with variants and repeats, then their analysis."""
    from proctor.analysis.run import analyze  # numpy and matplotlib: only when analysing

    oracle, sensitive = RELIABILITY_KINDS
    run_demo(output_dir, [oracle], max_concurrent_rows, progress, RELIABILITY_SPEC, seed, sandbox)
    # The sensitive agent takes its seeded draws in the order a wording is asked, and the
    # repeats of a wording are neighbours in the plan: two at a time, which repeat gets
    # which draw would be a race, and the per-run figures would change from run to run.
    run_demo(output_dir, [sensitive], 1, progress, RELIABILITY_SPEC, seed, sandbox)
    return analyze([output_dir / kind for kind in RELIABILITY_KINDS], output_dir / "analysis")
