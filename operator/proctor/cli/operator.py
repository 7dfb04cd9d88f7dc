"""`proctor operator`: the Kubernetes operator (kopf), alone or by leader election."""

from __future__ import annotations

import argparse
import math
import os
from typing import TYPE_CHECKING

from proctor.core import exits

if TYPE_CHECKING:
    from proctor.k8s.features.election.elected import Election


def add_parser(sub: argparse._SubParsersAction) -> None:
    op = sub.add_parser("operator", help="run the Kubernetes operator (kopf)")
    op.add_argument("--namespace", action="append", help="watch only this namespace "
                                                        "(repeatable; default: all)")
    op.add_argument("--metrics-port", type=int, default=9090, help="Prometheus metrics port")
    op.add_argument("--probe-port", type=int, default=8080,
                    help="liveness/readiness probes at /healthz")
    op.add_argument("--verbose", action="store_true")
    op.add_argument("--allow-local-endpoints", action="store_true",
                    help="accept agents at loopback or link-local addresses (a test cluster "
                         "whose pods share the host's network); refused otherwise")
    lead = op.add_argument_group("leader election (several replicas, one active)")
    lead.add_argument("--leader-election", action="store_true",
                      help="run the handlers only while holding a coordination.k8s.io Lease; "
                           "the others wait as ready standbys")
    lead.add_argument("--lease-name", default="proctor-leader", help="the Lease's name")
    lead.add_argument("--lease-namespace", help="the Lease's namespace (default: POD_NAMESPACE)")
    lead.add_argument("--lease-duration", type=_positive_seconds, default=15.0,
                      help="seconds a standby waits on an unrenewed Lease before taking over")
    lead.add_argument("--renew-deadline", type=_positive_seconds, default=10.0,
                      help="seconds without a renewal after which the leader exits "
                           "(below --lease-duration)")
    lead.add_argument("--retry-period", type=_positive_seconds, default=2.0,
                      help="seconds between renewals and between a standby's tries")
    op.set_defaults(func=cmd_operator)


def cmd_operator(args: argparse.Namespace) -> int:
    from prometheus_client import start_http_server

    from proctor.k8s.controller import check_settings, run

    check_settings(os.environ)  # before anything listens
    election = _election(args) if args.leader_election else None
    start_http_server(args.metrics_port)
    run(args.namespace or [], verbose=args.verbose, probe_port=args.probe_port,
        allow_local_endpoints=args.allow_local_endpoints, election=election)
    return 0


def _election(args: argparse.Namespace) -> Election:
    """The Lease `--leader-election` competes for; a missing namespace or durations out of
    order are bad input (exit 2), said before anything listens."""
    import socket
    import uuid

    from proctor.k8s.features.election.elected import Election
    from proctor.k8s.features.election.leader import Timing

    namespace = args.lease_namespace or os.environ.get("POD_NAMESPACE")
    if not namespace:
        raise exits.BadInput("--leader-election needs the Lease's namespace: "
                             "--lease-namespace or POD_NAMESPACE")
    timing = Timing(lease_seconds=args.lease_duration,
                    renew_deadline_seconds=args.renew_deadline, retry_seconds=args.retry_period)
    try:
        timing.check()
    except ValueError as exc:
        raise exits.BadInput(str(exc)) from None
    # POD_NAME (the chart's): a restarted container takes its own Lease back at once.
    # Elsewhere a random suffix: two processes on one host are two candidates.
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    return Election(namespace, args.lease_name, identity, timing)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} is not above 0")
    return value
