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


LAYERS = "Layers: each package imports only the ones below it BROKEN"
K8S_LAYERS = "Inside proctor.k8s: each role imports only the ones below it BROKEN"
FEATURES = "The operator's optional features are independent of each other BROKEN"
KOPF = "Only proctor.k8s imports kopf or the Kubernetes client BROKEN"

# (module, the import added at its top, the contract it breaks, the import the report names)
BREAKS = [
    # kopf outside proctor.k8s
    ("cli/main.py", "kopf", KOPF, "proctor.cli.main -> kopf"),
    # the ground floor reaching up to the engine
    ("core/model.py", "proctor.local.engine", LAYERS, "proctor.core.model -> proctor.local.engine"),
    # a step reaching up to a sandbox
    ("runner/workdir.py", "proctor.sandboxes.process", LAYERS,
     "proctor.runner.workdir -> proctor.sandboxes.process"),
    # the cluster engine and the one-machine engine, side by side
    ("k8s/pull.py", "proctor.local.engine", LAYERS, "proctor.k8s.pull -> proctor.local.engine"),
    ("local/engine.py", "proctor.k8s.children.store", LAYERS,
     "proctor.local.engine -> proctor.k8s.children.store"),
    # the analysis reaching up to the operator whose status carries its figures
    ("analysis/reliability.py", "proctor.k8s.evaluation.figures", LAYERS,
     "proctor.analysis.reliability -> proctor.k8s.evaluation.figures"),
    # the machinery reaching up to the Evaluation's reconcile
    ("k8s/machinery/api.py", "proctor.k8s.evaluation.reconcile", K8S_LAYERS,
     "proctor.k8s.machinery.api -> proctor.k8s.evaluation.reconcile"),
    # an owned object's manifest reaching up to an optional feature
    ("k8s/children/manifests.py", "proctor.k8s.features.kueue", K8S_LAYERS,
     "proctor.k8s.children.manifests -> proctor.k8s.features.kueue"),
    # the agents reaching up to the Evaluations' passes
    ("k8s/agents/slots.py", "proctor.k8s.evaluation.act", K8S_LAYERS,
     "proctor.k8s.agents.slots -> proctor.k8s.evaluation.act"),
    # one optional feature leaning on another
    ("k8s/features/prepull.py", "proctor.k8s.features.kueue", FEATURES,
     "proctor.k8s.features.prepull -> proctor.k8s.features.kueue"),
]


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> str:
    """lint-imports' report on a copy of the package with every import of BREAKS added (one
    run for all: each takes seconds)."""
    parent = tmp_path_factory.mktemp("broken")
    copy = parent / "proctor"
    shutil.copytree(ROOT / "operator" / "proctor", copy, symlinks=True,
                    ignore=lambda _, names: [n for n in names if "." in n
                                             and not n.endswith(".py")])
    for module, imported, _, _ in BREAKS:
        path = copy / module
        path.write_text(f"import {imported}  # noqa\n{path.read_text()}")
    done = lint(parent)
    assert done.returncode != 0, done.stdout
    return done.stdout


@pytest.mark.parametrize(("module", "imported", "contract", "shown"), BREAKS)
def test_an_import_against_the_contracts_is_named_in_the_one_it_breaks(
        broken: str, module: str, imported: str, contract: str, shown: str) -> None:
    assert contract in broken, broken
    assert shown in broken, broken


def test_the_operator_imports_no_plotting_library() -> None:
    """It takes the reliability figures of `proctor analyze` (`analysis.reliability`), not
    its plots: matplotlib would cost every operator start time and memory."""
    done = subprocess.run([sys.executable, "-c", "import sys, proctor.k8s.controller; "
                           "print(sorted(m for m in sys.modules if m.startswith('matplotlib')))"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
