"""Every command in the README is run by a test, or the README says why not.

A command is a line of a ```bash block (continuations joined, comments cut). It is
either run here, or named in RUN_ELSEWHERE with the test that runs it, or the text
around its block says it is "not run by the tests" (it needs a cluster, Docker's
images, a model's key). And every `proctor` command shown accepts the options it is
shown with: each one is in that command's --help.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from proctor.cli.main import main
from support.paths import ROOT
from support.ports import free_port

README = ROOT / "README.md"
PROCTOR = Path(sys.executable).parent / "proctor"
NOT_RUN = "not run by the tests"

# A README command -> where it runs: "file::test" (the test runs the same command, or the
# code behind it in-process) or a file that holds the command itself.
RUN_ELSEWHERE = {
    "bash scripts/demo.sh": "tests/e2e/test_demo.py::test_demo_leaderboard_and_results",
    "bash scripts/test.sh": ".ci/run",
    "proctor demo --reliability --output-dir D":
        "tests/e2e/test_demo.py::test_reliability_demo_gives_the_expected_figures",
    "proctor analyze D/oracle D/sensitive --output-dir D/analysis-again":
        "tests/unit/analysis/test_analysis.py::"
        "test_analyze_writes_every_file_and_matches_an_independent_recompute",
    "proctor compare D/oracle D/sensitive --output-dir cmp":
        "tests/unit/analysis/test_analysis.py::test_compare_matches_cells_and_writes_report_and_csvs",
    "proctor eval -p gold -d proctor-demo --output-dir D":
        "tests/unit/cli/test_eval.py::test_gold_on_the_demo_resolves_all_and_matches_swebench",
    "proctor scenario import scenario.toml --output-dir manifests/":
        "tests/unit/formats/test_agentbeats.py::test_every_real_scenario_imports",
    "proctor green serve --host 0.0.0.0 --port 9009 --card-url URL":
        "tests/unit/green/test_green.py::test_an_assessment_equals_proctor_run",
    "proctor export swebench-submission RESULTS --output D":
        "tests/unit/formats/test_agentbeats.py::test_export_of_a_demo_run_gives_the_submission_layout",
    "proctor run -f examples/demo-gold.yaml --output-dir results/gold --upload "
    "s3://proctor-results/runs":
        "tests/unit/store/test_object_store.py::test_a_demo_run_uploads_and_pulls_back_byte_for_byte",
    "proctor results pull s3://proctor-results/runs/gold --output-dir results/gold-again":
        "tests/unit/store/test_object_store.py::test_a_demo_run_uploads_and_pulls_back_byte_for_byte",
}
EVALUATE_YOUR_AGENT = (
    "proctor agent serve --kind mixed --port 9009 &",
    "proctor run -f examples/demo-agent.yaml -f examples/agent.yaml --output-dir results/mine",
)
RUN_HERE = {*EVALUATE_YOUR_AGENT}


def bash_blocks(text: str) -> list[tuple[str, list[str]]]:
    """Each ```bash block: the text around it (the paragraphs before and after) and its
    commands."""
    parts = re.split(r"^```bash\n(.*?)^```\n", text, flags=re.M | re.S)
    blocks = []
    for i in range(1, len(parts), 2):
        before = parts[i - 1].rstrip().split("\n\n")[-1]
        after = parts[i + 1].lstrip().split("\n\n")[0]
        code = parts[i].replace("\\\n", " ")
        commands = [" ".join(line.split("  #")[0].split()) for line in code.splitlines()]
        blocks.append((before + "\n" + after, [c for c in commands if c]))
    return blocks


def readme_commands() -> list[tuple[str, str]]:
    return [(around, command) for around, commands in bash_blocks(README.read_text())
            for command in commands]


def test_the_readme_has_commands_and_keeps_its_two_quick_start_commands() -> None:
    commands = [command for _, command in readme_commands()]
    assert commands[:2] == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    assert len(commands) > 10


def test_every_readme_command_is_run_by_a_test_or_says_why_not() -> None:
    unaccounted = [command for around, command in readme_commands()
                   if command not in RUN_HERE and command not in RUN_ELSEWHERE
                   and NOT_RUN not in " ".join(around.split())]
    assert unaccounted == [], "run these in a test, or say in the README why not"


def test_the_tests_named_for_readme_commands_exist() -> None:
    shown = {command for _, command in readme_commands()}
    assert set(RUN_ELSEWHERE) | RUN_HERE <= shown, "a command the README no longer shows"
    for command, where in RUN_ELSEWHERE.items():
        file, _, test = where.partition("::")
        text = (ROOT / file).read_text()
        assert (f"def {test}(" in text) if test else (command in text), where


def _command_path(words: list[str]) -> list[str]:
    """The subcommands at the start of `proctor ...`'s arguments (`agent serve`)."""
    path: list[str] = []
    choices = {"run", "eval", "demo", "analyze", "compare", "agent", "images", "scenario",
               "green", "export", "results", "render", "show", "variants", "validate"}
    for word in words:
        if word not in choices:
            break
        path.append(word)
        done = subprocess.run([str(PROCTOR), *path, "--help"], capture_output=True,
                              text=True, timeout=60)
        usage = done.stdout.split("\n\n")[0]
        found = re.search(r"\{([\w,-]+)\}", usage)
        choices = set(found.group(1).split(",")) if found else set()
    return path


def test_every_proctor_command_shown_takes_the_options_it_is_shown_with() -> None:
    shown = sorted({command.removesuffix(" &") for _, command in readme_commands()
                    if command.startswith("proctor ")})
    for command in shown:
        words = command.split()[1:]
        path = _command_path(words)
        assert path, command
        done = subprocess.run([str(PROCTOR), *path, "--help"], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, (command, done.stderr)
        for option in (w for w in words if w.startswith("-")):
            assert re.search(rf"(?<![\w-]){re.escape(option)}\b", done.stdout), (command, option)


def _wait_for_card(url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url + ".well-known/agent-card.json", timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_evaluate_your_agent_runs_as_shown(tmp_path: Path, monkeypatch, capsys) -> None:
    """The README's "Evaluate your agent" commands, on a free port instead of 9009 (a
    copy of examples/agent.yaml names it) so that tests run side by side."""
    port = free_port()
    serve, run = (command.removesuffix(" &").split()[1:] for command in EVALUATE_YOUR_AGENT)
    serve[serve.index("9009")] = str(port)
    agent = yaml.safe_load((ROOT / "examples" / "agent.yaml").read_text())
    assert agent["spec"]["endpoint"] == "http://127.0.0.1:9009/"
    agent["spec"]["endpoint"] = f"http://127.0.0.1:{port}/"
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(agent))
    run[run.index("examples/agent.yaml")] = str(tmp_path / "agent.yaml")
    run[run.index("results/mine")] = str(tmp_path / "mine")
    server = subprocess.Popen([str(PROCTOR), *serve], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        _wait_for_card(f"http://127.0.0.1:{port}/")
        monkeypatch.chdir(ROOT)
        assert main([*run, "-q"]) == 0
    finally:
        server.terminate()
        server.wait(timeout=30)
    lines = (tmp_path / "mine" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 10
    assert (tmp_path / "mine" / "report.md").exists()


@pytest.mark.parametrize("command", ["bash scripts/demo.sh", "bash scripts/test.sh"])
def test_the_quick_start_scripts_exist(command: str) -> None:
    assert (ROOT / command.split()[1]).is_file()
