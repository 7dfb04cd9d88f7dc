"""The Docker sandbox's logic against a fake Docker SDK client (runs without a daemon).

The same code runs against a real daemon in test_docker_sandbox.py; here each
decision (pull or not, kill on time out, always remove, what goes in and out) is
checked where Docker is absent.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import tarfile
import threading
import time

import docker
import pytest
import requests

from proctor.core.exits import Interrupted
from proctor.core.labels import LABEL_EVALUATION, LABEL_ITEM, LABEL_OWNER
from proctor.core.model import ErrorKind, Instance, Outcome
from proctor.datasets import demo
from proctor.formats.manifest import parse_resource
from proctor.runner.grade import grade_work_dir
from proctor.sandboxes import docker as ds
from proctor.sandboxes.choose import SandboxOptions, assign, choose
from proctor.sandboxes.process import GRACE_SECONDS
from support.calc_task import GOLD, make_instance, prepare_work


class FakeContainer:
    def __init__(self, client: FakeClient, kwargs: dict):
        self.client, self.kwargs = client, kwargs
        self.labels = kwargs.get("labels", {})
        self.attrs = {"Labels": self.labels}  # as a sparse list's entries carry them
        self.archive = b""
        self.removed = self.killed = self.started = False

    def put_archive(self, path: str, data: bytes) -> None:
        self.archive = data

    def start(self) -> None:
        self.started = True

    def wait(self, timeout: float) -> dict:
        self.client.waited_with = timeout
        while self.client.block and not self.removed:  # runs until killed and removed
            time.sleep(0.01)
        if self.removed:
            return {"StatusCode": 137}
        if self.client.hang:
            raise requests.exceptions.ReadTimeout("read timed out")
        return {"StatusCode": self.client.exit_code}

    def kill(self) -> None:
        self.killed = True

    def remove(self, force: bool = False) -> None:
        if self.removed:
            raise docker.errors.NotFound("gone")
        self.removed = True

    def logs(self, stdout: bool, stderr: bool) -> bytes:
        return b"run.sh said this\n"

    def get_archive(self, path: str):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, text in self.client.outputs.items():
                info = tarfile.TarInfo(name)
                info.size = len(text)
                tar.addfile(info, io.BytesIO(text.encode()))
        data = buffer.getvalue()
        return iter([data[:700], data[700:]]), {}


class FakeClient:
    """The parts of docker.DockerClient the sandbox uses."""

    def __init__(self, images: dict[str, list[str]] | None = None):
        self.images_here = dict(images or {})
        self.pulls: list[tuple[str, str]] = []
        self.created: list[FakeContainer] = []
        self.hang, self.exit_code, self.waited_with = False, 0, None
        self.block = False
        self.pull_error: str | None = None
        self.outputs = {"proctor/apply_method": "git apply -v\n",
                        "proctor/test_output.txt": "log\n",
                        "proctor/sub/deep.txt": "not a top-level file\n",
                        "proctor/.hidden": "skipped\n"}
        self.images, self.containers, self.api = self, self, self

    # images.get
    def get(self, name: str):
        if name not in self.images_here:
            raise docker.errors.ImageNotFound(name)
        return type("Image", (), {"attrs": {"Config": {"Env": self.images_here[name]}}})()

    # api.pull
    def pull(self, repository: str, tag: str, stream: bool, decode: bool):
        self.pulls.append((repository, tag))
        if self.pull_error:
            yield {"error": self.pull_error}
            return
        yield {"status": "Pulling from x", "id": tag}
        for current in (0, 2**20, 3 * 2**20):
            yield {"status": "Downloading", "id": "abc123",
                   "progressDetail": {"current": current, "total": 3 * 2**20}}
        yield {"status": "Pull complete", "id": "abc123"}
        yield {"status": f"Status: Downloaded newer image for {repository}:{tag}"}
        self.images_here[f"{repository}:{tag}"] = []

    # containers.list (what remove_orphans looks at)
    def list(self, all: bool = False, filters: dict | None = None, sparse: bool = False
             ) -> list:
        return [c for c in self.created if not c.removed]

    # containers.create
    def create(self, image: str, **kwargs) -> FakeContainer:
        container = FakeContainer(self, {"image": image, **kwargs})
        self.created.append(container)
        return container


@pytest.fixture
def work(tmp_path, calc_task):
    return prepare_work(tmp_path, calc_task, GOLD)


def _sandbox(client: FakeClient, **kw) -> ds.DockerSandbox:
    return ds.DockerSandbox(client, progress=io.StringIO(), **kw)


def test_the_test_step_runs_in_a_new_container_that_is_removed(work, calc_task):
    client = FakeClient({"acme/calc:1": ["PATH=/bin"]})
    run = _sandbox(client, network="none", labels={LABEL_EVALUATION: "ev"},
                   resources={"limits": {"cpu": "500m", "memory": "2Gi"}}
                   ).run_test_step(work, calc_task, 60)
    assert run.error is None and run.network_isolated
    [container] = client.created
    assert container.started and container.removed and not container.killed
    kw = container.kwargs
    assert kw["image"] == "acme/calc:1" and kw["command"] == ["bash", "/proctor/run.sh"]
    # TESTBED: the image does not set it; the test log goes to the container's stdout.
    assert kw["environment"] == {"TESTBED": "/testbed", "PROCTOR_TEST_LOG": "/dev/stdout"}
    assert kw["labels"] == {LABEL_EVALUATION: "ev", LABEL_ITEM: "acme__calc-1",
                            LABEL_OWNER: f"{socket.gethostname()}:{os.getpid()}"}
    assert kw["network_mode"] == "none"
    assert kw["nano_cpus"] == 500_000_000 and kw["mem_limit"] == 2 * 2**30
    assert client.waited_with == 60 + GRACE_SECONDS
    with tarfile.open(fileobj=io.BytesIO(container.archive)) as tar:
        names = tar.getnames()
    assert {"proctor", "proctor/run.sh", "proctor/eval.sh", "proctor/patch.diff"} <= set(names)
    # Only the top-level files come back; the run's output is kept as run.log.
    assert (work / "apply_method").read_text() == "git apply -v\n"
    assert (work / "run.log").read_text() == "run.sh said this\n"
    assert not (work / "deep.txt").exists() and not (work / ".hidden").exists()


def test_an_image_that_sets_testbed_keeps_it(work, calc_task):
    client = FakeClient({"acme/calc:1": ["TESTBED=/src"]})
    _sandbox(client).run_test_step(work, calc_task, 60)
    assert client.created[0].kwargs["environment"] == {"PROCTOR_TEST_LOG": "/dev/stdout"}
    assert "network_mode" not in client.created[0].kwargs  # the daemon's default network


def test_past_the_limit_the_container_is_killed_and_removed(work, calc_task):
    client = FakeClient({"acme/calc:1": []})
    client.hang = True
    run = _sandbox(client, grace_seconds=5).run_test_step(work, calc_task, 10)
    [container] = client.created
    assert container.killed and container.removed
    assert "did not finish within 15 s" in run.error and "killed" in run.error
    assert "killed" in (work / "sandbox_error").read_text()


def test_a_failing_test_step_reports_its_exit_and_still_removes(work, calc_task):
    client = FakeClient({"acme/calc:1": []})
    client.exit_code = 3
    run = _sandbox(client).run_test_step(work, calc_task, 60)
    assert run.error.startswith("the test step exited 3: run.sh said this")
    assert client.created[0].removed


def test_missing_image_with_pull_never_stops_the_item_naming_it(work, calc_task):
    client = FakeClient()
    run = _sandbox(client, pull="never", registry="mirror.example:5000"
                   ).run_test_step(work, calc_task, 60)
    assert "mirror.example:5000/acme/calc:1" in run.error and "--pull never" in run.error
    assert not client.created and not client.pulls
    result = grade_work_dir(work)
    assert (result.outcome, result.error_kind) == (Outcome.ERROR, ErrorKind.INFRA)
    assert result.error_message == run.error


def test_without_a_patch_nothing_is_pulled_or_run(tmp_path, calc_task):
    work = prepare_work(tmp_path, calc_task, "")
    client = FakeClient()
    run = _sandbox(client).run_test_step(work, calc_task, 60)
    assert run.error is None and not client.created and not client.pulls
    assert grade_work_dir(work).outcome == Outcome.NO_OP


def test_a_missing_image_is_pulled_once_with_progress(monkeypatch):
    monkeypatch.setattr(ds, "_PROGRESS_SECONDS", 0)
    client = FakeClient()
    sandbox = _sandbox(client, registry="localhost:5000")
    threads = [threading.Thread(target=sandbox.ensure_image,
                                args=("localhost:5000/acme/calc:1",)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert client.pulls == [("localhost:5000/acme/calc", "1")]
    shown = sandbox.progress.getvalue()
    assert "Pulling localhost:5000/acme/calc:1" in shown and "abc123: Pull complete" in shown
    assert "1.0 MiB of 3.0 MiB downloaded" in shown and "3.0 MiB of 3.0 MiB downloaded" in shown


def test_a_failed_pull_stops_every_item_of_that_image_without_retrying():
    client = FakeClient()
    client.pull_error = "manifest unknown"
    sandbox = _sandbox(client)
    for _ in range(2):
        with pytest.raises(ds.ImageUnavailable, match="pulling image acme/calc:1 failed: "
                                                      "manifest unknown"):
            sandbox.ensure_image("acme/calc:1")
    assert len(client.pulls) == 1


def test_stop_all_removes_what_runs_and_starts_nothing_new(calc_task, work):
    client = FakeClient({"acme/calc:1": []})
    client.block = True
    sandbox = _sandbox(client)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            sandbox.run_test_step(work, calc_task, 60)
        except Interrupted as exc:
            raised.append(exc)
    running = threading.Thread(target=run, daemon=True)
    running.start()
    deadline = time.monotonic() + 10
    while not client.created and time.monotonic() < deadline:
        time.sleep(0.01)
    sandbox.stop_all()
    running.join(10)
    assert [c.removed for c in client.created] == [True] and len(raised) == 1
    with pytest.raises(Interrupted):
        sandbox.run_test_step(work, calc_task, 60)
    assert len(client.created) == 1


def test_containers_of_a_killed_process_of_this_host_are_removed():
    dead = _pid_of_finished_process()
    host = socket.gethostname()
    client = FakeClient()
    mine, other_host, killed = (client.create("i", labels={LABEL_OWNER: owner})
                                for owner in (f"{host}:{os.getpid()}", f"elsewhere:{dead}",
                                              f"{host}:{dead}"))
    assert _sandbox(client).remove_orphans() == 1
    assert killed.removed and not mine.removed and not other_host.removed


def _pid_of_finished_process() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("quantity, cpus", [("2", 2.0), ("500m", 0.5), (1.5, 1.5)])
def test_cpu_quantities(quantity, cpus):
    assert ds.cpu_quantity(quantity) == cpus


@pytest.mark.parametrize("quantity, size", [("4Gi", 4 * 2**30), ("512Mi", 512 * 2**20),
                                            ("1G", 10**9), ("1000", 1000), ("1.5Gi", 3 * 2**29)])
def test_memory_quantities(quantity, size):
    assert ds.memory_quantity(quantity) == size


def test_limits_come_from_limits_else_requests():
    assert ds.container_limits(None) == {}
    assert ds.container_limits({"requests": {"cpu": "1", "memory": "1Gi"},
                                "limits": {"memory": "2Gi"}}) == \
        {"nano_cpus": 10**9, "mem_limit": 2 * 2**30}


@pytest.mark.parametrize("image, split", [
    ("swebench/sweb.eval.x86_64.django_1776_django-11099:latest",
     ("swebench/sweb.eval.x86_64.django_1776_django-11099", "latest")),
    ("localhost:5000/a/b", ("localhost:5000/a/b", "latest")),
    ("localhost:5000/a/b:v1", ("localhost:5000/a/b", "v1"))])
def test_image_tags(image, split):
    client = FakeClient({})
    _sandbox(client).ensure_image(image)
    assert client.pulls == [split]


@pytest.mark.parametrize("mode, portable, daemon, here, may_pull, expected", [
    ("process", True, True, True, True, "process"),
    ("process", False, True, True, True, None),
    ("docker", True, True, False, False, "docker"),  # the item then names the missing image
    ("docker", True, False, True, True, None),
    ("auto", True, True, True, False, "docker"),
    ("auto", True, True, False, True, "process"),  # no pull for a row that runs anyway
    ("auto", False, True, False, True, "docker"),
    ("auto", False, True, False, False, None),
    ("auto", True, False, False, True, "process"),
    ("auto", False, False, False, True, None),
])
def test_choose(mode, portable, daemon, here, may_pull, expected):
    assert choose(mode, portable, daemon, here, may_pull) == expected


def _evaluation(name: str = "ev"):
    return parse_resource({"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                           "metadata": {"name": name},
                           "spec": {"predictions": {"source": "gold"}}})


def test_auto_refuses_an_image_only_row_saying_how_to_start_docker(monkeypatch):
    monkeypatch.setattr(ds, "connect", lambda: (None, "no Docker daemon answers (refused)"))
    real = make_instance("0" * 40, eval_script="cd /testbed\n")
    portable = Instance.model_validate(demo.load_rows()[0])
    chosen, refused = assign(SandboxOptions(mode="auto"), _evaluation(), [portable, real])
    assert chosen.of(portable) is not None and chosen.docker is None
    [why] = refused
    assert "acme__calc-1 needs Docker: no Docker daemon answers" in why
    assert "start the Docker daemon" in why


def test_auto_uses_docker_for_a_local_image_and_refuses_one_it_may_not_pull():
    here = make_instance("0" * 40, eval_script="cd /testbed\n")
    missing = make_instance("0" * 40, eval_script="cd /testbed\n", instance_id="acme__calc-2",
                            image="acme/calc:2")
    client = FakeClient({"acme/calc:1": []})
    chosen, refused = assign(SandboxOptions(mode="auto", pull="never"), _evaluation("x"),
                             [here, missing], client=client)
    assert chosen.of(here) is chosen.docker and chosen.docker.labels == {LABEL_EVALUATION: "x"}
    assert refused == ["instance acme__calc-2 needs its image acme/calc:2, which is not on "
                       "this machine, and --pull never forbids pulling it"]
