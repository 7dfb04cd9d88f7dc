"""LLM prompt variants on a cluster, the pure parts: the one-off Job that writes them (run
here as its pod would run it, against a scripted OpenAI-compatible server on loopback),
and what the operator reads back from its log (the VariantsReady condition).

The operator holds no model key: the Job names the Secret's key, and the key's value
reaches `proctor variants generate` only, never its log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from proctor.datasets import demo
from proctor.formats.manifest import parse_manifests
from proctor.k8s.features.llm_variants import (
    KEY_ENV,
    variants_job,
    variants_job_name,
    variants_state,
)
from proctor.variants import store
from proctor.variants.llm import scrub
from proctor.variants.template import reword
from support.llm_servers import HttpError, ScriptedModel

KEY = "sk-secret-variants-key-4f2a"
TASKS = tuple(row["instance_id"] for row in demo.load_rows()[:2])


def evaluation(name: str = "demo", **sensitivity: Any):
    body = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
            "metadata": {"name": name, "namespace": "evals"},
            "spec": {"agentRef": {"name": "oracle"},
                     "dataset": {"name": "proctor-demo", "maxRows": 2},
                     "predictions": {"source": "gold"},
                     "promptSensitivity": {"enabled": True, "numVariations": 1,
                                           "model": "openai/test-model",
                                           "apiKeySecretRef": {"name": "llm", "key": "token"},
                                           **sensitivity}}}
    (ev,) = parse_manifests(yaml.safe_dump(body), agent_needed=False)
    return ev


def _container(job: dict) -> dict:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return container


# --- The Job --------------------------------------------------------------------------------


def test_the_job_names_the_secret_key_and_never_holds_its_value():
    job = variants_job(evaluation(), runner_version="1.2.3")
    env = {e["name"]: e for e in _container(job)["env"]}
    assert env[KEY_ENV] == {"name": KEY_ENV,
                            "valueFrom": {"secretKeyRef": {"name": "llm", "key": "token"}}}
    assert job["metadata"]["name"] == variants_job_name(evaluation())
    assert job["metadata"]["labels"]["proctor.dev/evaluation"] == "demo"
    assert job["spec"]["backoffLimit"] == 0
    assert _container(job)["image"].endswith(":1.2.3")
    assert _container(job)["securityContext"]["readOnlyRootFilesystem"] is True


def test_without_a_secret_ref_the_job_has_no_key_variable():
    ev = evaluation(apiKeySecretRef=None)
    assert KEY_ENV not in {e["name"] for e in _container(variants_job(ev, runner_version="1"))
                           ["env"]}


def test_one_job_per_evaluation_with_a_name_that_fits_a_label():
    long = evaluation(name="a" * 200)
    name = variants_job(long, runner_version="1")["metadata"]["name"]
    assert len(name) <= 63 and name.endswith("-variants")
    assert name != variants_job(evaluation(name="b" * 200), runner_version="1")["metadata"][
        "name"]


def _rewordings(prompt: str) -> str:
    report = prompt.split("variations of this report:\n\n", 1)[1]
    return json.dumps({"variant_1": reword(report, "formal")})


def _run_as_its_pod(job: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    """The Job's container command, with its environment and the Secret's value where the
    kubelet would put it; `proctor` from this interpreter's environment."""
    container = _container(job)
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for var in container["env"]:
        env[var["name"]] = KEY if "valueFrom" in var else var["value"]
    env |= {"HOME": str(tmp_path), "TMPDIR": str(tmp_path)}  # the pod's /tmp volume
    return subprocess.run(container["command"], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def openai():
    srv = ScriptedModel("openai")
    yield srv
    srv.close()


def test_the_jobs_command_writes_the_variants_the_operator_reads(openai, tmp_path):
    openai.script = [_rewordings, "not json", "not json", "not json"]
    ev = evaluation(apiBase=openai.base + "/v1")
    done = _run_as_its_pod(variants_job(ev, runner_version="1"), tmp_path)
    log = done.stdout + done.stderr
    assert done.returncode == 1, log  # one task failed: exit 1, its record printed still
    assert KEY not in log
    assert {c["authorization"] for c in openai.calls} == {f"Bearer {KEY}"}
    # Exit 1 fails the Job (backoffLimit 0): its log is read all the same.
    state = variants_state(_job("Failed"), log, TASKS)
    assert state.ready and state.reason == "Generated"
    assert set(state.variants) == {TASKS[0]} and state.failed == (TASKS[1],)
    (variant,) = state.variants[TASKS[0]]
    assert variant.variant_id == "llm-1"
    assert variant.text == reword(demo.load_rows()[0]["problem_statement"], "formal")


MASKED = f"{KEY[:5]}****{KEY[-4:]}"  # how a provider echoes a key it refused


def test_a_provider_that_echoes_the_key_leaves_it_off_the_jobs_log(openai, tmp_path):
    """A refused key stops the Job (nothing runs: every task its original only); the
    provider's message, which names the key masked, reaches the log without it."""
    openai.script = [HttpError(401, f"Incorrect API key provided: {MASKED}. You can find "
                                    f"your API key at the provider's site.")]
    ev = evaluation(apiBase=openai.base + "/v1")
    done = _run_as_its_pod(variants_job(ev, runner_version="1"), tmp_path)
    log = done.stdout + done.stderr
    assert done.returncode != 0 and "Incorrect API key provided: [key]" in log, log
    assert KEY not in log and MASKED not in log and KEY[-4:] not in log
    state = variants_state(_job("Failed"), log, TASKS)
    assert state.reason == "VariantsJobFailed" and state.failed == TASKS


@pytest.mark.parametrize("text", [
    f"bad key {KEY}", f"Incorrect API key provided: {MASKED}.", f"key={KEY[:3]}*****{KEY[-2:]}"])
def test_a_reason_is_kept_without_the_key_whole_or_masked(text):
    assert scrub(text, KEY).count("[key]") == 1 and KEY[-2:] not in scrub(text, KEY)


def test_a_reason_without_a_key_is_kept_as_it_is():
    text = "model call failed: Connection refused (errno 111) at http://10.0.0.2/v1 *"
    assert scrub(text, KEY) == scrub(text, None) == text


# --- What the operator reads back -----------------------------------------------------------


def _job(*conditions: str) -> dict:
    return {"metadata": {"name": "demo-variants"},
            "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}


def test_the_operator_waits_until_the_job_has_finished_and_its_log_is_read():
    assert variants_state(None, None, TASKS).reason == "Creating"
    running = variants_state(_job(), None, TASKS)
    assert (running.ready, running.reason) == (False, "Generating")
    for ended in ("Complete", "Failed"):
        reading = variants_state(_job(ended), None, TASKS)
        assert (reading.ready, reading.reason) == (False, "ReadingLog")


@pytest.mark.parametrize(("conditions", "log"), [
    (("Failed",), "Traceback ...\nModelUnreachable\n"),
    (("Complete",), "1/2 made\nno records line here\n"),
])
def test_a_job_that_wrote_no_variants_runs_every_original_only(conditions, log):
    state = variants_state(_job(*conditions), log, TASKS)
    assert state.ready and state.reason == "VariantsJobFailed"
    assert state.variants == {} and state.failed == TASKS


def test_the_records_line_is_found_among_the_progress_lines():
    record = {"status": "ok", "variants": [{"variant_id": "llm-1", "text": "reworded"}]}
    log = f"1/1 {TASKS[0]}: made\n{store.records_line({TASKS[0]: record})}\n1 of 1 tasks\n"
    state = variants_state(_job("Complete"), log, TASKS)
    assert [v.text for v in state.variants[TASKS[0]]] == ["reworded"]
    assert state.failed == (TASKS[1],)
