"""The chart installed for real: scripts/cluster-demo.sh end to end on a real Kubernetes.

scripts/cluster.sh starts a one-node cluster built from Kubernetes' own sources; helm
installs charts/proctor into it, the operator runs in-cluster from the runner image under
the chart's ServiceAccount and ClusterRole (RBAC enforced by the API server), the demo
Evaluation runs against a reference agent served in-cluster, and the verdicts `proctor
results pull` gives must equal those of `proctor run` on this machine.

It needs root, a Docker daemon (the images are built here) and Go or a cached build of the
cluster. Skipped where any is missing, unless PROCTOR_REQUIRE_CLUSTER=1, which makes their
absence a failure. A few minutes with the images and the cluster's binaries cached.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "scripts/cluster.sh runs only as root"
    if not shutil.which("docker"):
        return "no docker client to build the images with"
    if subprocess.run(["docker", "version"], capture_output=True).returncode != 0:
        return "no Docker daemon answers (scripts/docker-daemon.sh starts one)"
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "proctor-cluster"
    if not shutil.which("go") and not any(cache.glob("*/complete")):
        return "neither Go nor a cached build of the cluster's binaries"
    if not shutil.which("mmdebstrap"):
        return "mmdebstrap is missing, so the images cannot be built"
    return None


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    why = _missing()
    if why is not None:
        if os.environ.get("PROCTOR_REQUIRE_CLUSTER") == "1":
            pytest.fail(f"PROCTOR_REQUIRE_CLUSTER=1 but {why}")
        pytest.skip(why)
    out = tmp_path_factory.mktemp("cluster-demo")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    done = subprocess.run(["bash", "scripts/cluster-demo.sh", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    print(done.stderr[-6000:])
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def _verdicts(folder: Path) -> dict[str, tuple[str, str | None]]:
    rows = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()
            if line]
    return {r["item_id"]: (r["outcome"], r.get("error_kind")) for r in rows}


def test_demo_evaluation_succeeds_in_cluster_with_the_verdicts_of_proctor_run(demo):
    cluster, local = _verdicts(demo / "cluster"), _verdicts(demo / "local")
    assert len(cluster) == 10
    assert cluster == local
    # The mixed agent gives more than one outcome: the comparison is not all-resolved.
    assert len({outcome for outcome, _ in cluster.values()}) > 1


def test_timings_are_recorded(demo):
    phases = dict(line.split() for line in (demo / "timings.txt").read_text().splitlines())
    for phase in ("build-runner-image", "helm-install-to-operator-ready",
                  "evaluation-to-succeeded"):
        assert float(phases[phase]) >= 0
