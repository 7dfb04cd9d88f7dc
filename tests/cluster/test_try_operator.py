"""scripts/try-operator.sh reports a failure as one: an operator that dies at its start on the
real cluster makes it exit non-zero, saying so, and never print success. (Its way to success
is tests/cluster/test_real_cluster.py's: scripts/cluster-demo.sh runs it;
tests/cluster/test_kubectl.py installs with its --install-only.)"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import real_cluster
from support.paths import ROOT

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture
def names(cluster_kubeconfig: Path) -> Iterator[real_cluster.Install]:
    named = real_cluster.settings(cluster_kubeconfig, "try-dies")
    try:
        yield named
    finally:
        real_cluster.uninstall(named)


def test_an_operator_that_dies_at_start_is_a_failure(names: real_cluster.Install,
                                                     tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | names.env
    # Not a number: the operator exits as it reads its settings. (The chart's schema
    # refuses it first; skipped, to reach the operator's own check.)
    done = subprocess.run(["bash", str(ROOT / "scripts" / "try-operator.sh"), str(tmp_path),
                           "--skip-schema-validation",
                           "--set-string", "operator.reconcileSeconds=soon"], env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode != 0, done.stderr[-3000:]
    failed = [line for line in done.stderr.splitlines() if "FAILED" in line]
    assert failed and failed[0].startswith("try-operator: FAILED: the operator's container"), (
        done.stderr[-3000:])
    assert "succeeded" not in done.stderr and "KUBECONFIG=" not in done.stdout
    logs = [tmp_path / name for name in ("operator.log", "operator.previous.log")]
    assert any("soon" in log.read_text() for log in logs if log.exists())
