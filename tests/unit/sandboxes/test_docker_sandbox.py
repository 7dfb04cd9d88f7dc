"""The Docker sandbox for real: a daemon, the demo images built offline, real containers.

Skipped where no daemon answers, unless PROCTOR_REQUIRE_DOCKER=1 (CI sets it, and
scripts/test.sh starts a daemon when it runs as root), which turns the skip into a
failure. The images are built once and kept (`proctor images build-demo`).
"""

from __future__ import annotations

import http.server
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from proctor.cli.demo import run_demo
from proctor.core.labels import LABEL_EVALUATION, LABEL_OWNER
from proctor.core.model import ErrorKind, Instance, Outcome, WorkItem
from proctor.datasets import demo
from proctor.formats.manifest import parse_resource
from proctor.local.engine import run_evaluation
from proctor.results import ResultsFolder
from proctor.runner.workdir import WorkDir, write_patch, write_task, write_test_step
from proctor.sandboxes import docker as ds
from proctor.sandboxes.choose import SandboxOptions
from support.docker_daemon import docker_unavailable
from support.ports import free_port

pytestmark = [pytest.mark.docker, pytest.mark.slow]
DOCKER = SandboxOptions(mode="docker", pull="never")


def _containers(client, evaluation: str) -> list:
    return client.containers.list(all=True, filters={"label": f"{LABEL_EVALUATION}="
                                                              f"{evaluation}"})


def _evaluation(name: str, source: str, **spec):
    return parse_resource({"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                           "metadata": {"name": name},
                           "spec": {"dataset": {"name": demo.DATASET_NAME, "maxRows": -1},
                                    "predictions": {"source": source},
                                    "maxConcurrentRows": 2, "timeouts": {"testSeconds": 120},
                                    **spec}})


def _outcomes(folder: Path) -> dict[str, Outcome]:
    return {r.instance_id: r.outcome for r in ResultsFolder(folder).load()}


def test_gold_resolves_and_empty_is_no_op_in_the_task_images(docker_client, tmp_path):
    for source, expected in (("gold", Outcome.RESOLVED), ("empty", Outcome.NO_OP)):
        name = f"docker-{source}-{uuid.uuid4().hex[:6]}"
        run_evaluation(_evaluation(name, source), tmp_path / source, progress=False,
                       sandbox=DOCKER)
        outcomes = _outcomes(tmp_path / source)
        assert len(outcomes) == 10 and set(outcomes.values()) == {expected}, outcomes
        assert _containers(docker_client, name) == []
    # The tests ran in the image's /testbed, not in a checkout on this machine.
    log = next((tmp_path / "gold" / "items").glob("*/original/0/test_output.txt"))
    assert "+ cd /testbed" in log.read_text()


def test_the_demo_has_the_same_outcomes_in_docker_as_in_the_process_sandbox(
        docker_client, tmp_path):
    in_docker = run_demo(tmp_path / "docker", kinds=["mixed"], progress=False, sandbox=DOCKER)
    in_process = run_demo(tmp_path / "process", kinds=["mixed"], progress=False)
    assert _outcomes(tmp_path / "docker" / "mixed") == _outcomes(tmp_path / "process" / "mixed")
    assert in_docker["mixed"].results == in_process["mixed"].results


def _work(tmp_path: Path, eval_script: str, limit: int = 120) -> tuple[WorkDir, Instance]:
    """A work folder of the first demo task, gold patch, with another eval script."""
    instance = Instance.model_validate(demo.load_rows()[0])
    work = WorkDir(tmp_path / "work")
    write_task(work, instance, WorkItem(id="0" * 32, instance_id=instance.instance_id))
    write_patch(work, instance.patch)
    write_test_step(work, instance, limit)
    (work / "eval.sh").write_text(eval_script)
    return work, instance


def test_past_the_time_limit_the_container_is_killed(docker_client, tmp_path):
    # run.sh's own watchdog waits 600 s: only the container's kill can end this.
    work, instance = _work(tmp_path, "sleep 600\n", limit=600)
    label = f"timeout-{uuid.uuid4().hex[:6]}"
    sandbox = ds.DockerSandbox(docker_client, pull="never", grace_seconds=1,
                               labels={LABEL_EVALUATION: label})
    run = sandbox.run_test_step(work, instance, time_limit=2)
    # The script sleeps 600 s: this error (not a result after the sleep) is the kill.
    assert "did not finish within 3 s; its container was killed" in run.error
    assert _containers(docker_client, label) == []


def test_ctrl_c_leaves_no_container(docker_client, tmp_path):
    rows = demo.load_rows()[:2]
    for row in rows:
        row["eval_script"] = "sleep 600\n"
    data = tmp_path / "slow.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    name = f"ctrl-c-{uuid.uuid4().hex[:6]}"
    manifest = tmp_path / "ev.yaml"
    manifest.write_text(json.dumps({
        "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation", "metadata": {"name": name},
        "spec": {"dataset": {"name": str(data), "maxRows": -1}, "maxConcurrentRows": 2,
                 "predictions": {"source": "gold"}}}))
    proc = subprocess.Popen([sys.executable, "-m", "proctor.cli.main", "run", "-f", str(manifest),
                             "--output-dir", str(tmp_path / "out"), "--sandbox", "docker",
                             "--pull", "never", "-q"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while len(_containers(docker_client, name)) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.2)
        assert len(_containers(docker_client, name)) == 2
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        proc.kill()
    assert _containers(docker_client, name) == []
    assert "interrupted" in proc.stderr.read()


def test_containers_left_by_a_killed_run_go_at_the_next_run(docker_client, tmp_path):
    proc = subprocess.Popen(["true"])
    proc.wait()  # its pid now names no process
    owner = f"{socket.gethostname()}:{proc.pid}"
    left = docker_client.containers.create("proctor/demo-datekit:0.4", command=["true"],
                                           labels={LABEL_OWNER: owner})
    run_evaluation(_evaluation("docker-orphans", "gold",
                               dataset={"name": demo.DATASET_NAME, "maxRows": 1}),
                   tmp_path, progress=False, sandbox=DOCKER)
    assert docker_client.containers.list(all=True, filters={"id": left.id}) == []


def test_a_missing_image_with_pull_never_names_it(docker_client, tmp_path):
    evaluation = _evaluation("docker-missing", "gold",
                             dataset={"name": demo.DATASET_NAME, "maxRows": 1},
                             runner={"instanceImageRegistry": "127.0.0.1:9/nowhere"})
    run_evaluation(evaluation, tmp_path, progress=False, sandbox=DOCKER)
    [result] = ResultsFolder(tmp_path).load()
    assert (result.outcome, result.error_kind) == (Outcome.ERROR, ErrorKind.INFRA)
    assert result.error_message.startswith(
        "image 127.0.0.1:9/nowhere/proctor/demo-datekit:0.4 is not on this machine and "
        "--pull never forbids pulling it")


@pytest.fixture
def registry(docker_client, tmp_path):
    """Debian's docker-registry on a free loopback port (the daemon trusts 127.0.0.0/8)."""
    binary = shutil.which("docker-registry")
    if not binary:
        docker_unavailable("docker-registry is not installed")
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(json.dumps({
        "version": 0.1, "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(tmp_path / "blobs")}},
        "http": {"addr": f"127.0.0.1:{port}"}}))
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _wait_for_port(port: int) -> None:
    import socket

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port}")


def test_a_missing_image_is_pulled_once_with_progress_from_the_registry(
        docker_client, registry, tmp_path, capfd):
    image = "proctor/demo-datekit:0.5"  # the image of demo tasks datekit-2 and datekit-3
    mirrored = f"{registry}/{image}"
    docker_client.images.get(image).tag(mirrored)
    for event in docker_client.api.push(mirrored, stream=True, decode=True):
        assert "error" not in event, event
    docker_client.images.remove(mirrored)
    evaluation = _evaluation("docker-pull", "gold", runner={"instanceImageRegistry": registry},
                             dataset={"name": demo.DATASET_NAME, "maxRows": -1,
                                      "instanceIds": ["proctor-demo__datekit-2",
                                                      "proctor-demo__datekit-3"]})
    try:
        run_evaluation(evaluation, tmp_path / "out", progress=False,
                       sandbox=SandboxOptions(mode="docker", pull="missing"))
        assert set(_outcomes(tmp_path / "out").values()) == {Outcome.RESOLVED}
        shown = capfd.readouterr().err
        assert shown.count(f"Pulling {mirrored} ...") == 1
        assert f"Downloaded newer image for {mirrored}" in shown
    finally:
        docker_client.images.remove(mirrored)


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"hello from the test")

    def log_message(self, *args):
        pass


_FETCH = """python3 - <<'EOF'
import urllib.request
try:
    print(urllib.request.urlopen("http://{host}:{port}/", timeout=3).read().decode())
except OSError as exc:
    print("unreachable:", exc)
EOF
"""


def test_the_network_setting_takes_effect(docker_client, tmp_path):
    # The daemon here runs with --bridge=none, so the default network has no
    # interface; a user-defined bridge network is one it allows, with the host at
    # its gateway address.
    network = docker_client.networks.create(f"proctor-test-{uuid.uuid4().hex[:6]}",
                                            driver="bridge")
    try:
        network.reload()
        gateway = network.attrs["IPAM"]["Config"][0]["Gateway"]
        server = http.server.ThreadingHTTPServer((gateway, 0), _Hello)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        fetch = _FETCH.format(host=gateway, port=server.server_address[1])
        seen = {}
        for setting in (network.name, "none"):
            work, instance = _work(tmp_path / setting, fetch)
            run = ds.DockerSandbox(docker_client, pull="never", network=setting
                                   ).run_test_step(work, instance, 60)
            assert run.error is None and run.network_isolated == (setting == "none")
            seen[setting] = (work / "test_output.txt").read_text().strip()
        server.shutdown()
    finally:
        network.remove()
    assert seen[network.name] == "hello from the test"
    assert seen["none"].startswith("unreachable:")



def test_cpu_and_memory_limits_come_from_runner_resources(docker_client, tmp_path):
    # cgroup v2 names them memory.max and cpu.max; v1 memory.limit_in_bytes, cfs_quota_us.
    work, instance = _work(tmp_path, "cd /sys/fs/cgroup\n"
                           "cat memory.max 2>/dev/null || cat memory/memory.limit_in_bytes\n"
                           "cat cpu.max 2>/dev/null || cat cpu/cpu.cfs_quota_us\n")
    run = ds.DockerSandbox(docker_client, pull="never", resources={
        "requests": {"cpu": "250m"}, "limits": {"cpu": "1500m", "memory": "512Mi"}}
    ).run_test_step(work, instance, 60)
    assert run.error is None
    memory, cpu = (work / "test_output.txt").read_text().split("\n")[:2]
    assert memory == str(512 * 2**20)
    assert cpu.split()[0] == "150000"  # 1.5 CPUs of the default 100 ms period


def test_repo_dir_comes_from_the_image_when_the_repository_cannot_be_cloned(
        docker_client, tmp_path, monkeypatch):
    from proctor.sandboxes import process as sandbox

    monkeypatch.setattr(sandbox, "repo_source", lambda instance: str(tmp_path / "nowhere"))
    row = demo.load_rows()[3]
    row["repo"] = "acme/datekit-offline"  # a key of its own in the checkout cache
    instance = Instance.model_validate(row)
    label = f"checkout-{uuid.uuid4().hex[:6]}"
    ds.DockerSandbox(docker_client, pull="never", labels={LABEL_EVALUATION: label}
                     ).checkout(instance, tmp_path / "repo")

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path / "repo", check=True,
                              capture_output=True, text=True).stdout.strip()

    assert git("rev-parse", "HEAD") == instance.base_commit
    assert git("status", "--porcelain") == ""
    assert git("for-each-ref") == "" and git("remote") == ""
    assert (tmp_path / "repo" / "datekit").is_dir()
    assert _containers(docker_client, label) == []


def test_a_docker_run_records_its_images_runtime_and_limits(docker_client, tmp_path):
    name = f"docker-provenance-{uuid.uuid4().hex[:6]}"
    evaluation = _evaluation(name, "gold", runner={
        "resources": {"limits": {"cpu": "1500m", "memory": "512Mi"}}})
    sandbox = run_evaluation(evaluation, tmp_path, progress=False,
                             sandbox=DOCKER).provenance.sandbox
    assert sandbox.kinds == ("docker",)
    assert sandbox.runtime == docker_client.info()["DefaultRuntime"]
    assert sandbox.limits_applied == f"docker: 1.5 CPUs, {512 * 2**20} bytes of memory"
    images = {ds.DockerSandbox(docker_client).image_of(Instance.model_validate(row))
              for row in demo.load_rows()}
    assert set(sandbox.images) == images
    for image, digest in sandbox.images.items():
        attrs = docker_client.images.get(image).attrs
        assert digest in {d.rpartition("@")[2] for d in attrs.get("RepoDigests") or []} | {
            attrs["Id"]}
