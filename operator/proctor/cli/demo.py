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

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proctor.agents.kinds import LOOKS_UP
from proctor.agents.server import start_reference_agent
from proctor.core.model import Summary
from proctor.core.spec import AgentUnderTest, Evaluation
from proctor.datasets import demo
from proctor.formats.manifest import parse_kind
from proctor.local.engine import run_evaluation
from proctor.sandboxes.choose import SandboxOptions

if TYPE_CHECKING:
    from proctor.analysis.run import Analysis

DEMO_KINDS = ("oracle", "noop", "editor", "mixed")
RELIABILITY_KINDS = ("oracle", "sensitive")
RELIABILITY_SEED = 7
RELIABILITY_SPEC: dict[str, Any] = {
    "repeats": 3, "promptSensitivity": {"enabled": True, "strategy": "template",
                                        "numVariations": 3}}


def demo_manifests(kind: str, endpoint: str, max_concurrent_rows: int,
                   extra_spec: dict[str, Any] | None = None
                   ) -> tuple[Evaluation, AgentUnderTest]:
    """The Evaluation and AgentUnderTest of one demo agent, read through the CRDs."""
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
