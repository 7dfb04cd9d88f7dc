"""`proctor green serve`: Proctor as an Agentbeats green agent, over A2A."""

from __future__ import annotations

import argparse
from pathlib import Path

from proctor.cli.options import add_sandbox_options, sandbox_options


def add_parser(sub: argparse._SubParsersAction) -> None:
    green = sub.add_parser("green", help="Proctor as an Agentbeats green agent")
    green_sub = green.add_subparsers(dest="green_command", required=True)
    gserve = green_sub.add_parser("serve", help="serve the green agent over A2A until stopped: "
                                                "each assessment request runs on this "
                                                "machine's engine")
    gserve.add_argument("--host", default="0.0.0.0", help="address to listen on")
    gserve.add_argument("--port", type=int, default=9009, help="port to listen on")
    gserve.add_argument("--card-url", default=None,
                        help="the URL the agent card names (default http://HOST:PORT/)")
    gserve.add_argument("--output-dir", default="proctor-results/green",
                        help="each assessment's results folder goes in <output-dir>/<task id>/")
    add_sandbox_options(gserve, default="auto")
    gserve.set_defaults(func=cmd_green_serve)


def cmd_green_serve(args: argparse.Namespace) -> int:
    import logging

    from proctor.green.server import serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    serve(args.host, args.port, args.card_url, Path(args.output_dir), sandbox_options(args))
    return 0
