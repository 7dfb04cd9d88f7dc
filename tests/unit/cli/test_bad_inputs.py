"""Every command of the CLI, fed bad input (files, flags, folders, datasets), ends in one
line on stderr naming the problem and exit 2, never a traceback (issue 35).

The commands are listed from the CLI's own parser, so a new command without a case here
fails `test_every_command_has_bad_inputs`. Nothing here reaches an agent, Docker, a
cluster or the hub: bad input is refused before any of them is asked.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from proctor.cli.main import build_parser, main
from proctor.core.exits import ExitCode
from proctor.core.model import RESULT_SCHEMA_VERSION
from proctor.datasets import demo, is_local_file
from proctor.k8s.pull import PullError, pull
from proctor.local.progress import LineProgress, progress_for

DEMO_ID = demo.load_rows()[0]["instance_id"]
# An existing folder that no one, root included, may write in (root ignores file modes).
READ_ONLY_FOLDER = "/proc/self"


def evaluation(dataset: str, **spec: object) -> str:
    body = {"dataset": {"name": dataset, "maxRows": 1}, "predictions": {"source": "gold"},
            **spec}
    return json.dumps({"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                       "metadata": {"name": "bad"}, "spec": body})


def prediction(instance_id: str) -> str:
    return json.dumps({"instance_id": instance_id, "model_name_or_path": "m",
                       "model_patch": ""}) + "\n"


LOOPBACK_AGENT = json.dumps({"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
                             "metadata": {"name": "a"},
                             "spec": {"endpoint": "http://127.0.0.1:9009/"}})
LOCKED_AGENT = json.dumps({"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
                           "metadata": {"name": "a"},
                           "spec": {"endpoint": "http://127.0.0.1:9009/", "auth": {
                               "secretRef": {"name": "s", "key": "token"}}}})
FILES = {
    "empty.yaml": "",
    "junk.yaml": "kind: [Evaluation\n",
    "wrong-type.yaml": evaluation("proctor-demo").replace('"maxRows": 1', '"maxRows": "x"'),
    "csv.yaml": evaluation("rows.csv"),
    "parquet.yaml": evaluation("corrupt.parquet"),
    "jsonl.yaml": evaluation("junk.jsonl"),
    "gold.yaml": evaluation("proctor-demo"),
    "loopback.yaml": evaluation("proctor-demo", predictions={"source": "agent"},
                                agentRef={"name": "a"}) + "\n---\n" + LOOPBACK_AGENT,
    "locked.yaml": evaluation("proctor-demo", predictions={"source": "agent"},
                              agentRef={"name": "a"}) + "\n---\n" + LOCKED_AGENT,
    "empty-token": "\n",
    "template.yaml": evaluation("proctor-demo", promptSensitivity={
        "enabled": True, "strategy": "template", "numVariations": 2}),
    "corrupt.parquet": "PAR1 not a parquet file",
    "junk.jsonl": '{"instance_id": "a"}\n\n{"instance_id": \n',
    "junk.json": "[1, 2,",
    "unknown-id.jsonl": prediction(DEMO_ID) + prediction("nobody__nothing-1"),
    "junk.toml": "[participants\n",
    "a-file": "a file where a folder belongs\n",
    "junk-results/results.jsonl": "not a result\n",
    "junk-results/spec.json": "{",
    "kubeconfig": "clusters: [",
}

# (command, case) -> (argv, environment, words the line must hold). {d}: the corpus folder.
CASES: dict[tuple[str, str], tuple[str, dict[str, str], tuple[str, ...]]] = {
    ("run", "missing file"): ("run -f {d}/nothing.yaml --output-dir {d}/out", {},
                              ("nothing.yaml",)),
    ("run", "folder as file"): ("run -f {d}/folder --output-dir {d}/out", {}, ("folder",)),
    ("run", "empty file"): ("run -f {d}/empty.yaml --output-dir {d}/out", {},
                            ("empty.yaml",)),
    ("run", "junk yaml"): ("run -f {d}/junk.yaml --output-dir {d}/out", {}, ("junk.yaml:",)),
    ("run", "wrong type"): ("run -f {d}/wrong-type.yaml --output-dir {d}/out", {},
                            ("maxRows",)),
    ("run", "corrupt parquet"): ("run -f {d}/parquet.yaml --output-dir {d}/out", {},
                                 ("corrupt.parquet", "not a readable parquet file")),
    ("run", "junk jsonl dataset"): ("run -f {d}/jsonl.yaml --output-dir {d}/out", {},
                                    ("junk.jsonl line 3", "not valid JSON")),
    ("run", "missing csv dataset"): ("run -f {d}/csv.yaml --output-dir {d}/out", {},
                                     ("rows.csv does not exist",)),
    ("run", "read-only output folder"): (f"run -f {{d}}/gold.yaml --output-dir "
                                         f"{READ_ONLY_FOLDER}", {}, (READ_ONLY_FOLDER,)),
    ("run", "file as output folder"): ("run -f {d}/gold.yaml --output-dir {d}/a-file", {},
                                       ("a-file is a file",)),
    ("run", "damaged output folder"): ("run -f {d}/gold.yaml --output-dir {d}/junk-results",
                                       {}, ("spec.json is damaged",)),
    ("run", "unknown flag"): ("run -f {d}/gold.yaml --output-dir {d}/out --bogus", {},
                              ("--bogus",)),
    ("run", "bad seconds"): ("run -f {d}/gold.yaml --output-dir {d}/out --agent-wait soon",
                             {}, ("'soon' is not a number of seconds",)),
    ("eval", "unknown instance id"): ("eval -p {d}/unknown-id.jsonl -d proctor-demo "
                                      "--output-dir {d}/out", {},
                                      ("unknown-id.jsonl line 2", "nobody__nothing-1")),
    ("eval", "predictions folder"): ("eval -p {d}/folder -d proctor-demo --output-dir {d}/out",
                                     {}, ("folder is a folder",)),
    ("eval", "junk predictions"): ("eval -p {d}/junk.json -d proctor-demo --output-dir {d}/out",
                                   {}, ("junk.json", "not valid JSON")),
    ("eval", "corrupt parquet"): ("eval -p gold -d {d}/corrupt.parquet --output-dir {d}/out",
                                  {}, ("corrupt.parquet",)),
    ("eval", "missing csv dataset"): ("eval -p gold -d {d}/rows.csv --output-dir {d}/out", {},
                                      ("rows.csv does not exist",)),
    ("eval", "relative csv dataset"): ("eval -p gold -d rows.csv --output-dir {d}/out", {},
                                       ("rows.csv does not exist",)),
    ("eval", "bad run id"): ("eval -p gold -d proctor-demo --run_id ../x --output-dir {d}/out",
                             {}, ("--run_id",)),
    ("eval", "wrong type"): ("eval -p gold -j many", {}, ("'many'",)),
    ("demo", "wrong type"): ("demo --max-concurrent-rows x", {}, ("'x'",)),
    ("demo", "unknown flag"): ("demo --bogus", {}, ("--bogus",)),
    ("analyze", "missing folder"): ("analyze {d}/nothing --output-dir {d}/out", {},
                                    ("nothing",)),
    ("analyze", "junk results"): ("analyze {d}/junk-results --output-dir {d}/out", {},
                                  ("results.jsonl",)),
    ("compare", "missing folders"): ("compare {d}/nothing {d}/none --output-dir {d}/out", {},
                                     ("nothing",)),
    ("compare", "junk results"): ("compare {d}/junk-results {d}/junk-results --output-dir "
                                  "{d}/out", {}, ("results.jsonl",)),
    ("variants generate", "junk yaml"): ("variants generate -f {d}/junk.yaml --output "
                                         "{d}/v.jsonl", {}, ("junk.yaml:",)),
    ("variants generate", "folder as output"): ("variants generate -f {d}/template.yaml "
                                                "--output {d}/folder", {}, ("folder",)),
    ("variants generate", "read-only output"): (f"variants generate -f {{d}}/template.yaml "
                                                f"--output {READ_ONLY_FOLDER}/v.jsonl", {},
                                                (READ_ONLY_FOLDER,)),
    ("variants show", "missing file"): ("variants show {d}/nothing.jsonl", {},
                                        ("nothing.jsonl",)),
    ("variants show", "folder"): ("variants show {d}/folder", {}, ("folder",)),
    ("variants show", "junk file"): ("variants show {d}/junk.jsonl", {}, ("junk.jsonl",)),
    ("validate", "corrupt parquet"): ("validate -f {d}/parquet.yaml --output-dir {d}/out", {},
                                      ("corrupt.parquet",)),
    ("validate", "missing file"): ("validate -f {d}/nothing.yaml --output-dir {d}/out", {},
                                   ("nothing.yaml",)),
    ("scenario import", "missing file"): ("scenario import {d}/nothing.toml", {},
                                          ("nothing.toml",)),
    ("scenario import", "junk toml"): ("scenario import {d}/junk.toml", {}, ("junk.toml",)),
    ("scenario import", "folder"): ("scenario import {d}/folder", {}, ("folder",)),
    ("green serve", "wrong type"): ("green serve --port x", {}, ("'x'",)),
    ("run", "agent token unset"): ("run -f {d}/locked.yaml --output-dir {d}/out", {},
                                   ("PROCTOR_AGENT_TOKEN", "--agent-token-file")),
    ("run", "agent token file missing"): ("run -f {d}/locked.yaml --output-dir {d}/out "
                                          "--agent-token-file {d}/nothing", {},
                                          ("--agent-token-file", "nothing")),
    ("run", "agent token file empty"): ("run -f {d}/locked.yaml --output-dir {d}/out "
                                        "--agent-token-file {d}/empty-token", {},
                                        ("empty-token", "empty")),
    ("agent serve", "token variable unset"): ("agent serve --kind oracle --port 0 "
                                              "--token-env PROCTOR_NO_SUCH_TOKEN", {},
                                              ("PROCTOR_NO_SUCH_TOKEN",)),
    ("agent serve", "unknown kind"): ("agent serve --kind genius", {}, ("genius",)),
    ("agent serve", "llm without model"): ("agent serve --kind llm", {}, ("--model",)),
    ("agent serve", "missing dataset"): ("agent serve --kind oracle --port 0 --dataset "
                                         "{d}/nothing.jsonl", {}, ("nothing.jsonl",)),
    ("export swebench-submission", "missing folder"): (
        "export swebench-submission {d}/nothing --output {d}/sub", {}, ("nothing",)),
    ("export swebench-submission", "junk results"): (
        "export swebench-submission {d}/junk-results --output {d}/sub", {},
        ("junk-results is not a results folder",)),
    ("images build-demo", "unknown flag"): ("images build-demo --bogus", {}, ("--bogus",)),
    ("images build", "missing source"): ("images build --source {d}/nothing", {},
                                         ("nothing",)),
    ("images build", "missing csv dataset"): ("images build -d {d}/rows.csv", {},
                                              ("rows.csv does not exist",)),
    ("operator", "bad reconcile seconds"): ("operator", {"PROCTOR_RECONCILE_SECONDS": "soon"},
                                            ("PROCTOR_RECONCILE_SECONDS is 'soon'",)),
    ("operator", "bad job ttl"): ("operator", {"PROCTOR_JOB_TTL_SECONDS": "-5"},
                                  ("PROCTOR_JOB_TTL_SECONDS",)),
    ("operator", "bad package index cidr"): (
        "operator", {"PROCTOR_PACKAGE_INDEX_CIDRS": "pypi"},
        ("PROCTOR_PACKAGE_INDEX_CIDRS has 'pypi'",)),
    ("operator", "lease without namespace"): ("operator --leader-election",
                                              {"POD_NAMESPACE": ""}, ("POD_NAMESPACE",)),
    ("operator", "lease durations out of order"): (
        "operator --leader-election --lease-namespace ns --renew-deadline 20", {},
        ("renew deadline (20s) < lease duration (15s)",)),
    ("operator", "lease duration not a number"): ("operator --lease-duration soon", {},
                                                  ("'soon'",)),
    ("render", "loopback agent"): ("render -f {d}/loopback.yaml", {},
                                   ("127.0.0.1", "loopback", "--allow-local-endpoints")),
    ("render", "negative items"): ("render -f {d}/gold.yaml --items -1", {}, ("below 0",)),
    ("render", "missing csv dataset"): ("render -f {d}/csv.yaml", {}, ("rows.csv",)),
    ("show", "missing folder"): (f"show {{d}}/nothing {DEMO_ID}", {}, ("nothing",)),
    ("show", "file as folder"): (f"show {{d}}/a-file {DEMO_ID}", {}, ("a-file",)),
    ("show", "junk results"): (f"show {{d}}/junk-results {DEMO_ID}", {}, ("results.jsonl",)),
    ("results pull", "no kubeconfig"): ("results pull demo --output-dir {d}/out",
                                        {"KUBECONFIG": "{d}/nothing"},
                                        ("no cluster", "kubeconfig {d}/nothing")),
    ("results pull", "junk kubeconfig"): ("results pull demo --output-dir {d}/out",
                                          {"KUBECONFIG": "{d}/kubeconfig"}, ("no cluster",)),
    ("crds apply", "no kubeconfig"): ("crds apply", {"KUBECONFIG": "{d}/nothing"},
                                      ("no cluster", "kubeconfig {d}/nothing")),
    ("crds apply", "junk kubeconfig"): ("crds apply --dry-run", {"KUBECONFIG": "{d}/kubeconfig"},
                                        ("no cluster",)),
    ("runner solve", "missing patch file"): ("runner solve --work-dir {d}/work --patch-file "
                                             "{d}/nothing.diff", {}, ("nothing.diff",)),
    ("runner solve", "missing task folder"): ("runner solve --work-dir {d}/work --task-dir "
                                              "{d}/nothing --patch-file ''", {},
                                              ("nothing",)),
    ("runner solve", "empty task id"): ("runner solve --work-dir {d}/work --endpoint "
                                        "http://127.0.0.1:9/ --resume-task ''", {},
                                        ("--resume-task", "empty")),
    ("runner solve", "resume without agent"): ("runner solve --work-dir {d}/work "
                                               "--resume-task t1 --patch-file ''", {},
                                               ("--resume-task", "--endpoint")),
    ("runner test", "missing work folder"): ("runner test --work-dir {d}/nothing", {},
                                             ("nothing",)),
    ("runner grade", "missing work folder"): ("runner grade --work-dir {d}/nothing", {},
                                              ("nothing",)),
    ("runner keep-log", "missing folder"): ("runner keep-log --fifo {d}/nothing/pipe --out "
                                            "{d}/log.txt", {}, ("nothing",)),
}


def leaf_commands(parser: argparse.ArgumentParser, prefix: str = "") -> list[str]:
    """Every command a person can run ("variants show", ...), from the parser itself."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [prefix]
    return [leaf for name, child in subs[0].choices.items()
            for leaf in leaf_commands(child, f"{prefix} {name}".strip())]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "folder").mkdir()
    return root


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_every_command_has_bad_inputs() -> None:
    covered = {command for command, _ in CASES}
    assert set(leaf_commands(build_parser())) - covered == set()


@pytest.mark.parametrize("case", list(CASES), ids=lambda c: f"{c[0]}: {c[1]}")
def test_bad_input_is_one_line_and_exit_2(case: tuple[str, str], corpus: Path, capsys,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    line, env, words = CASES[case]
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(d=corpus))
    monkeypatch.chdir(corpus)
    argv = [arg.format(d=corpus) for arg in line.split()]
    argv = ["" if arg == "''" else arg for arg in argv]
    code, out, err = run_cli(argv, capsys)
    assert "Traceback" not in out + err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word.format(d=corpus) in err, err


class _Cluster:
    """What `pull` asks of a cluster, answering with one Evaluation and its kept results."""

    def __init__(self, results: list[dict]):
        self.results = results

    def get_evaluation(self, namespace: str, name: str) -> dict:
        return json.loads(json.dumps({
            "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"dataset": {"name": "proctor-demo"}, "predictions": {"source": "gold"}}}))

    def list_configmaps(self, namespace: str, labels: dict) -> dict:
        return {"items": [{"data": {"result.json": json.dumps(r)}} for r in self.results]}


def test_results_of_a_newer_schema_are_refused_and_the_folder_kept(tmp_path: Path) -> None:
    out = tmp_path / "pulled"
    out.mkdir()
    (out / "results.jsonl").write_text("kept\n")
    newer = {"schema_version": RESULT_SCHEMA_VERSION + 1, "item_id": "x"}
    with pytest.raises(PullError, match=f"schema version {RESULT_SCHEMA_VERSION + 1}, newer"):
        pull(_Cluster([newer]), "evals", "demo", out)  # type: ignore[arg-type]
    assert (out / "results.jsonl").read_text() == "kept\n"


def test_a_name_that_looks_like_a_file_is_never_taken_for_a_hub_id() -> None:
    for name in ("rows.csv", "data/rows.parquet", "./rows", "/abs/rows", "~/rows.jsonl"):
        assert is_local_file(name), name
    for name in ("SWE-bench/SWE-bench_Verified", "princeton-nlp/SWE-bench_Lite"):
        assert not is_local_file(name), name


def test_variants_generate_needs_no_agent(corpus: Path, tmp_path: Path, capsys) -> None:
    """An Evaluation that asks an agent but names none: the prompts need no agent."""
    manifest = tmp_path / "ev.yaml"
    manifest.write_text(evaluation("proctor-demo", predictions={"source": "agent"},
                                   promptSensitivity={"enabled": True, "strategy": "template",
                                                      "numVariations": 2}))
    code, _, err = run_cli(["variants", "generate", "-f", str(manifest), "--output",
                            str(tmp_path / "v.jsonl")], capsys)
    assert code == 0, err
    assert len((tmp_path / "v.jsonl").read_text().splitlines()) == 1
    code, _, err = run_cli(["run", "-q", "-f", str(manifest), "--output-dir",
                            str(tmp_path / "out")], capsys)
    assert code == 2 and "agentRef is required" in err, "a run still needs its agent"


def test_render_renders_a_loopback_agent_only_as_the_operator_would(corpus: Path,
                                                                    capsys) -> None:
    files = ["render", "-f", str(corpus / "loopback.yaml"), "--items", "1"]
    assert run_cli(files, capsys)[0] == 2
    code, out, _ = run_cli([*files, "--allow-local-endpoints"], capsys)
    assert code == 0 and "http://127.0.0.1:9009/" in out


def test_a_reader_that_leaves_early_ends_the_command_quietly(corpus: Path) -> None:
    """`proctor variants show FILE | head`: no BrokenPipe traceback, SIGPIPE's status."""
    store = corpus / "variants.jsonl"
    if not store.exists():
        assert main(["variants", "generate", "-f", str(corpus / "template.yaml"), "--output",
                     str(store)]) == 0
    shown = subprocess.Popen([sys.executable, "-m", "proctor.cli.main", "variants", "show",
                              str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert shown.stdout is not None
    shown.stdout.close()  # before it writes: its first write finds no reader
    _, err = shown.communicate(timeout=60)
    assert (shown.returncode, err.decode()) == (ExitCode.BROKEN_PIPE, "")


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_off_a_terminal_is_a_line_now_and_then() -> None:
    assert isinstance(progress_for(100, True, "gold", io.StringIO()), LineProgress)
    out, clock = io.StringIO(), _Clock()
    with LineProgress(100, "gold", out, clock) as bar:
        for _ in range(100):
            bar.set_postfix_str("x: resolved")
            bar.update()
    lines = out.getvalue().splitlines()
    assert len(lines) == 10, "one line per tenth, not one per item"
    assert lines[-1] == "gold: 100/100 items (100%), 0 s; last: x: resolved"
    out, clock = io.StringIO(), _Clock()
    slow = LineProgress(1000, None, out, clock)
    for _ in range(3):
        clock.now += 31
        slow.update()
    assert len(out.getvalue().splitlines()) == 3, "and at least one each 30 s"
