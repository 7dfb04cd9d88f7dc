"""Serve the test cluster until stopped (Ctrl-C or SIGTERM): ``python -m cluster`` with tests/
on PYTHONPATH. Writes a kubeconfig for it (kubectl, the operator) and says where it listens.

    PYTHONPATH=tests python -m cluster --kubeconfig out/kubeconfig [--namespace evals] [--no-crds]
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from cluster.emulator import Cluster, write_kubeconfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster", description=__doc__.split(
        "\n")[0])
    parser.add_argument("--kubeconfig", required=True, type=Path,
                        help="where to write the kubeconfig of the cluster")
    parser.add_argument("--namespace", action="append",
                        help="a namespace to create (repeatable; default: default)")
    parser.add_argument("--no-crds", action="store_true",
                        help="start without Proctor's CRDs (apply them with kubectl)")
    parser.add_argument("--max-pods", type=int, default=2,
                        help="pods that run at once (each runs real processes)")
    args = parser.parse_args(argv)
    namespaces = args.namespace or ["default"]
    stopped = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopped.set())
    cluster = Cluster(namespaces=namespaces, crds=not args.no_crds, max_pods=args.max_pods)
    cluster.start()
    try:
        args.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        write_kubeconfig(args.kubeconfig, cluster.url, namespaces[0])
        print(f"The test cluster listens on {cluster.url}; kubeconfig: {args.kubeconfig}",
              flush=True)
        while not stopped.wait(0.5):
            pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
