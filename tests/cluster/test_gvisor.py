"""gVisor: runsc, built from its Go module, runs a demo item's test step in the demo's
task image, and the item grades as it does under runc.

runsc is built with `go install gvisor.dev/gvisor/runsc@RUNSC` (about a minute and a half
on a quiet 2-core machine; cached in Go's module and build caches). The test step runs
under `runsc do` in the task image's root filesystem with the pod's work folder mounted,
exactly as the pod's test container runs it (manifests.TEST_SCRIPT), and the grade step
grades the folder. A pod under the cluster's `gvisor` RuntimeClass (scripts/cluster.sh
registers runsc with the node's containerd) is tests/cluster/test_cluster_gvisor.py's.

Opt-in with the real-cluster tests (PROCTOR_CLUSTER_TESTS=1; PROCTOR_REQUIRE_CLUSTER=1 makes
a missing requirement a failure): it needs root, Go and Docker.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from proctor.formats.manifest import parse_resource
from proctor.k8s.children import manifests as m
from proctor.prepare import load_selection, plan_items
from proctor.runner.testlog import COMPLETE
from proctor.runner.workdir import TEST_STEP_INPUTS

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
RUNSC = "v0.0.0-20260905035102-160fafc42237"
"""The gvisor.dev/gvisor version built (its `go` branch, as the Go module proxy serves it)."""


def _missing() -> str | None:
    if "1" not in (os.environ.get("PROCTOR_CLUSTER_TESTS"),
                   os.environ.get("PROCTOR_REQUIRE_CLUSTER")):
        return "the gVisor test is opt-in: PROCTOR_CLUSTER_TESTS=1 runs it"
    if os.geteuid() != 0:
        return "runsc runs sandboxes as root"
    if not shutil.which("go"):
        return "no Go toolchain to build runsc with"
    if not shutil.which("docker") or subprocess.run(["docker", "version"],
                                                    capture_output=True).returncode != 0:
        return "no Docker daemon for the demo's task image"
    return None


@pytest.fixture(scope="module")
def runsc(tmp_path_factory) -> Path:
    why = _missing()
    if why is not None:
        if os.environ.get("PROCTOR_REQUIRE_CLUSTER") == "1":
            pytest.fail(f"PROCTOR_REQUIRE_CLUSTER=1 but {why}")
        pytest.skip(why)
    gobin = tmp_path_factory.mktemp("gobin")
    done = subprocess.run(["go", "install", f"gvisor.dev/gvisor/runsc@{RUNSC}"],
                          env={**os.environ, "GOBIN": str(gobin), "CGO_ENABLED": "0",
                               "GOFLAGS": "-mod=mod"},
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return gobin / "runsc"


def test_a_demo_items_test_step_runs_under_gvisor(runsc: Path, tmp_path: Path) -> None:
    evaluation = parse_resource({
        "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
        "metadata": {"name": "gvisor", "namespace": "default"},
        "spec": {"predictions": {"source": "gold"},
                 "dataset": {"name": "proctor-demo", "maxRows": 1}}})
    selection = load_selection(evaluation)
    item = plan_items(evaluation, selection)[0]
    instance = selection.by_id[item.instance_id]
    task, work, rootfs = tmp_path / "task", tmp_path / "work", tmp_path / "rootfs"
    for folder in (task, work, rootfs):
        folder.mkdir()
    data = m.task_data(evaluation, instance, {})  # what the pod's /task holds
    (task / "instance.json").write_text(data["instance.json"])
    (task / "prompt.txt").write_text(data[m.prompt_key(item.variant_id)])
    (task / "patch.diff").write_text(data["patch.diff"])
    (task / "item.json").write_text(item.model_dump_json())
    proctor = str(Path(sys.executable).parent / "proctor")
    subprocess.run([proctor, "runner", "solve", "--work-dir", str(work), "--task-dir",
                    str(task), "--patch-file", str(task / "patch.diff")], check=True,
                   capture_output=True)
    subprocess.run([proctor, "images", "build-demo"], check=True, capture_output=True)
    container = subprocess.run(["docker", "create", instance.image, "true"], check=True,
                               capture_output=True, text=True).stdout.strip()
    try:
        subprocess.run(f"docker export {container} | tar -C {rootfs} -xf -", shell=True,
                       check=True)
    finally:
        subprocess.run(["docker", "rm", container], capture_output=True)
    kernel = subprocess.run([str(runsc), "--network=none", "do", "-force-overlay=false",
                             "-root", str(rootfs), "--", "uname", "-r"],
                            capture_output=True, text=True, timeout=120)
    assert kernel.stdout.strip().endswith("gvisor"), kernel.stderr  # not the host's kernel
    test = tmp_path / "test"
    test.mkdir()
    # The pod's test step, with its two volumes; the log goes to a plain file of the test
    # volume here (in the pod: the test-log step's pipe, tests/unit/runner/test_test_log.py).
    log = f"{m.TEST_DIR}/test_output.txt"
    step = subprocess.run([str(runsc), "--network=none", "do", "-force-overlay=false",
                           "-root", str(rootfs), "-volume", f"{work}:{m.WORK_DIR}",
                           "-volume", f"{test}:{m.TEST_DIR}", "-cwd", "/",
                           "--", "/usr/bin/env", f"TESTBED={m.TESTBED}",
                           f"TEST_DIR={m.TEST_DIR}", f"PROCTOR_TEST_LOG={log}", "bash", "-c",
                           m.TEST_SCRIPT, "test", m.WORK_DIR, *TEST_STEP_INPUTS],
                          capture_output=True, text=True, timeout=600)
    assert step.returncode == 0, step.stderr[-3000:]
    assert ">>>>> End Test Output" in (test / "test_output.txt").read_text()
    (test / COMPLETE).write_text("")  # what the test-log step writes when its pipe closes
    subprocess.run([proctor, "runner", "grade", "--work-dir", str(work), "--test-dir",
                    str(test), "--test-log", str(test / "test_output.txt")], check=True,
                   capture_output=True)
    result = json.loads((work / "result.json").read_text())
    assert (result["outcome"], result.get("error_kind")) == ("resolved", None)
