"""The `llm` agent: mini-swe-agent's loop on any litellm model, as a `Solver`.

Proctor writes no agent loop: each task runs mini-swe-agent's `DefaultAgent` with its
`LitellmModel` (tool calls to one `bash` tool) and a `LocalEnvironment` whose commands
run in the task's checkout (REPO_DIR, or a clone of the repository at the base commit).
The prompts are mini-swe-agent's own SWE-bench config (`swebench.yaml`), pointed at
that checkout instead of the container path `/testbed`.

The answer is the patch the loop submitted, else `git diff` of the checkout's tracked
files (a loop stopped by a limit still answers with what it changed), with tokens,
cost and model calls in Proctor's `usage` keys. A model that cannot be reached (after
mini-swe-agent's retries) fails the task: the item is an `agent` error, retried by
`--retry-errors`, rather than a wrong answer charged to the model.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proctor.agents.answers import Answer, TaskRequest
from proctor.agents.checkout import EditError, Solver, git

log = logging.getLogger(__name__)

# mini-swe-agent prints a banner and reads ~/.config on import unless told to be quiet.
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")


@dataclass(frozen=True)
class LlmSettings:
    """How the `llm` agent runs its loop (`proctor agent serve --kind llm ...`)."""

    model: str
    """A litellm model string: `openai/gpt-4o-mini`, `ollama/qwen2.5-coder:7b`, ..."""
    api_base: str | None = None
    """The model server's address; None: litellm's default or its env var for the provider."""
    step_limit: int = 50
    """Model calls per task before the loop stops (a runaway loop's cap)."""
    cost_limit: float = 3.0
    """US dollars per task before the loop stops (only for models litellm has prices for)."""
    model_timeout_s: float = 300.0
    """Seconds one model call may take."""
    command_timeout_s: int = 120
    """Seconds one shell command of the agent may take."""
    config: str = "swebench"
    """mini-swe-agent's config file (a built-in name or a path) for prompts and templates."""


def usage_of(messages: list[dict[str, Any]], cost: float, calls: int) -> dict[str, float]:
    """Tokens summed over the model's responses the loop kept (format errors included),
    its cost and its model calls, in Proctor's own `usage` keys."""
    tokens_in = tokens_out = 0
    for message in messages:
        response = (message.get("extra") or {}).get("response")
        usage = response.get("usage") if isinstance(response, Mapping) else None
        if isinstance(usage, Mapping):
            tokens_in += int(usage.get("prompt_tokens") or 0)
            tokens_out += int(usage.get("completion_tokens") or 0)
    return {"input_tokens": tokens_in, "output_tokens": tokens_out,
            "total_tokens": tokens_in + tokens_out, "cost_usd": round(cost, 8),
            "steps": calls}


_LOCATION = re.compile(r"^Repository:\s*(\S+)\s*$\n^Base commit:\s*([0-9a-fA-F]{7,40})\s*$",
                       re.MULTILINE)


@contextmanager
def checkout_for(request: TaskRequest) -> Iterator[Path]:
    """REPO_DIR when the message names one; else a clone of the repository it names, at
    its base commit, removed afterwards. Raises EditError when there is neither."""
    if request.repo_dir:
        repo = Path(request.repo_dir)
        if not (repo / ".git").exists():
            raise EditError(f"REPO_DIR {repo} is not a git checkout")
        yield repo
        return
    found = _LOCATION.search(request.text)
    if found is None:
        raise EditError("the message names neither a REPO_DIR nor a repository and commit")
    url, commit = found.groups()
    with tempfile.TemporaryDirectory(prefix="proctor-llm-") as tmp:
        repo = Path(tmp) / "repo"
        git(Path(tmp), "clone", "--quiet", url, str(repo))
        git(repo, "checkout", "--quiet", commit)
        yield repo


def _loop_parts(settings: LlmSettings, repo: Path) -> tuple[Any, Any, dict[str, Any]]:
    """mini-swe-agent's model, environment and agent settings for one task in `repo`."""
    from minisweagent.config import get_config_from_spec
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_model import LitellmModel

    config = get_config_from_spec(settings.config)
    model_config = dict(config.get("model", {}))
    kwargs = {**model_config.get("model_kwargs", {}), "timeout": settings.model_timeout_s}
    if settings.api_base:
        kwargs["api_base"] = settings.api_base
    # Local and self-hosted models have no price in litellm: cost 0 rather than a crash.
    model = LitellmModel(**{**model_config, "model_name": settings.model, "model_kwargs": kwargs,
                            "cost_tracking": "ignore_errors"})
    env_config = config.get("environment", {})
    # BASH_ENV points at the SWE-bench image's conda setup; here it would source the
    # user's own shell profile.
    variables = {k: str(v) for k, v in env_config.get("env", {}).items() if k != "BASH_ENV"}
    env = LocalEnvironment(cwd=str(repo), env=variables, timeout=settings.command_timeout_s)
    agent_config = {**config.get("agent", {}), "step_limit": settings.step_limit,
                    "cost_limit": settings.cost_limit}
    agent_config["instance_template"] = str(agent_config.get("instance_template", "")) \
        .replace("/testbed", "{{cwd}}")
    return model, env, agent_config


def patch_of(submission: str, repo: Path) -> str:
    """The submitted diff when the loop submitted one, else the checkout's tracked changes
    (the agent's scratch files, untracked, stay out)."""
    if "diff --git" in submission or submission.lstrip().startswith("--- "):
        return submission if submission.endswith("\n") else submission + "\n"
    return git(repo, "diff", "--no-color", "--no-ext-diff", "HEAD")


def run_loop(settings: LlmSettings, request: TaskRequest, repo: Path) -> Answer:
    """One task through mini-swe-agent's DefaultAgent in `repo`."""
    from minisweagent.agents.default import DefaultAgent

    model, env, agent_config = _loop_parts(settings, repo)
    agent = DefaultAgent(model, env, **agent_config)
    try:
        ended = agent.run(request.text)
    except Exception as exc:  # the model unreachable, refusing, or timing out past retries
        log.warning("The loop failed after %d model calls: %s: %s", agent.n_calls,
                    type(exc).__name__, exc)
        return Answer(state="failed", text=f"The model call failed: {type(exc).__name__}: "
                                           f"{str(exc)[:400]}",
                      usage=usage_of(agent.messages, agent.cost, agent.n_calls))
    status = str(ended.get("exit_status") or "")
    patch = patch_of(str(ended.get("submission") or ""), repo)
    log.info("The loop ended status=%s calls=%d patch_chars=%d", status, agent.n_calls,
             len(patch))
    return Answer(text=f"mini-swe-agent ended with {status} after {agent.n_calls} model calls.",
                  patch=patch, form="data",
                  usage=usage_of(agent.messages, agent.cost, agent.n_calls))


def llm(settings: LlmSettings) -> Solver:
    """The `llm` kind's answer function."""
    def solve(request: TaskRequest) -> Answer:
        try:
            with checkout_for(request) as repo:
                return run_loop(settings, request, repo)
        except EditError as exc:
            return Answer(state="failed", text=f"No checkout to work in: {exc}")
    return solve
