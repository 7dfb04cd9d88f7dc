"""What a swebench-compatible image of a row is made of (pure: row in, build plan out).

The official instance images are conda on Ubuntu; these are Debian with the Python that
swebench's specs give the row, which Debian ships as its system Python in one release
(3.9 in bullseye, 3.11 in bookworm, 3.13 in trixie). Inside, what the official eval
script expects:

* `/opt/miniconda3/bin/activate` and `conda activate testbed`: stand-ins that put the
  environment `/opt/miniconda3/envs/testbed` (a venv) first on PATH;
* the row's dependencies from PyPI, pinned as swebench's specs pin them;
* the repository at the row's base commit as `/testbed`, installed as the specs say,
  then committed as swebench's setup script commits it (`git commit -am SWE-bench`).

Layers are ordered so that rows sharing an environment share its layers (the daemon's
build cache): rootfs, stand-ins, environment, then the repository.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from proctor.core.images import instance_image
from proctor.core.model import Instance
from proctor.sandboxes.images.debian import ImageBuildError, Rootfs
from proctor.sandboxes.images.specs import EnvSpec, spec_for

# The Debian release whose system Python is each version.
DEBIAN_PYTHON = {"3.9": "bullseye", "3.11": "bookworm", "3.13": "trixie"}
ROOTFS_PACKAGES = ("python3", "python3-venv", "git", "patch", "ca-certificates")
ENV = "/opt/miniconda3/envs/testbed"
# What conda's python brought to a fresh environment when the official images were
# built (2024): Debian's own pip is too old for PEP 660 editable installs.
ENV_SEED = ("pip==24.0", "setuptools==69.5.1", "wheel==0.43.0")
_PATH = f"{ENV}/bin:/opt/miniconda3/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:" \
        "/bin"
_ROOTFS_CHANGES = (f"ENV PATH={_PATH}", "ENV LANG=C.UTF-8", "ENV TESTBED=/testbed",
                   "WORKDIR /testbed")
_PIP = "python -m pip install --no-cache-dir --progress-bar off"
_PIP_CONF = "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n"

ACTIVATE = """\
# Stand-in for conda's activate script, written by Proctor: the official eval scripts
# run `source /opt/miniconda3/bin/activate` then `conda activate testbed`.
conda() {
  case "${1:-}" in
    activate)
      export CONDA_DEFAULT_ENV="${2:-testbed}"
      export CONDA_PREFIX="/opt/miniconda3/envs/${2:-testbed}"
      export PATH="$CONDA_PREFIX/bin:$PATH"
      ;;
    deactivate) unset CONDA_DEFAULT_ENV CONDA_PREFIX ;;
    *) /opt/miniconda3/bin/conda "$@" ;;
  esac
}
export CONDA_DEFAULT_ENV=base
"""

CONDA = f"""\
#!/bin/bash
# Stand-in for conda, written by Proctor: this image's environment is the venv
# {ENV}; `source /opt/miniconda3/bin/activate` defines `conda activate`.
case "${{1:-}} ${{2:-}}" in
  "env list"*|"info --envs"*) echo "testbed                  {ENV}" ;;
  activate*|deactivate*) echo "conda: run 'source /opt/miniconda3/bin/activate' first" >&2
    exit 1 ;;
  *) echo "conda: a stand-in; only 'activate', 'env list' work in this image" >&2; exit 1 ;;
esac
"""


@dataclass(frozen=True)
class ImagePlan:
    """One row's image: its name, environment and Dockerfile."""

    instance_id: str
    image: str
    spec: EnvSpec
    rootfs: Rootfs
    requirements: str | None = None
    """The requirements file's text, when the specs install one (read from the source)."""
    requirements_from: str = ""
    """Which commit and path the requirements came from (for the build log)."""
    setup: str = ""
    """The repository's setup script: pre_install, install, the SWE-bench commit."""
    pretend_version: str = ""
    """The version setuptools_scm is told, when the source has no tags to derive it from
    (a clone from GitHub has them; without, pytest calls itself 0.1.dev and refuses its
    own `minversion`)."""

    def dockerfile(self) -> str:
        lines = [f"FROM {self.rootfs.image}", "COPY opt /opt", "COPY etc /etc",
                 f"RUN python3 -m venv {ENV} && {ENV}/bin/{_PIP} {' '.join(ENV_SEED)}"]
        if self.requirements is not None:
            lines += ["COPY requirements.txt /root/requirements.txt",
                      f"RUN {_PIP} -r /root/requirements.txt && rm /root/requirements.txt"]
        if extra := conda_packages(self.spec):
            lines.append(f"RUN {_PIP} {_quote(extra)}")
        if self.spec.pip_packages:
            lines.append(f"RUN {_PIP} {_quote(self.spec.pip_packages)}")
        if self.pretend_version:
            lines.append(f"ENV SETUPTOOLS_SCM_PRETEND_VERSION={self.pretend_version}")
        lines += ["COPY testbed /testbed", "WORKDIR /testbed",
                  f"RUN {json.dumps(['/bin/bash', '-c', self.setup])}",
                  # PID 1 of a test container (`tail -f /dev/null`) ignores SIGTERM:
                  # without this, every `docker stop` waits out its whole grace period.
                  "STOPSIGNAL SIGKILL",
                  f"LABEL dev.proctor.instance={self.instance_id} "
                  f"dev.proctor.python={self.spec.python}"]
        return "\n".join(lines) + "\n"


def rootfs_for(python: str, arch: str) -> Rootfs:
    """The Debian root filesystem whose system Python is `python`."""
    suite = DEBIAN_PYTHON[python]
    return Rootfs(image=f"proctor/swebench-rootfs:{suite}-{arch}", suite=suite,
                  packages=ROOTFS_PACKAGES, changes=_ROOTFS_CHANGES, arch=arch)


def plan_image(instance: Instance, arch: str, registry: str = "",
               requirements: tuple[str, str] | None = None, tagged: bool = True) -> ImagePlan:
    """The plan of `instance`'s image; ImageBuildError (one line naming the row) when
    the specs say it cannot be built here. `requirements` is (where from, text);
    `tagged`: the source has a tag at or before the base commit."""
    spec = environment_of(instance)
    needs_requirements = spec.packages == "requirements.txt"
    if needs_requirements and requirements is None:
        raise ImageBuildError(f"{instance.instance_id}: its requirements file is not in "
                              f"the repository source")
    where, text = requirements if needs_requirements and requirements else ("", None)
    return ImagePlan(instance.instance_id, instance_image(instance, registry), spec,
                     rootfs_for(spec.python, arch), text, where, setup_script(spec),
                     "" if tagged else f"{instance.version}.0")


def environment_of(instance: Instance) -> EnvSpec:
    """The row's spec, if this builder can make its environment."""
    spec = spec_for(instance.repo, instance.version)
    iid = instance.instance_id
    if spec is None:
        raise ImageBuildError(f"{iid}: swebench's specs have no {instance.repo} "
                              f"{instance.version}")
    if spec.python not in DEBIAN_PYTHON:
        raise ImageBuildError(f"{iid}: needs Python {spec.python}, which no Debian release "
                              f"ships (built here: {', '.join(DEBIAN_PYTHON)})")
    if spec.packages == "environment.yml":
        raise ImageBuildError(f"{iid}: its environment is a conda environment.yml; only pip "
                              f"environments are built here")
    return spec


def conda_packages(spec: EnvSpec) -> tuple[str, ...]:
    """The packages the specs hand to `conda create`, installed with pip instead."""
    if spec.packages in ("", "requirements.txt", "environment.yml"):
        return ()
    return tuple(shlex.split(spec.packages))


def setup_script(spec: EnvSpec) -> str:
    """What swebench's repository setup runs after the checkout, in /testbed."""
    commands = ["set -euxo pipefail", "source /opt/miniconda3/bin/activate",
                "conda activate testbed", *spec.pre_install]
    if spec.install:
        commands.append(spec.install)
    commands += ["git config --global user.email setup@swebench.config",
                 "git config --global user.name SWE-bench",
                 "git commit --allow-empty -qam SWE-bench",
                 "rm -rf /root/.cache"]
    return "\n".join(commands)


def _quote(words: Iterable[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def context_files(ca_bundle: str | None) -> dict[str, str]:
    """The files every image's build context holds besides the repository: the conda
    stand-ins, and pip told to trust the system's certificates, which are the host's
    (`ca_bundle`) when given: pip then reaches PyPI wherever the host does."""
    files = {"opt/miniconda3/bin/activate": ACTIVATE, "opt/miniconda3/bin/conda": CONDA,
             "etc/pip.conf": _PIP_CONF}
    if ca_bundle is not None:
        files["etc/ssl/certs/ca-certificates.crt"] = ca_bundle
    return files


_NO_DISTRIBUTION = re.compile(r"No matching distribution found for ([^\s;]+)")
_NO_WHEEL = re.compile(r"(?:Failed building wheel for|Could not build wheels for) ([^\s,;]+)")


def failure_line(instance_id: str, python: str, log: str) -> str:
    """One line naming the row and, where pip says which, the package that failed."""
    if found := _NO_DISTRIBUTION.search(log):
        return f"{instance_id}: PyPI serves no {found.group(1)} for Python {python}"
    if found := _NO_WHEEL.search(log):
        return f"{instance_id}: {found.group(1)} did not build for Python {python}"
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    last = (errors or lines or ["the build failed without a message"])[-1]
    return f"{instance_id}: {last[:300]}"
