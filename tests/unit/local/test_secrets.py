"""An agent's token on one machine (issue 31, auth and secrets): `proctor run` reads it from
$PROCTOR_AGENT_TOKEN or --agent-token-file, sends it in spec.auth's header to an agent that
refuses every request without it (its card too), and writes it nowhere: not in any file of
the results folder (compressed transcripts read too), nor on stdout or stderr.

The same check on a real cluster (Secret, operator, pods, result ConfigMaps, pulled folder):
tests/cluster/test_cluster_secrets.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from proctor.agents.server import start_reference_agent
from proctor.core.model import Outcome
from proctor.results import ResultsFolder
from support.leaks import files_holding

PROCTOR = Path(sys.executable).parent / "proctor"
TOKEN = "s3cr3t-Proctor-token-5b1f0e"


def manifests(endpoint: str, scheme: str = "Bearer") -> str:
    return f"""apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {{name: ev}}
spec:
  agentRef: {{name: locked}}
  dataset: {{name: proctor-demo, maxRows: 2}}
---
apiVersion: proctor.dev/v1alpha1
kind: AgentUnderTest
metadata: {{name: locked}}
spec:
  endpoint: {endpoint}
  requestTimeoutSeconds: 60
  auth:
    secretRef: {{name: agent-token, key: token}}
    scheme: "{scheme}"
"""


def proctor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`proctor ...` as a person runs it, with no token in its environment but `env`'s."""
    base = {k: v for k, v in os.environ.items() if k != "PROCTOR_AGENT_TOKEN"}
    return subprocess.run([str(PROCTOR), *args], env={**base, **env}, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def locked_agent():
    with start_reference_agent("oracle", token=TOKEN) as server:
        yield server


def test_the_locked_agent_refuses_a_request_without_its_token(locked_agent) -> None:
    """The guard of the checks below: without the header the agent answers nothing."""
    card = f"{locked_agent.url}.well-known/agent-card.json"
    assert httpx.get(card).status_code == 401
    assert httpx.get(card, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(card, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


@pytest.mark.parametrize("source", ["environment", "file"])
def test_the_token_reaches_the_agent_and_nothing_written(locked_agent, tmp_path: Path,
                                                        source: str) -> None:
    (tmp_path / "ev.yaml").write_text(manifests(locked_agent.url))
    out = tmp_path / "out"
    args = ["run", "-f", str(tmp_path / "ev.yaml"), "--output-dir", str(out),
            "--sandbox", "process"]
    if source == "file":
        (tmp_path / "token").write_text(TOKEN + "\n")  # as `echo` writes it
        run = proctor(*args, "--agent-token-file", str(tmp_path / "token"), env={})
    else:
        run = proctor(*args, env={"PROCTOR_AGENT_TOKEN": TOKEN})
    assert run.returncode == 0, run.stderr
    # The oracle answered every item: the token was sent with each request, card included.
    assert [r.outcome for r in ResultsFolder(out).load()] == [Outcome.RESOLVED] * 2
    assert TOKEN not in run.stdout + run.stderr
    assert files_holding(out, TOKEN) == []
    # Nor in what is made of the folder: an item shown, the reliability report.
    results = ResultsFolder(out).load()
    shown = proctor("show", str(out), results[0].instance_id, env={})
    analyzed = proctor("analyze", str(out), "--output-dir", str(tmp_path / "report"), env={})
    assert shown.returncode == analyzed.returncode == 0, shown.stderr + analyzed.stderr
    assert TOKEN not in shown.stdout + shown.stderr + analyzed.stdout + analyzed.stderr
    assert files_holding(tmp_path / "report", TOKEN) == []
    assert any((tmp_path / "report").iterdir())


def test_a_wrong_token_is_refused_by_the_agent_and_not_repeated(locked_agent,
                                                               tmp_path: Path) -> None:
    (tmp_path / "ev.yaml").write_text(manifests(locked_agent.url))
    wrong = "wrong-" + TOKEN
    run = proctor("run", "-f", str(tmp_path / "ev.yaml"), "--output-dir",
                  str(tmp_path / "out"), "--sandbox", "process",
                  env={"PROCTOR_AGENT_TOKEN": wrong})
    assert run.returncode != 0
    assert "401" in run.stderr
    assert wrong not in run.stdout + run.stderr
    assert files_holding(tmp_path, wrong) == []


def test_without_a_token_the_run_is_refused_in_one_line(locked_agent, tmp_path: Path) -> None:
    (tmp_path / "ev.yaml").write_text(manifests(locked_agent.url))
    run = proctor("run", "-f", str(tmp_path / "ev.yaml"), "--output-dir",
                  str(tmp_path / "out"), env={})
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "PROCTOR_AGENT_TOKEN" in run.stderr and "--agent-token-file" in run.stderr
    assert not (tmp_path / "out" / "results.jsonl").exists()
