"""The import contracts of pyproject.toml ([tool.importlinter]), checked with lint-imports:
no module outside proctor.k8s imports kopf or the Kubernetes client, and proctor.k8s and
proctor.local never import each other (directly or not)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(package_parent: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports with the project's contracts, on the package found in ``package_parent``."""
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=package_parent, env={"PYTHONPATH": str(package_parent)},
                          capture_output=True, text=True, timeout=120)


def test_the_package_keeps_its_import_contracts() -> None:
    done = lint(ROOT / "operator")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 kept, 0 broken" in done.stdout


def _copy_with(tmp_path: Path, module: str, line: str) -> Path:
    """The package's Python files, with ``line`` added at the top of ``module``."""
    copy = tmp_path / "proctor"
    shutil.copytree(ROOT / "operator" / "proctor", copy,
                    ignore=lambda _, names: [n for n in names if "." in n
                                             and not n.endswith(".py")])
    path = copy / module
    path.write_text(f"{line}\n{path.read_text()}")
    return tmp_path


def test_kopf_imported_outside_k8s_breaks_the_contract(tmp_path: Path) -> None:
    done = lint(_copy_with(tmp_path, "cli.py", "import kopf  # noqa"))
    assert done.returncode != 0 and "proctor.cli -> kopf" in done.stdout, done.stdout


def test_the_one_machine_engine_imported_by_k8s_breaks_the_contract(tmp_path: Path) -> None:
    done = lint(_copy_with(tmp_path, "k8s/pull.py", "import proctor.local.engine  # noqa"))
    assert done.returncode != 0 and "proctor.k8s.pull -> proctor.local" in done.stdout, \
        done.stdout
