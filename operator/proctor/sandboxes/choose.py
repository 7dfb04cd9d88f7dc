"""Which sandbox runs each row's tests on this machine: Docker or the process sandbox.

`--sandbox docker` runs every row in its own image; `process` runs portable rows (the
demo dataset, small pure-Python repositories) in a checkout; `auto` decides per row:

* Docker when a daemon answers and the row's image is here, or, for a row that needs
  its image, may be pulled (`--pull missing`);
* else the process sandbox, for a portable row;
* else a refusal saying how to start Docker (or that the image may not be pulled).

A portable row whose image is not here runs in the process sandbox rather than pull an
image it does not need: the demo rows name images that exist only where
`proctor images build-demo` built them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from proctor.core.labels import LABEL_EVALUATION
from proctor.core.model import Instance
from proctor.core.spec import Evaluation
from proctor.runner.workdir import WorkDir
from proctor.sandboxes import docker as docker_sandbox
from proctor.sandboxes import process
from proctor.sandboxes.process import ProcessSandbox, SandboxRun

if TYPE_CHECKING:  # the SDK is imported where it is used (Docker is optional)
    from docker import DockerClient

SandboxMode = Literal["auto", "docker", "process"]


@dataclass(frozen=True)
class SandboxOptions:
    """How `proctor run` runs each row's tests (its --sandbox, --pull, --network)."""

    mode: SandboxMode = "process"
    pull: docker_sandbox.PullPolicy = "missing"
    network: str | None = None
    """A Docker network (`none`, `host`, a user-defined one); None for the daemon's default."""


def choose(mode: SandboxMode, portable: bool, daemon: bool, image_here: bool,
           may_pull: bool) -> Literal["docker", "process"] | None:
    """The sandbox of one row, or None when no sandbox here can run it (pure)."""
    if mode == "process":
        return "process" if portable else None
    if mode == "docker":
        return "docker" if daemon else None
    if daemon and (image_here or (may_pull and not portable)):
        return "docker"
    return "process" if portable else None


def refusal(instance: Instance, image: str, mode: SandboxMode, daemon_problem: str) -> str:
    """Why a row cannot run here, and what to do."""
    if mode == "process":
        return process.needs_image(instance) or ""
    if daemon_problem:
        return f"instance {instance.instance_id} needs Docker: {daemon_problem}; " \
               f"{docker_sandbox.START_DOCKER}"
    return (f"instance {instance.instance_id} needs its image {image}, which is not on this "
            f"machine, and --pull never forbids pulling it")


class Sandbox(Protocol):
    """What the engine asks of a sandbox (the process one, the Docker one, any other).

    tests/unit/sandboxes/test_sandbox_conformance.py holds the contract every sandbox must pass: the
    same graded outcome for the same task, a patch that does not apply and a timeout
    reported as such, only regular files brought back, nothing of one item left for the
    next, and, once stopped, nothing left running and nothing new started."""

    def run_test_step(self, work: WorkDir, instance: Instance, time_limit: int) -> SandboxRun:
        """Run the work folder's run.sh against the task's repository; only the test
        step's outputs and its log come back to `work`. Once `stop_all` is called,
        raise `Interrupted` and leave nothing running."""
        ...

    def checkout(self, instance: Instance, dest: Path) -> None:
        """The task's repository at its base commit, in `dest` (for an agent's files)."""
        ...

    def stop_all(self) -> None:
        """Ctrl-C: stop every test step in flight and start no new one."""
        ...


@dataclass
class Sandboxes:
    """The sandboxes of one run, and the one chosen for each row."""

    by_instance: dict[str, Sandbox] = field(default_factory=dict)
    docker: docker_sandbox.DockerSandbox | None = None
    process: ProcessSandbox = field(default_factory=ProcessSandbox)

    def of(self, instance: Instance) -> Sandbox:
        return self.by_instance[instance.instance_id]

    def kind_of(self, instance: Instance) -> Literal["docker", "process"]:
        return "docker" if self.docker is not None and self.of(instance) is self.docker \
            else "process"

    def stop_all(self) -> None:
        """Ctrl-C: kill the test processes and remove the containers still running."""
        self.process.stop_all()
        if self.docker:
            self.docker.stop_all()


def assign(options: SandboxOptions, evaluation: Evaluation, instances: Sequence[Instance],
           client: DockerClient | None = None) -> tuple[Sandboxes, list[str]]:
    """Choose each row's sandbox; the refusals of rows that cannot run here."""
    daemon_problem = ""
    if options.mode != "process" and client is None:
        client, daemon_problem = docker_sandbox.connect()
    runner = evaluation.spec.runner
    docker = docker_sandbox.DockerSandbox(
        client, runner.instance_image_registry, options.pull, options.network,
        runner.resources, labels={LABEL_EVALUATION: evaluation.name},
    ) if client is not None else None
    if docker:
        docker.remove_orphans()
    chosen, refused = Sandboxes(docker=docker), []
    for instance in instances:
        image = docker.image_of(instance) if docker else instance.image
        pick = choose(options.mode, process.needs_image(instance) is None, docker is not None,
                      docker is not None and docker.has_image(image), options.pull == "missing")
        if pick is None:
            refused.append(refusal(instance, image, options.mode, daemon_problem))
        else:
            # `choose` picks docker only where there is a daemon (docker is not None)
            chosen.by_instance[instance.instance_id] = (
                docker if pick == "docker" and docker is not None else chosen.process)
    return chosen, refused
