"""How soon the operator answers two events, on a real control plane of its own.

* an Evaluation deleted mid-run: from the API's DELETE (what `kubectl delete` sends) to the
  Evaluation gone (what `kubectl delete` waits for), with its first Jobs running. The
  operator adds no finalizer, so nothing of its own should hold the delete (target: under
  60 s, the --timeout tests/cluster/test_kubectl.py gives kubectl);
* a leader killed: two `proctor operator --leader-election` processes (the chart's
  Deployment with two replicas), the leader killed with SIGKILL (nothing releases the
  Lease), and the time from the kill to the standby holding the Lease, with the short
  durations of tests/cluster/test_operator.py (lease 6 s, renew deadline 4 s, retry 1 s;
  target: under 10 s, a lease duration and a renew deadline).

The control plane is benchmarks/kwok_plane.py's (scripts/cluster.sh with KWOK nodes: it
needs Go or a cached build of the cluster, not root); the demo's pods stay running on the
simulated nodes. Each figure is a median over `--rounds`.

    python benchmarks/operator_response.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import kwok_plane
from waits import until

from proctor.core.labels import LABEL_EVALUATION
from proctor.datasets import demo
from proctor.k8s.children.manifests import ANNOTATION_ITEM, LABEL_ITEM

NAMESPACE = "bench"
KWOK_NODES = 1
LEASE_SECONDS, RENEW_SECONDS, RETRY_SECONDS = 6, 4, 1
"""The election's durations, as tests/cluster/test_operator.py shortens them."""
GROUP = ("proctor.dev", "v1alpha1")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _operator(plane: kwok_plane.Plane, log: Path, *election: str,
              name: str = "op") -> subprocess.Popen:
    """`proctor operator` as its own process (so that SIGKILL can end it), as pod `name` of
    the chart's Deployment runs it."""
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig), "POD_NAME": name,
           "PROCTOR_RUNNER_IMAGE": "proctor-runner:bench"}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "proctor.cli.main", "operator", "--namespace", NAMESPACE,
             "--metrics-port", str(_free_port()), "--probe-port", str(_free_port()),
             *election], stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _evaluation(name: str) -> dict:
    return {"apiVersion": "/".join(GROUP), "kind": "Evaluation",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"dataset": {"name": "proctor-demo", "maxRows": -1},
                     "predictions": {"source": "gold"}, "maxConcurrentRows": 2}}


def _gone(custom: Any, name: str) -> bool:
    """Whether the Evaluation `name` is gone (a 404)."""
    from kubernetes import client

    try:
        custom.get_namespaced_custom_object(*GROUP, NAMESPACE, "evaluations", name)
    except client.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def delete_times(plane: kwok_plane.Plane, logs: Path, rounds: int) -> list[float]:
    """Seconds from an Evaluation's DELETE, its first two Jobs running, to it gone."""
    from kubernetes import client

    custom, batch = client.CustomObjectsApi(plane.api), client.BatchV1Api(plane.api)
    op = _operator(plane, logs / "operator.log")
    times = []
    try:
        for n in range(rounds):
            name = f"deleted-{n}"
            custom.create_namespaced_custom_object(*GROUP, NAMESPACE, "evaluations",
                                                   _evaluation(name))
            until(lambda name=name: len(batch.list_namespaced_job(
                NAMESPACE, label_selector=f"{LABEL_EVALUATION}={name}").items) >= 2,
                f"two Jobs of {name} (the operator's log: {logs / 'operator.log'})")
            sent = time.perf_counter()
            custom.delete_namespaced_custom_object(*GROUP, NAMESPACE, "evaluations", name,
                                                   propagation_policy="Background")
            until(lambda name=name: _gone(custom, name), f"{name} gone", 300)
            times.append(time.perf_counter() - sent)
    finally:
        _kill(op)
    return times


def takeover_times(plane: kwok_plane.Plane, logs: Path, rounds: int) -> list[float]:
    """Seconds from the leader's SIGKILL to the standby holding the Lease."""
    from kubernetes import client

    leases = client.CoordinationV1Api(plane.api)
    times = []
    for n in range(rounds):
        lease = f"proctor-leader-{n}"

        def holder(lease: str = lease) -> str | None:
            try:
                return leases.read_namespaced_lease(lease, NAMESPACE).spec.holder_identity
            except client.ApiException as exc:
                if exc.status == 404:
                    return None
                raise

        election = ["--leader-election", "--lease-namespace", NAMESPACE, "--lease-name",
                    lease, "--lease-duration", str(LEASE_SECONDS), "--renew-deadline",
                    str(RENEW_SECONDS), "--retry-period", str(RETRY_SECONDS)]
        leader = _operator(plane, logs / f"leader-{n}.log", *election, name="op-a")
        standby = None
        try:
            until(lambda: holder() == "op-a", "op-a to hold the Lease")
            standby = _operator(plane, logs / f"standby-{n}.log", *election, name="op-b")
            until(lambda n=n: "Waiting for the Lease" in (
                logs / f"standby-{n}.log").read_text(), "op-b to wait for the Lease")
            os.killpg(leader.pid, signal.SIGKILL)
            killed = time.perf_counter()
            until(lambda: holder() == "op-b", "op-b to take the Lease over", 60)
            times.append(time.perf_counter() - killed)
        finally:
            _kill(leader)
            if standby is not None:
                _kill(standby)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    durations = {row["instance_id"]: 3600.0 for row in demo.load_rows()}  # pods stay up
    with (tempfile.TemporaryDirectory(prefix="proctor-response-") as tmp,
          kwok_plane.kwok_plane(Path(tmp) / "cluster", KWOK_NODES) as plane):
        kwok_plane.install(plane, NAMESPACE,
                           kwok_plane.pod_stages(durations, ANNOTATION_ITEM, LABEL_ITEM))
        logs = Path(tmp) / "logs"
        logs.mkdir()
        deleted = delete_times(plane, logs, args.rounds)
        print(f"an Evaluation deleted mid-run (2 Jobs running): gone after median "
              f"{1000 * statistics.median(deleted):.0f} ms, max {1000 * max(deleted):.0f} ms "
              f"over {len(deleted)} (target: under 60 s)")
        taken = takeover_times(plane, logs, args.rounds)
        print(f"the leader killed (lease {LEASE_SECONDS} s, renew deadline {RENEW_SECONDS} s, "
              f"retry {RETRY_SECONDS} s): the standby holds the Lease after median "
              f"{statistics.median(taken):.1f} s, max {max(taken):.1f} s over {len(taken)} "
              f"(target: under {LEASE_SECONDS + RENEW_SECONDS} s)")


if __name__ == "__main__":
    main()
