"""HAL's own analysis code (princeton-pli/hal-harness, reliability_eval) and Proctor agree on
every figure both compute, fed the same items (scripts/hal_crosscheck.py).

HAL's code is not a package this project can install; the test runs where a checkout is
named by PROCTOR_HAL_HARNESS and is skipped elsewhere (it then says so)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from support.analysis_folders import AGENT_A, AGENT_B, write_folder
from support.paths import ROOT

HAL = os.environ.get("PROCTOR_HAL_HARNESS", "")


@pytest.mark.skipif(not HAL, reason="set PROCTOR_HAL_HARNESS to a hal-harness checkout")
def test_hal_and_proctor_agree_on_every_figure_both_compute(tmp_path):
    a = write_folder(tmp_path / "a", "agent-a", AGENT_A, confident=True)  # errors, a torn
    b = write_folder(tmp_path / "b", "agent-b", AGENT_B, torn=True)       # line, confidences
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "hal_crosscheck.py"),
                           "--hal", HAL, str(a), str(b)], capture_output=True, text=True,
                          timeout=300)
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    shown = {line.split()[1] for line in done.stdout.splitlines()
             if line.startswith("agent-a ")}
    for figure in ("S_prompt", "S_prompt_per_run", "R_prompt", "C_out", "C_res_latency",
                   "ece", "brier", "auroc", "abstention_rate", "selective_accuracy", "task"):
        assert figure in shown, figure
    assert "0 differ" in done.stdout
