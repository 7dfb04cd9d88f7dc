"""The `llm` agent end to end: Proctor's engine -> A2A -> mini-swe-agent's loop -> litellm
-> a scripted OpenAI-compatible server on loopback, and back as a graded item."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proctor.agents.answers import TaskRequest
from proctor.agents.checkout import EditError
from proctor.agents.llm import LlmSettings, checkout_for
from proctor.agents.server import start_reference_agent
from proctor.cli.main import main
from proctor.core.model import ErrorKind, Outcome
from proctor.formats.manifest import parse_manifests
from proctor.local.engine import run_evaluation
from proctor.results import ResultsFolder
from support.llm_servers import HTTP500, SLOW, ScriptedModel, bash_call

TASK = "proctor-demo__datekit-1"  # is_leap_year ignores the century rule
BUGGY, FIXED = "return year % 4 == 0", \
    "return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)"


def manifests(endpoint: str) -> str:
    return f"""apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {{name: ev}}
spec:
  agentRef: {{name: llm}}
  dataset: {{name: proctor-demo, instanceIds: [{TASK}]}}
---
apiVersion: proctor.dev/v1alpha1
kind: AgentUnderTest
metadata: {{name: llm}}
spec:
  endpoint: {endpoint}
  requestTimeoutSeconds: 120
"""


@pytest.fixture
def model(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")  # litellm wants one; unchecked
    # mini-swe-agent retries a failed call 10 times, waiting 4 s and more between tries.
    monkeypatch.setenv("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")
    srv = ScriptedModel("openai")
    yield srv
    srv.close()


def settings(srv: ScriptedModel, **overrides: float) -> LlmSettings:
    return LlmSettings(model="openai/test-model", api_base=f"{srv.base}/v1",
                       **{"step_limit": 8, "model_timeout_s": 10.0, **overrides})


def run_once(srv: ScriptedModel, tmp_path: Path, **overrides: float):
    with start_reference_agent("llm", llm=settings(srv, **overrides)) as agent:
        docs = parse_manifests(manifests(agent.url))
        run_evaluation(docs[0], tmp_path / "o", progress=False, agents=docs[1:])
    [result] = ResultsFolder(tmp_path / "o").load()
    return result


def fix_script() -> list:
    """A model that reads the code, edits it, makes the patch and submits it, as
    mini-swe-agent's SWE-bench prompt asks; it goes on only if it saw the buggy line."""
    def edit(prompt: str) -> dict | str:
        if BUGGY not in prompt:
            return "I did not see the function."
        return bash_call(f"sed -i 's/{BUGGY}$/{FIXED}/' datekit/months.py", "Add the rule.")
    return [bash_call("grep -n -A2 'def is_leap_year' datekit/months.py", "Find it."), edit,
            bash_call("git diff -- datekit/months.py > patch.txt"),
            bash_call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt")]


def test_the_llm_agent_fixes_a_demo_task_through_proctor_run(model, tmp_path, capsys):
    model.script = fix_script()
    with start_reference_agent("llm", llm=settings(model)) as agent:
        (tmp_path / "ev.yaml").write_text(manifests(agent.url))
        assert main(["run", "-q", "-f", str(tmp_path / "ev.yaml"),
                     "--output-dir", str(tmp_path / "o")]) == 0
    [result] = ResultsFolder(tmp_path / "o").load()
    assert result.outcome == Outcome.RESOLVED
    assert len(model.calls) == 4 and all(c["model"] == "test-model" for c in model.calls)
    # The task and the engine's checkout reached the model through mini-swe-agent's prompt.
    assert "is_leap_year(1900) returns True" in model.calls[0]["prompt"]
    assert "REPO_DIR:" in model.calls[0]["prompt"]
    usage = result.usage
    assert usage is not None and usage.steps == 4
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (400, 200, 600)
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["usage"]["total_tokens"] == 600


def test_garbage_replies_end_without_a_patch_after_three_format_errors(model, tmp_path):
    model.script = ["The bug is somewhere in the calendar code, I think."] * 10
    result = run_once(model, tmp_path)
    assert result.outcome == Outcome.NO_OP and result.error_kind is None
    # mini-swe-agent stops after 3 replies in a row without a tool call.
    assert len(model.calls) == 3 and result.usage.steps == 3


def test_a_runaway_loop_stops_at_the_step_limit(model, tmp_path):
    model.script = [bash_call("ls") for _ in range(20)]
    result = run_once(model, tmp_path, step_limit=3)
    assert result.outcome == Outcome.NO_OP
    assert len(model.calls) == 3 and result.usage.steps == 3


def test_a_model_server_error_fails_the_item_as_a_retryable_agent_error(model, tmp_path):
    model.script = [bash_call("ls"), HTTP500, HTTP500, HTTP500]
    result = run_once(model, tmp_path)
    assert result.outcome == Outcome.ERROR and result.error_kind == ErrorKind.AGENT
    assert "InternalServerError" in (result.error_message or "")
    assert result.usage is not None and result.usage.steps == 2


def test_a_model_that_does_not_answer_in_time_fails_the_item(model, tmp_path):
    model.script = [SLOW] * 4
    result = run_once(model, tmp_path, model_timeout_s=1.0)
    assert result.outcome == Outcome.ERROR and result.error_kind == ErrorKind.AGENT
    assert "Timeout" in (result.error_message or "")


def test_without_repo_dir_it_clones_the_named_repository_at_its_commit(tmp_path):
    origin = tmp_path / "origin"
    subprocess.run(["git", "init", "-q", str(origin)], check=True)
    git = ["git", "-C", str(origin), "-c", "user.name=t", "-c", "user.email=t@t"]
    (origin / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    first = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True,
                           text=True).stdout.strip()
    (origin / "a.txt").write_text("two\n")
    subprocess.run([*git, "commit", "-qam", "two"], check=True)
    text = f"Repository: {origin}\nBase commit: {first}\n\nProblem Statement:\nx\n"
    with checkout_for(TaskRequest(text=text)) as repo:
        assert (repo / "a.txt").read_text() == "one\n"
    assert not repo.exists()
    with pytest.raises(EditError, match="neither a REPO_DIR"), \
            checkout_for(TaskRequest(text="Problem Statement:\nx\n")):
        pass


@pytest.mark.parametrize("argv, message", [
    (["--kind", "llm"], "--kind llm needs --model"),
    (["--kind", "oracle", "--model", "openai/gpt-4o-mini"], "--model is for --kind llm only"),
    (["--kind", "llm", "--model", "x", "--step-limit", "0"], "must be positive"),
])
def test_bad_llm_flags_exit_2_with_one_line(argv, message):
    done = subprocess.run([sys.executable, "-m", "proctor.agents", "serve", *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and message in done.stderr
