"""`proctor demo`: the reference agents, evaluated over A2A on the demo dataset.

Each reference agent is a real A2A server on a free loopback port; each is
evaluated by the embedded engine on every demo task, exactly as `proctor run`
evaluates any agent (the agent gets a checkout at REPO_DIR, its diff is tested in a
separate pristine checkout). Results go to `<output-dir>/<agent>/`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from proctor import demo
from proctor.agents.kinds import KINDS
from proctor.agents.server import start_reference_agent
from proctor.local.engine import run_evaluation
from proctor.local.sandboxes import SandboxOptions
from proctor.manifest import parse_resource
from proctor.model import Summary
from proctor.spec import AgentUnderTest, Evaluation


def demo_manifests(kind: str, endpoint: str, max_concurrent_rows: int
                   ) -> tuple[Evaluation, AgentUnderTest]:
    """The Evaluation and AgentUnderTest of one demo agent, read through the CRDs."""
    evaluation = parse_resource({
        "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
        "metadata": {"name": f"demo-{kind}"},
        "spec": {"agentRef": {"name": kind},
                 "dataset": {"name": demo.DATASET_NAME, "maxRows": -1},
                 "maxConcurrentRows": max_concurrent_rows,
                 "timeouts": {"testSeconds": 300}}})
    agent = parse_resource({
        "apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
        "metadata": {"name": kind},
        "spec": {"endpoint": endpoint, "requestTimeoutSeconds": 120}})
    return evaluation, agent


def run_demo(output_dir: Path, kinds: Sequence[str] = KINDS, max_concurrent_rows: int = 2,
             progress: bool = True, sandbox: SandboxOptions | None = None
             ) -> dict[str, Summary]:
    """Serve each reference agent and evaluate it; the summaries by agent."""
    summaries: dict[str, Summary] = {}
    for kind in kinds:
        with start_reference_agent(kind) as server:
            evaluation, agent = demo_manifests(kind, server.url, max_concurrent_rows)
            summaries[kind] = run_evaluation(evaluation, output_dir / kind, progress,
                                             agents=[agent], sandbox=sandbox)
    return summaries
