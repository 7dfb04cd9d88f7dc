"""checkov (a policy scanner platform teams run on manifests) on `proctor render`'s output:
it fails only the checks docs/kubernetes.md documents, in the table under "Pod security".

checkov is a large tool with dependencies of its own, so it lives in a venv of its own in
pytest's cache folder, made on first use (`pip install checkov==CHECKOV`, about 2 minutes)
and reused while it holds that version.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.paths import ROOT

CHECKOV = "3.3.30"
EVALUATION = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
              "metadata": {"name": "demo", "namespace": "evals"},
              "spec": {"agentRef": {"name": "agent"},
                       "dataset": {"name": "proctor-demo", "maxRows": 1}}}
AGENTS = {
    "endpoint": {"endpoint": "http://agent.agents.svc:9009/"},
    "sidecar": {"sidecar": {"image": "agent:1", "resources": {
        "requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}}}},
}


@pytest.fixture(scope="module")
def checkov(request: pytest.FixtureRequest) -> Path:
    root = Path(request.config.cache.mkdir("checkov-venv"))
    binary = root / "bin" / "checkov"
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True
                             ).stdout.strip() if binary.is_file() else ""
    if version != CHECKOV:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True)
        done = subprocess.run([str(root / "bin" / "python"), "-m", "pip", "install", "-q",
                               "--disable-pip-version-check", f"checkov=={CHECKOV}"],
                              capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, f"pip install checkov=={CHECKOV}: {done.stderr[-2000:]}"
    return binary


def documented() -> dict[str, str]:
    """The checks the docs say checkov fails, with why: its table's rows `| CKV... |`."""
    rows = re.findall(r"^\| (CKV2?_K8S_\d+) \| [^|]+ \| ([^|]+) \|$",
                      (ROOT / "docs" / "kubernetes.md").read_text(), re.MULTILINE)
    return dict(rows)


def failed_checks(checkov: Path, tmp_path: Path, agent: dict) -> dict[str, set[str]]:
    manifest = tmp_path / "in.yaml"
    manifest.write_text(yaml.safe_dump_all([EVALUATION, {
        "apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
        "metadata": {"name": "agent", "namespace": "evals"}, "spec": agent}]))
    proctor = Path(sys.executable).parent / "proctor"
    rendered = subprocess.run([str(proctor), "render", "-f", str(manifest)],
                              capture_output=True, text=True, check=True)
    (tmp_path / "render.yaml").write_text(rendered.stdout)
    done = subprocess.run([str(checkov), "-f", str(tmp_path / "render.yaml"), "--framework",
                           "kubernetes", "--quiet", "--compact", "-o", "json"],
                          capture_output=True, text=True, timeout=600)
    report = json.loads(done.stdout)
    reports = report if isinstance(report, list) else [report]
    failed: dict[str, set[str]] = {}
    for one in reports:
        for check in one["results"]["failed_checks"]:
            failed.setdefault(check["check_id"], set()).add(check["resource"].split(".")[0])
    return failed


def test_checkov_fails_only_what_the_readme_documents(checkov: Path, tmp_path: Path) -> None:
    reasons = documented()
    assert len(reasons) >= 5 and all(r.strip() for r in reasons.values())
    seen: set[str] = set()
    for shape, agent in AGENTS.items():
        (tmp_path / shape).mkdir()
        failed = failed_checks(checkov, tmp_path / shape, agent)
        undocumented = {k: v for k, v in failed.items() if k not in reasons}
        assert undocumented == {}, (shape, undocumented)
        assert all(kinds <= {"Job", "Pod"} for kinds in failed.values()), failed
        seen |= set(failed)
    assert seen == set(reasons), "a row of the docs' table no longer fails: remove it"
