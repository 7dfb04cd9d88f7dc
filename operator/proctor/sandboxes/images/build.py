"""Build swebench-compatible images of SWE-bench rows from source: `proctor images build`.

The thin shell around `plan`: clone the row's repository from its source (a git bundle,
a folder of bundles or repositories, or where the process sandbox clones from), read the
requirements file at the row's environment commit, strip the clone to the base commit,
write the build context, and have the daemon build it (network `host`, so that pip
reaches PyPI on a daemon without a bridge). Each image is tagged with the row's `image`
(or under a registry), so Proctor's Docker sandbox and swebench's harness run it as is.
"""

from __future__ import annotations

import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from proctor.core.images import instance_image
from proctor.core.model import Instance
from proctor.sandboxes import process
from proctor.sandboxes.images import plan as plans
from proctor.sandboxes.images.debian import ImageBuildError, build_rootfs, exists, native_arch
from proctor.sandboxes.images.specs import requirements

if TYPE_CHECKING:  # the SDK is imported where it is used (Docker is optional)
    from docker import DockerClient

Log = Callable[[str], None]


@dataclass(frozen=True)
class BuildResult:
    """What became of one row's image."""

    instance_id: str
    image: str
    status: Literal["built", "kept", "failed"]
    seconds: float = 0.0
    size_bytes: int | None = None
    error: str = ""


def source_of(instance: Instance, source: Path | None) -> str | None:
    """Where to clone the row's repository from: `source` itself when it is a bundle or a
    repository, else `owner__name.bundle`, `owner/name.bundle`, `owner/name.git` or
    `owner/name` in it; without `source`, where the process sandbox clones from (a bundle
    Proctor ships, PROCTOR_REPO_MIRROR, GitHub). None: `source` does not hold it."""
    if source is None:
        return process.repo_source(instance)
    repo = instance.repo
    if source.is_file() or (source / ".git").exists() or (source / "HEAD").is_file():
        return str(source)
    for name in (f"{repo.replace('/', '__')}.bundle", f"{repo}.bundle", f"{repo}.git", repo):
        if (source / name).exists():
            return str(source / name)
    return None


def host_ca_bundle() -> str | None:
    """The certificates this machine trusts (what lets pip through a TLS proxy), if any."""
    paths = ssl.get_default_verify_paths()
    for path in (paths.cafile, paths.openssl_cafile):
        if path and Path(path).is_file():
            return Path(path).read_text()
    return None


def build_images(client: DockerClient, instances: Iterable[Instance], *, source: Path | None = None,
                 registry: str = "", force: bool = False, log: Log = print) -> list[BuildResult]:
    """Build each row's image (kept when present, unless `force`); one result per row."""
    arch = native_arch()
    ca_bundle = host_ca_bundle()
    results = []
    for instance in instances:
        started = time.perf_counter()
        try:
            result = _build_one(client, instance, source, registry, arch, ca_bundle, force, log)
        except ImageBuildError as exc:
            result = BuildResult(instance.instance_id, instance_image(instance, registry),
                                 "failed", time.perf_counter() - started, error=str(exc))
            log(f"Failed {result.error}")
        results.append(result)
    return results


def _build_one(client: DockerClient, instance: Instance, source: Path | None, registry: str,
               arch: str, ca_bundle: str | None, force: bool, log: Log) -> BuildResult:
    image = instance_image(instance, registry)
    if not force and exists(client, image):
        return BuildResult(instance.instance_id, image, "kept", size_bytes=image_size(client,
                                                                                        image))
    plans.environment_of(instance)  # refuses a row it cannot build before any work
    where = source_of(instance, source)
    if where is None:
        raise ImageBuildError(f"{instance.instance_id}: no repository {instance.repo} in "
                              f"{source}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="proctor-swebench-image-") as tmp:
        context = Path(tmp)
        found, tagged = _checkout(instance, where, context / "testbed")
        plan = plans.plan_image(instance, arch, registry, found, tagged)
        build_rootfs(client, plan.rootfs, log=log)
        _write_context(context, plan, ca_bundle)
        _docker_build(client, plan, context)
    seconds = time.perf_counter() - started
    size = image_size(client, image)
    notes = [f"Python {plan.spec.python}"]
    if plan.requirements_from:
        notes.append(f"requirements: {plan.requirements_from}")
    if plan.pretend_version:
        notes.append(f"no tags in the source: version {plan.pretend_version} for "
                     f"setuptools_scm")
    log(f"Built {image} ({instance.instance_id}; {'; '.join(notes)}) in {seconds:.0f} s, "
        f"{megabytes(size)}")
    return BuildResult(instance.instance_id, image, "built", seconds, size)


def _checkout(instance: Instance, where: str,
              dest: Path) -> tuple[tuple[str, str] | None, bool]:
    """Clone the repository into `dest`, stripped to the base commit. Returns the
    requirements file swebench would read (from the environment setup commit when the
    source has it, else from the base commit) as (where from, text), and whether a tag
    reaches the base commit."""
    iid = instance.instance_id
    try:
        _git("clone", "-q", "--no-checkout", where, str(dest))
    except subprocess.CalledProcessError as exc:
        raise ImageBuildError(f"{iid}: cloning {where} failed: {_tail(exc.stderr)}") from exc
    if not _has_commit(dest, instance.base_commit):
        raise ImageBuildError(f"{iid}: {where} has no commit {instance.base_commit}")
    env_commit = instance.environment_setup_commit or instance.base_commit
    commit = env_commit if _has_commit(dest, env_commit) else instance.base_commit
    found = requirements(instance.repo, lambda path: _show(dest, commit, path))
    tagged = _git_ok(dest, "describe", "--tags", instance.base_commit)
    try:
        process.strip_to_commit(dest, instance.base_commit)
    except RuntimeError as exc:
        raise ImageBuildError(f"{iid}: {exc}") from exc
    if found is None:
        return None, tagged
    label = "environment setup commit" if commit == env_commit else (
        "base commit; the source lacks the environment setup commit")
    return (f"{found[0]} at the {label}", found[1]), tagged


def _write_context(context: Path, plan: plans.ImagePlan, ca_bundle: str | None) -> None:
    for name, text in plans.context_files(ca_bundle).items():
        path = context / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (context / "opt/miniconda3/bin/conda").chmod(0o755)
    if plan.requirements is not None:
        (context / "requirements.txt").write_text(plan.requirements)
    (context / "Dockerfile").write_text(plan.dockerfile())


def _docker_build(client: DockerClient, plan: plans.ImagePlan, context: Path) -> None:
    """Build the context; ImageBuildError naming the row (and package) when it fails."""
    log: list[str] = []
    try:
        for chunk in client.api.build(path=str(context), tag=plan.image, rm=True, forcerm=True,
                                      network_mode="host", decode=True):
            log.append(chunk.get("stream", ""))
            if "error" in chunk:
                log.append(chunk["error"])
                raise ImageBuildError(plans.failure_line(plan.instance_id, plan.spec.python,
                                                         "".join(log)))
    except ImageBuildError:
        raise
    except Exception as exc:  # the daemon's words name the cause
        raise ImageBuildError(f"{plan.instance_id}: building {plan.image} failed: "
                              f"{exc}") from exc


def image_size(client: DockerClient, image: str) -> int | None:
    try:
        return int(client.images.get(image).attrs["Size"])
    except Exception:
        return None


def megabytes(size: int | None) -> str:
    return "size unknown" if size is None else f"{size / 1e6:.0f} MB"


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=process.git_env())


def _has_commit(repo: Path, commit: str) -> bool:
    return bool(commit) and _git_ok(repo, "cat-file", "-e", f"{commit}^{{commit}}")


def _git_ok(repo: Path, *args: str) -> bool:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True,
                          env=process.git_env())
    return done.returncode == 0


def _show(repo: Path, commit: str, path: str) -> str | None:
    done = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=repo, capture_output=True,
                          text=True, env=process.git_env())
    return done.stdout if done.returncode == 0 else None


def _tail(text: str) -> str:
    return " | ".join(text.strip().splitlines()[-2:])[-300:]
