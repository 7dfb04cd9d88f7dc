"""The provenance of a `proctor run` (the shell around `proctor.core.provenance`): the
dataset file's hash, the sandboxes' images and limits, the installed versions and the
machine, gathered when the outputs are written (after any image was pulled)."""

from __future__ import annotations

import hashlib
import os
import platform
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from proctor import datasets
from proctor.core.model import Instance
from proctor.core.provenance import (
    NOT_INSTALLED,
    PACKAGES,
    AgentCardProvenance,
    DatasetProvenance,
    MachineProvenance,
    Provenance,
    SandboxProvenance,
    seeds_of,
)
from proctor.core.spec import Evaluation
from proctor.sandboxes.choose import Sandboxes

PROCESS_LIMITS = "no CPU or memory limit (the process sandbox applies none)"
PROCESS_IMAGES = "none: the process sandbox runs no image (the row's tests run in a checkout)"


def gather_versions(packages: Iterable[str] = PACKAGES) -> dict[str, str]:
    """Installed versions, `not installed` where a package is absent."""
    found = {}
    for name in packages:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = NOT_INSTALLED
    return found


def gather_machine() -> MachineProvenance:
    """This machine's platform, Python, CPUs and memory."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not every OS names these
        memory = None
    return MachineProvenance(platform=platform.platform(), python=platform.python_version(),
                             cpu_count=os.cpu_count(), memory_total_bytes=memory)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def dataset_provenance(evaluation: Evaluation, rows_sha256: str) -> DatasetProvenance:
    spec = evaluation.spec.dataset
    path = datasets.dataset_file(spec.name)
    hub = path is None
    return DatasetProvenance(name=datasets.names.hub_id(spec.name), split=spec.split if hub else "",
                             revision=spec.revision if hub else "",
                             file_sha256=None if path is None else file_sha256(path),
                             rows_sha256=rows_sha256)


def sandbox_provenance(evaluation: Evaluation, sandboxes: Sandboxes | None,
                       instances: Iterable[Instance]) -> SandboxProvenance:
    """The sandboxes the rows ran in, with the images and limits of each."""
    resources = evaluation.spec.runner.resources or None
    if sandboxes is None:
        return SandboxProvenance(resources=resources)
    by_kind: dict[str, list[Instance]] = {}
    for instance in instances:
        by_kind.setdefault(sandboxes.kind_of(instance), []).append(instance)
    docker = sandboxes.docker if "docker" in by_kind else None
    limits, runtimes = [], []
    if docker:
        limits.append(f"docker: {docker.limits_text()}")
        runtimes.append(docker.runtime())
    if "process" in by_kind:
        limits.append(f"process: {PROCESS_LIMITS}")
        runtimes.append("process (no container)")
    images = {} if docker is None else {
        name: docker.image_digest(name)
        for name in sorted({docker.image_of(i) for i in by_kind["docker"]})}
    return SandboxProvenance(kinds=tuple(sorted(by_kind)), resources=resources,
                             limits_applied="; ".join(limits), runtime=", ".join(runtimes),
                             images=images, images_note="" if images else PROCESS_IMAGES)


def gather(evaluation: Evaluation, dataset: DatasetProvenance, sandboxes: Sandboxes | None,
           instances: Iterable[Instance], card: AgentCardProvenance | None) -> Provenance:
    """Everything the run's summary records of where it came from; `dataset` hashed when
    its rows were read, the rest asked now."""
    sensitivity = evaluation.spec.prompt_sensitivity
    seeds, note = seeds_of(sensitivity.strategy, sensitivity.enabled)
    return Provenance(dataset=dataset,
                      versions=gather_versions(), seeds=seeds, seeds_note=note, agent=card,
                      sandbox=sandbox_provenance(evaluation, sandboxes, instances),
                      machine=gather_machine())
