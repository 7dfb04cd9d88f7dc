"""The reference agents, served for real and asked with Proctor's own client (and a 0.3 one).

The mixed agent's answers go through Proctor's test step and grader, and must
produce every non-error outcome across the demo dataset.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from proctor.a2a.client import SolveResult, solve
from proctor.a2a.message import TaskMessage, build_message
from proctor.agents.answers import TaskRequest
from proctor.agents.kinds import Tasks, mixed_recipes, solver_for, wording_chance
from proctor.agents.server import start_reference_agent
from proctor.core.model import ErrorKind, Instance, Outcome, WorkItem
from proctor.datasets import demo
from proctor.runner.grade import grade_work_dir
from proctor.runner.workdir import WorkDir, write_patch, write_task, write_test_step
from proctor.sandboxes import process
from proctor.variants.template import reword, style_ids
from support.a2a03 import sdk03
from support.ports import free_port

INSTANCES = [Instance.model_validate(row) for row in demo.load_rows()]
BY_ID = {i.instance_id: i for i in INSTANCES}
NON_ERROR = {o for o in Outcome if o != Outcome.ERROR}


@pytest.fixture(scope="session")
def venv03(request) -> Path:
    """A venv with a2a-sdk 0.3 (made once, kept in pytest's cache folder)."""
    return sdk03.ensure_venv(request.config.cache.mkdir("a2a-sdk-0.3-venv"))


def message_for(instance: Instance, repo_dir: str | None = None) -> TaskMessage:
    return build_message(instance, instance.problem_statement, "original", True, repo_dir)


def ask(url: str, message: TaskMessage, **kw) -> SolveResult:
    return asyncio.run(solve(url, message, timeout_s=60, **kw))


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "advice.detachedHead=false", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout


def clone(instance: Instance, dest: Path) -> Path:
    bundle = demo.bundle_path(instance.repo)
    assert bundle is not None
    subprocess.run(["git", "clone", "-q", str(bundle), str(dest)], check=True)
    git(dest, "checkout", "-q", instance.base_commit)
    return dest


def apply(repo: Path, patch: str) -> Path:
    subprocess.run(["git", "apply", "-"], input=patch, text=True, cwd=repo, check=True)
    return repo


@pytest.fixture(scope="module")
def oracle():
    with start_reference_agent("oracle") as server:
        yield server.url


@pytest.mark.parametrize("streaming", [True, False])
def test_oracle_answers_every_demo_task_with_its_gold_patch(oracle, streaming):
    for instance in INSTANCES:
        result = ask(oracle, message_for(instance), streaming=streaming)
        assert result.patch == instance.patch, result.summary
        assert result.state == "completed" and result.error_kind is None
        assert "patch from artifact answer" in result.summary
        assert result.usage is not None and result.usage.output_tokens


def test_oracle_finds_the_task_by_its_problem_text_alone(oracle):
    # The Agentbeats green agent sends text only, without a data part.
    instance = BY_ID["proctor-demo__textkit-3"]
    text = message_for(instance, "/repos/textkit").text
    assert ask(oracle, TaskMessage(text)).patch == instance.patch


def test_oracle_rejects_a_task_it_does_not_know(oracle):
    result = ask(oracle, TaskMessage("Fix it", {"instance_id": "nobody__nothing-1"}))
    assert (result.patch, result.state, result.error_kind) == ("", "rejected", None)


def test_oracle_knows_the_tasks_of_a_dataset_file(tmp_path):
    row = dict(demo.load_rows()[0], instance_id="acme__calc-7",
               patch="diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with start_reference_agent("oracle", dataset_files=[str(path)]) as server:
        result = ask(server.url, TaskMessage("x", {"instance_id": "acme__calc-7"}))
    assert result.patch == row["patch"]


def test_noop_answers_without_a_patch():
    with start_reference_agent("noop") as server:
        result = ask(server.url, message_for(INSTANCES[0]))
    assert (result.patch, result.state, result.error_kind) == ("", "completed", None)
    assert result.detail == "the agent answered without a patch"


@pytest.mark.parametrize("streaming", [True, False])
def test_oracle_serves_an_a2a_sdk_0_3_client(venv03, oracle, streaming):
    instance = INSTANCES[0]
    msg = message_for(instance)
    got = sdk03.ask03(venv03, oracle, msg.text, msg.data, streaming=streaming)
    assert got["protocol_version"].startswith("0.3")
    task = got["reply"]  # the 0.3 client's own view of the task, streamed or not
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    parts = [p for a in task["artifacts"] for p in a["parts"]]
    assert parts == [{"kind": "data", "data": {"patch": instance.patch}}]


@pytest.fixture(scope="module")
def editor():
    with start_reference_agent("editor") as server:
        yield server.url


@pytest.mark.parametrize("instance", INSTANCES, ids=lambda i: i.instance_id)
def test_editor_edits_the_checkout_and_answers_with_its_diff(editor, tmp_path, instance):
    repo = clone(instance, tmp_path / "shared")
    result = ask(editor, message_for(instance, str(repo)))
    assert result.error_kind is None and result.patch, result.summary
    assert "patch from artifact answer" in result.summary
    gold = apply(clone(instance, tmp_path / "gold"), instance.patch)
    again = apply(clone(instance, tmp_path / "again"), result.patch)
    touched = {line.split(" b/", 1)[1] for line in instance.patch.splitlines()
               if line.startswith("diff --git ")}
    for path in touched:
        # The shared checkout was really edited, and the answer reproduces the gold change.
        assert (repo / path).read_text() == (gold / path).read_text(), path
        assert (again / path).read_text() == (gold / path).read_text(), path
    assert git(repo, "status", "--porcelain", "--untracked-files=no").strip()
    assert not git(repo, "diff", "--cached").strip()  # its own index is left alone


def test_editor_without_repo_dir_fails_the_task(editor):
    result = ask(editor, message_for(INSTANCES[0]))
    assert result.error_kind == ErrorKind.AGENT and result.state == "failed"
    assert "REPO_DIR" in (result.error or "")


def _grade(instance: Instance, patch: str, root: Path) -> Outcome:
    work = WorkDir(root / instance.instance_id)
    write_task(work, instance, WorkItem(id="0" * 32, instance_id=instance.instance_id))
    write_patch(work, patch)
    write_test_step(work, instance, 120)
    run = process.ProcessSandbox().run_test_step(work, instance, 120)
    assert run.error is None, run.error
    return grade_work_dir(work).outcome


def test_mixed_answers_give_every_non_error_outcome(tmp_path):
    with start_reference_agent("mixed") as server:
        answers = {i.instance_id: ask(server.url, message_for(i)) for i in INSTANCES}
    for answer in answers.values():
        assert answer.error_kind is None, answer.summary
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = dict(zip(BY_ID, pool.map(
            lambda i: _grade(i, answers[i.instance_id].patch, tmp_path), INSTANCES), strict=True))
    expected = {iid: Outcome(r["expect"]) for iid, r in mixed_recipes().items()}
    assert outcomes == expected
    assert set(outcomes.values()) == NON_ERROR
    found_in = {a.summary.split("patch from ")[1].split(" (")[0]
                for a in answers.values() if a.patch}
    assert found_in == {"artifact answer", "status message"}
    assert {a.state for a in answers.values()} == {"completed", "rejected", "input-required"}


def test_mixed_uses_every_answer_shape():
    shapes = {(r.get("form"), r.get("where", "artifact"), r.get("data_key", "patch"))
              for r in mixed_recipes().values() if r.get("patch")}
    assert {form for form, _, _ in shapes} == {"data", "file", "fence", "bare", "tag"}
    assert {key for form, _, key in shapes if form == "data"} == {"patch", "model_patch"}


def test_agent_serve_command_starts_the_way_agentbeats_starts_agents():
    port = free_port()
    card_url = "http://reference-oracle:9009/"  # the in-cluster name, unreachable from here
    argv = [sys.executable, "-m", "proctor.agents", "serve", "--kind", "oracle",
            "--host", "127.0.0.1", "--port", str(port), "--card-url", card_url]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        sdk03.wait_until_up(url, proc)
        with urllib.request.urlopen(url + ".well-known/agent-card.json") as response:
            card = json.load(response)
        assert card["url"] == card_url and card["protocolVersion"].startswith("0.3")
        versions = {i["protocolVersion"] for i in card["supportedInterfaces"]}
        assert versions == {"1.0", "0.3"}
        assert {i["url"] for i in card["supportedInterfaces"]} == {card_url}
        result = ask(url, message_for(INSTANCES[1]))
        assert result.patch == INSTANCES[1].patch
    finally:
        sdk03.stop(proc)


def test_add_agent_parser_builds_the_agent_command():
    import argparse

    from proctor.agents.cli import add_agent_parser, cmd_agent_serve

    parser = argparse.ArgumentParser(prog="proctor")
    add_agent_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["agent", "serve", "--kind", "mixed", "--port", "9100",
                              "--dataset", "a.jsonl", "--dataset", "b.jsonl"])
    assert (args.kind, args.host, args.port, args.card_url) == ("mixed", "127.0.0.1", 9100, None)
    assert args.dataset == ["a.jsonl", "b.jsonl"] and args.func is cmd_agent_serve
    with pytest.raises(SystemExit):
        parser.parse_args(["agent", "serve", "--kind", "genius"])


def _request(instance: Instance, text: str, variant: str = "original") -> TaskRequest:
    msg = build_message(instance, text, variant, True, None, task_data=True)
    return TaskRequest(msg.text, msg.data)


def test_sensitive_chance_depends_on_the_wording_only():
    instance = INSTANCES[0]
    assert wording_chance(instance.problem_statement, instance.problem_statement,
                          instance.instance_id) == 0.75
    chances = {vid: wording_chance(instance.problem_statement, reword(
        instance.problem_statement, vid), instance.instance_id) for vid in style_ids()}
    assert all(0.1 <= c <= 0.9 for c in chances.values()) and len(set(chances.values())) > 1
    again = wording_chance(instance.problem_statement,
                           reword(instance.problem_statement, "terse"), instance.instance_id)
    assert again == chances["terse"]


def test_sensitive_without_a_seed_solves_exactly_the_likely_wordings():
    solve = solver_for("sensitive", Tasks.load())
    for instance in INSTANCES[:4]:
        for vid in ("formal", "terse", "steps"):
            text = reword(instance.problem_statement, vid)
            chance = wording_chance(instance.problem_statement, text, instance.instance_id)
            answer = solve(_request(instance, text, vid))
            assert (answer.patch == instance.patch) == (chance >= 0.5)
            assert answer.patch in ("", instance.patch)


def test_sensitive_with_a_seed_draws_each_answer_reproducibly():
    instance = INSTANCES[1]
    text = reword(instance.problem_statement, "formal")

    def draws(seed: int) -> list[bool]:
        solve = solver_for("sensitive", Tasks.load(), seed=seed)
        return [bool(solve(_request(instance, text, "formal")).patch) for _ in range(40)]

    first = draws(3)
    assert first == draws(3) and first != draws(4)
    chance = wording_chance(instance.problem_statement, text, instance.instance_id)
    assert abs(sum(first) / 40 - chance) < 0.3 and 0 < sum(first) < 40


def test_sensitive_cannot_tell_a_reworded_task_without_task_data():
    instance = INSTANCES[2]
    with start_reference_agent("sensitive") as server:
        text = reword(instance.problem_statement, "steps")
        msg = build_message(instance, text, "steps", True, None)  # no data part
        result = ask(server.url, msg)
    assert (result.patch, result.state) == ("", "rejected")
