"""Options several commands share: declared once, with their argument types, and read
back into what the engines take (the -f manifests, the sandbox, the store, the agent's
token)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path

from proctor.core.exits import UsageError


def load_evaluation(files: Sequence[str], agent_needed: bool = True):
    """The one Evaluation in the files, and every AgentUnderTest beside it."""
    from proctor.core.spec import AgentUnderTest, Evaluation
    from proctor.formats.manifest import load_manifests

    docs = [doc for f in files for doc in load_manifests(Path(f), agent_needed=agent_needed)]
    evaluations = [d for d in docs if isinstance(d, Evaluation)]
    if len(evaluations) != 1:
        raise UsageError(f"expected exactly one Evaluation in {', '.join(files)}, "
                         f"found {len(evaluations)}")
    return evaluations[0], [d for d in docs if isinstance(d, AgentUnderTest)]


def sandbox_options(args: argparse.Namespace):
    from proctor.sandboxes.choose import SandboxOptions

    return SandboxOptions(mode=args.sandbox, pull=args.pull, network=args.network)


def store_client(args: argparse.Namespace):
    from proctor.store import s3

    return s3.client(args.s3_endpoint)


def agent_token(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """The token of an agent whose spec.auth names a Secret, on one machine: the file's
    first line (--agent-token-file), else the environment's PROCTOR_AGENT_TOKEN."""
    from proctor.local.engine import AGENT_TOKEN_ENV

    if not args.agent_token_file:
        return (env.get(AGENT_TOKEN_ENV) or "").strip() or None
    try:
        lines = Path(args.agent_token_file).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--agent-token-file {args.agent_token_file}: cannot be read "
                         f"({getattr(exc, 'strerror', None) or type(exc).__name__})") from None
    if not lines or not lines[0].strip():
        raise UsageError(f"--agent-token-file {args.agent_token_file}: its first line is "
                         f"empty (it should hold the token)")
    return lines[0].strip()


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is below 0")
    return value


def add_agent_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--retry-errors", action="store_true",
                        help="on resume, also run again items that ended in agent or timeout "
                             "errors, asking the agent again (infra and sandbox errors are "
                             "always run again, with the patch already obtained)")
    parser.add_argument("--agent-wait", type=seconds, default=60, metavar="SECONDS",
                        help="after 3 requests in a row fail to reach the agent, no new task "
                             "is sent and its card is probed this long: if it answers the run "
                             "goes on, else it stops with exit 3 (default 60)")
    parser.add_argument("--agent-token-file", metavar="FILE",
                        help="the token of an agent whose AgentUnderTest has spec.auth (on a "
                             "cluster, its Secret's value): the file's first line; without "
                             "it, $PROCTOR_AGENT_TOKEN. Sent in spec.auth's header, never "
                             "written down")


def add_sandbox_options(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument("--sandbox", choices=("auto", "docker", "process"), default=default,
                        help="where each row's tests run: docker (the row's image), process "
                             "(portable rows, in a checkout), auto (docker when a daemon "
                             f"answers and the image is here or may be pulled; default {default})")
    parser.add_argument("--pull", choices=("missing", "never"), default="missing",
                        help="pull a row's missing image (once, with progress), or never")
    parser.add_argument("--network", help="Docker network of the test containers: none, host, "
                                          "or a network's name (default: the daemon's default)")


def add_s3_endpoint(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--s3-endpoint", metavar="URL",
                        help="the S3-compatible store's URL (default: a cluster "
                             "Evaluation's spec.results.store.endpoint, else "
                             "AWS_ENDPOINT_URL, else AWS S3); requests are path-style")
