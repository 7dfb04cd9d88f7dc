"""swebench's installation specs of each (repository, version), kept as data (pure).

swebench 5 dropped them (its harness pulls prebuilt images); `swebench_specs.json` holds
them as swebench 4.1.0 last shipped them (its `source` field names where from), for the
repositories of SWE-bench Verified. They say which Python a row's environment has, what
is installed into it from PyPI (pinned as swebench pinned it), and how the repository
itself is installed.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict

# Lines of a requirements file that swebench leaves out (the repository itself, comments).
_SKIPPED_REQUIREMENT_PREFIXES = ("-e .", "#", ".[test")


class EnvSpec(BaseModel):
    """One (repository, version)'s entry in swebench's specs (the fields used here)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    python: str
    """The Python version of the conda environment `testbed` ("3.9")."""
    packages: str = ""
    """`requirements.txt` (read from the repository), `environment.yml` (conda), or a
    list of packages for `conda create` (their PyPI names are the same)."""
    pip_packages: tuple[str, ...] = ()
    """Installed with pip after `packages`, pinned as swebench pins them."""
    pre_install: tuple[str, ...] = ()
    """Shell commands run in /testbed before `install`."""
    install: str = ""
    """How the repository itself is installed ("python -m pip install -e .")."""


@functools.cache
def _data() -> dict[str, Any]:
    text = resources.files("proctor.sandboxes.images").joinpath("swebench_specs.json")
    data: dict[str, Any] = json.loads(text.read_text())
    return data


def source() -> str:
    """Where the specs were taken from."""
    return str(_data()["source"])


def spec_for(repo: str, version: str) -> EnvSpec | None:
    """swebench's spec of this repository at this version; None when it has none."""
    entry = _data()["specs"].get(repo, {}).get(version)
    return EnvSpec.model_validate(entry) if entry is not None else None


def requirements_paths(repo: str) -> tuple[str, ...]:
    """Where swebench looks for a repository's requirements file, in order."""
    return tuple(_data()["requirements_paths"].get(repo, ()))


def requirements(repo: str, read: Callable[[str], str | None]) -> tuple[str, str] | None:
    """The requirements swebench installs for `repo`, as it assembles them: the first
    file of `requirements_paths` that `read` finds, its `-r` includes first (one level
    deep), without the lines naming the repository itself, yanked packages replaced.
    Returns (path, text), or None when no file is found."""
    for path in requirements_paths(repo):
        text = read(path)
        if text is not None:
            return path, _replace_yanked(_flatten(path, text, read))
    return None


def _flatten(path: str, text: str, read: Callable[[str], str | None]) -> str:
    folder = "/".join(path.split("/")[:-1])
    included: list[str] = []
    own: list[str] = []
    for line in text.split("\n"):
        if line.strip().startswith("-r"):
            name = line.strip()[len("-r"):].strip()
            extra = read(f"{folder}/{name}" if folder else name) or ""
            included += [x for x in extra.split("\n") if not _skipped(x)]
        elif not _skipped(line):
            own.append(line)
    return "\n".join([*included, "\n".join(own)])


def _skipped(line: str) -> bool:
    return line.strip().startswith(_SKIPPED_REQUIREMENT_PREFIXES)


def _replace_yanked(text: str) -> str:
    for old, new in _data()["replace_requirements"]:
        text = re.sub(rf"^{re.escape(old)}([<>=!~]=?.*|$)", new, text, flags=re.MULTILINE)
    return text
