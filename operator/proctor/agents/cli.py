"""`proctor agent serve`: run a reference agent, the way Agentbeats starts agents.

    proctor agent serve --kind oracle --host 0.0.0.0 --port 9009 --card-url http://oracle:9009/

`add_agent_parser` adds the `agent` command to Proctor's own parser; `main` runs
it alone (`python -m proctor.agents serve …`, handy in an agent's container).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from proctor.agents.kinds import KINDS

if TYPE_CHECKING:
    from proctor.agents.llm import LlmSettings


def llm_settings(args: argparse.Namespace) -> LlmSettings | None:
    """The llm kind's settings from the flags; None for the other kinds."""
    from proctor.agents.llm import LlmSettings

    if args.kind != "llm":
        return None
    return LlmSettings(model=args.model, api_base=args.api_base, step_limit=args.step_limit,
                       cost_limit=args.cost_limit, model_timeout_s=args.model_timeout,
                       command_timeout_s=args.command_timeout)


def check_llm_flags(args: argparse.Namespace) -> str | None:
    """Why the flags cannot run, in one line; None when they can."""
    if args.kind == "llm" and not args.model:
        return "--kind llm needs --model, a litellm model string (e.g. openai/gpt-4o-mini)"
    if args.kind != "llm" and args.model:
        return "--model is for --kind llm only"
    if args.step_limit < 1 or args.cost_limit <= 0 or args.model_timeout <= 0 \
            or args.command_timeout < 1:
        return "--step-limit, --cost-limit, --model-timeout and --command-timeout must be positive"
    return None


def cmd_agent_serve(args: argparse.Namespace) -> int:
    from proctor.agents.server import serve

    problem = check_llm_flags(args)
    if problem:
        print(f"proctor agent serve: {problem}", file=sys.stderr)
        return 2
    token = os.environ.get(args.token_env) if args.token_env else None
    if args.token_env and not token:
        print(f"proctor agent serve: --token-env {args.token_env}: that variable is unset "
              f"or empty", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    serve(args.kind, host=args.host, port=args.port, card_url=args.card_url,
          dataset_files=args.dataset or (), seed=args.seed,
          request_log=Path(args.request_log) if args.request_log else None,
          exit_after=args.exit_after, llm=llm_settings(args), token=token)
    return 0


def _add_llm_flags(serve: argparse.ArgumentParser) -> None:
    llm = serve.add_argument_group("the llm kind (mini-swe-agent on a litellm model)")
    llm.add_argument("--model", help="a litellm model string: openai/gpt-4o-mini, "
                                     "anthropic/claude-sonnet-4-5-20250929, "
                                     "ollama/qwen2.5-coder:7b, hosted_vllm/NAME; keys from "
                                     "the environment as litellm reads them")
    llm.add_argument("--api-base", help="the model server's URL (Ollama, vLLM, any "
                                        "OpenAI-compatible server)")
    llm.add_argument("--step-limit", type=int, default=50,
                     help="model calls per task before the loop stops (default 50)")
    llm.add_argument("--cost-limit", type=float, default=3.0,
                     help="US dollars per task before the loop stops (default 3; models "
                          "litellm has prices for)")
    llm.add_argument("--model-timeout", type=float, default=300.0, metavar="SECONDS",
                     help="seconds one model call may take (default 300)")
    llm.add_argument("--command-timeout", type=int, default=120, metavar="SECONDS",
                     help="seconds one shell command of the agent may take (default 120)")


def _add_serve(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser("serve", help="serve a reference agent over A2A until stopped")
    serve.add_argument("--kind", choices=KINDS, required=True,
                       help="oracle: the gold patch; noop: no patch; editor: edits REPO_DIR "
                            "and answers with its git diff; mixed: every outcome on the demo "
                            "tasks; sensitive: solves with a chance set by the wording; llm: "
                            "mini-swe-agent on --model in the checkout")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=9009, help="port to listen on")
    serve.add_argument("--card-url", default=None,
                       help="the URL the agent card names (default http://HOST:PORT/)")
    serve.add_argument("--dataset", action="append", metavar="PATH",
                       help="a dataset file (.json/.jsonl/.parquet) whose tasks the agent "
                            "knows besides the demo tasks; repeatable")
    serve.add_argument("--seed", type=int, default=None,
                       help="sensitive: draw each answer (seeded), so repeats may differ")
    serve.add_argument("--request-log", metavar="FILE",
                       help="append a JSON line per task received (time, task id, sha256 of "
                            "its problem text): which tasks were asked, and how often")
    serve.add_argument("--exit-after", type=int, metavar="N",
                       help="stop serving after N answers, as an agent that dies mid-run "
                            "(to try the dead-agent rule)")
    serve.add_argument("--token-env", metavar="NAME",
                       help="answer 401 to any request (the card too) without the header "
                            "'Authorization: Bearer <token>', the token read from the "
                            "environment variable NAME (to try an agent's spec.auth)")
    _add_llm_flags(serve)
    serve.set_defaults(func=cmd_agent_serve)


def add_agent_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `agent serve` to a parser's subcommands; returns the `agent` parser."""
    agent = subparsers.add_parser("agent", help="run a reference A2A agent (oracle, noop, "
                                                "editor, mixed, sensitive) or the llm agent")
    _add_serve(agent.add_subparsers(dest="agent_command", required=True))
    return agent


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m proctor.agents serve …`: the same command without the rest of Proctor."""
    parser = argparse.ArgumentParser(prog="python -m proctor.agents", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_serve(parser.add_subparsers(dest="agent_command", required=True))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
