"""The import contracts of pyproject.toml ([tool.importlinter]), checked with lint-imports:
the packages are layers that import only downwards (the engines and the reference agents
side by side, never importing each other; under them the analysis, whose pure figures the
operator's status carries), and no module outside
proctor.k8s imports kopf or the Kubernetes client. Inside proctor.k8s the roles are layers
too, and its optional features never import each other."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import ROOT

LINT = Path(sys.executable).with_name("lint-imports")


def lint(package_parent: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports with the project's contracts, on the package found in ``package_parent``."""
    return subprocess.run([str(LINT), str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=package_parent, env={"PYTHONPATH": str(package_parent)},
                          capture_output=True, text=True, timeout=120)


def test_the_package_keeps_its_import_contracts() -> None:
    done = lint(ROOT / "operator")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 kept, 0 broken" in done.stdout


def _copy_with(tmp_path: Path, module: str, line: str) -> Path:
    """The package's Python files, with ``line`` added at the top of ``module``."""
    copy = tmp_path / "proctor"
    shutil.copytree(ROOT / "operator" / "proctor", copy, symlinks=True,
                    ignore=lambda _, names: [n for n in names if "." in n
                                             and not n.endswith(".py")])
    path = copy / module
    path.write_text(f"{line}\n{path.read_text()}")
    return tmp_path


def test_kopf_imported_outside_k8s_breaks_the_contract(tmp_path: Path) -> None:
    done = lint(_copy_with(tmp_path, "cli/main.py", "import kopf  # noqa"))
    assert done.returncode != 0 and "proctor.cli.main -> kopf" in done.stdout, done.stdout


@pytest.mark.parametrize(("module", "imported", "shown"), [
    # the ground floor reaching up to the engine
    ("core/model.py", "proctor.local.engine", "proctor.core.model -> proctor.local.engine"),
    # a step reaching up to a sandbox
    ("runner/workdir.py", "proctor.sandboxes.process",
     "proctor.runner.workdir -> proctor.sandboxes.process"),
    # the cluster engine and the one-machine engine, side by side
    ("k8s/pull.py", "proctor.local.engine", "proctor.k8s.pull -> proctor.local.engine"),
    ("local/engine.py", "proctor.k8s.children.store",
     "proctor.local.engine -> proctor.k8s.children.store"),
    # the analysis reaching up to the operator whose status carries its figures
    ("analysis/reliability.py", "proctor.k8s.evaluation.figures",
     "proctor.analysis.reliability -> proctor.k8s.evaluation.figures"),
])
def test_an_import_against_the_layers_breaks_the_contract(
        tmp_path: Path, module: str, imported: str, shown: str) -> None:
    done = lint(_copy_with(tmp_path, module, f"import {imported}  # noqa"))
    assert done.returncode != 0, done.stdout
    assert "Layers: each package imports only the ones below it BROKEN" in done.stdout
    assert shown in done.stdout, done.stdout


K8S_LAYERS = "Inside proctor.k8s: each role imports only the ones below it BROKEN"
FEATURES = "The operator's optional features are independent of each other BROKEN"


@pytest.mark.parametrize(("module", "imported", "contract"), [
    # the machinery reaching up to the Evaluation's reconcile
    ("k8s/machinery/api.py", "proctor.k8s.evaluation.reconcile", K8S_LAYERS),
    # an owned object's manifest reaching up to an optional feature
    ("k8s/children/manifests.py", "proctor.k8s.features.kueue", K8S_LAYERS),
    # the agents reaching up to the Evaluations' passes
    ("k8s/agents/slots.py", "proctor.k8s.evaluation.act", K8S_LAYERS),
    # one optional feature leaning on another
    ("k8s/features/prepull.py", "proctor.k8s.features.kueue", FEATURES),
])
def test_an_import_against_the_operators_roles_breaks_a_contract(
        tmp_path: Path, module: str, imported: str, contract: str) -> None:
    done = lint(_copy_with(tmp_path, module, f"import {imported}  # noqa"))
    assert done.returncode != 0, done.stdout
    assert contract in done.stdout, done.stdout


def test_the_operator_imports_no_plotting_library() -> None:
    """It takes the reliability figures of `proctor analyze` (`analysis.reliability`), not
    its plots: matplotlib would cost every operator start time and memory."""
    done = subprocess.run([sys.executable, "-c", "import sys, proctor.k8s.controller; "
                           "print(sorted(m for m in sys.modules if m.startswith('matplotlib')))"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
