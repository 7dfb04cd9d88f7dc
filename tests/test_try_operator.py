"""scripts/try-operator.sh as the README presents it: it starts the test cluster, a reference
agent and the operator, writes a kubeconfig kubectl can use, and Ctrl-C stops everything."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from k8s_tools import ToolMissing, tool_binary

ROOT = Path(__file__).resolve().parents[1]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _group_commands(pgid: int) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.getpgid(int(proc.name)) == pgid:
                found.append((proc / "cmdline").read_text().replace("\0", " "))
        except (OSError, ProcessLookupError):
            continue
    return found


def test_try_operator_serves_kubectl_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    try:
        kubectl = tool_binary("kubectl")
    except ToolMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    env = {**os.environ, "TRY_OPERATOR_DIR": str(tmp_path), "PROCTOR_KUBECTL": str(kubectl)}
    script = subprocess.Popen(["bash", str(ROOT / "scripts" / "try-operator.sh")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)  # its own group, as in a terminal
    try:
        printed = ""
        assert script.stdout is not None
        while "Ctrl-C here stops everything" not in printed:
            line = script.stdout.readline()
            assert line, f"the script ended early:\n{printed}"
            printed += line
        assert f"export KUBECONFIG={tmp_path}/kubeconfig" in printed
        assert "kubectl apply -f examples/agent.yaml -f examples/demo-agent.yaml" in printed
        shown = subprocess.run([str(kubectl), "get", "evaluations,agentundertests"],
                               env={**env, "KUBECONFIG": str(tmp_path / "kubeconfig"),
                                    "HOME": str(tmp_path)},
                               capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0 and "No resources found" in shown.stderr, shown
        time.sleep(3)  # what fails at its start has failed by now
        running = " | ".join(_group_commands(script.pid))
        for part in ("-m cluster", "agent serve", "proctor operator"):
            assert part in running, f"{part!r} is not running: {running}"
    finally:
        os.killpg(script.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
        script.wait(60)
    deadline = time.monotonic() + 30
    while _group_alive(script.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _group_alive(script.pid), "something the script started is still running"
    assert "Stopping the operator" in script.stdout.read()
