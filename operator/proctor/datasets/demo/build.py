"""Build the bundled demo dataset from the plain-file sources under ``repos/``.

Usage::

    python -m proctor.datasets.demo.build            # rebuild the shipped data/ folder
    python -m proctor.datasets.demo.build --out DIR  # build into another folder
    python -m proctor.datasets.demo.build --check    # verify the shipped data is up to date

Source layout (``repos/<name>/``)::

    repo.json                 name, image and the list of commits
    commits/<n>/...           files added or changed by commit n (an overlay)
    tasks/<n>/task.json       base commit number, version, created_at, difficulty,
                              FAIL_TO_PASS and PASS_TO_PASS
    tasks/<n>/problem_statement.md
    tasks/<n>/hints.md        optional
    tasks/<n>/patch/...       fixed source files (full files) -> gold ``patch``
    tasks/<n>/test_patch/...  new or changed test files (full files) -> ``test_patch``

A file or folder whose name starts with ``dot-`` is written with a leading
``.`` instead (``dot-gitignore`` becomes ``.gitignore``), so that the sources
carry no dotfiles of their own.

Every git object is created with a fixed identity, fixed dates and a clean
git configuration, so the commit hashes are the same on every machine.
Outputs: one ``<name>.bundle`` per repository and ``dataset.jsonl`` (one
SWE-bench 5 row per task).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parent
REPOS_DIR = DEMO_DIR / "repos"
DATA_DIR = DEMO_DIR / "data"

DATASET_NAME = "proctor-demo"
DATASET_FILE = "dataset.jsonl"

AUTHOR_NAME = "Proctor Demo"
AUTHOR_EMAIL = "demo@proctor.invalid"

HEREDOC = "EOF_114329324912"
# Third-party pytest plugins of whatever interpreter runs the script stay out:
# the demo tests need plain pytest, and plugins would slow or perturb the runs.
PYTEST_COMMAND = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -rA -p no:cacheprovider"
START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"

# Key order follows the SWE-bench 5 parquet schema.
ROW_KEYS = (
    "repo",
    "instance_id",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "hints_text",
    "created_at",
    "version",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "environment_setup_commit",
    "difficulty",
    "eval_script",
    "log_parser",
    "eval_type",
    "image",
)

_GIT_CONFIG = (
    "-c", "core.autocrlf=false",
    "-c", "core.safecrlf=false",
    "-c", "core.quotePath=true",
    "-c", "commit.gpgSign=false",
    "-c", "tag.gpgSign=false",
    "-c", "diff.noprefix=false",
    "-c", "diff.mnemonicPrefix=false",
    "-c", "diff.renames=false",
    "-c", "diff.algorithm=myers",
    "-c", "init.defaultBranch=main",
)  # fmt: skip


class BuildError(RuntimeError):
    """The sources under ``repos/`` are inconsistent."""


def _git_env(date: str | None = None) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("GIT_") and key not in ("LANG", "LANGUAGE") and key[:3] != "LC_"
    }
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_AUTHOR_NAME=AUTHOR_NAME,
        GIT_AUTHOR_EMAIL=AUTHOR_EMAIL,
        GIT_COMMITTER_NAME=AUTHOR_NAME,
        GIT_COMMITTER_EMAIL=AUTHOR_EMAIL,
        LC_ALL="C",
        TZ="UTC",
    )
    if date is not None:
        env["GIT_AUTHOR_DATE"] = date
        env["GIT_COMMITTER_DATE"] = date
    return env


def git(repo: Path, *args: str, date: str | None = None) -> str:
    """Run git in ``repo`` with a neutral configuration and return its stdout."""
    proc = subprocess.run(
        ["git", *_GIT_CONFIG, *args],
        cwd=repo,
        env=_git_env(date),
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
    )
    if proc.returncode != 0:
        raise BuildError(f"git {' '.join(args)} failed in {repo.name}: {proc.stderr.strip()}")
    return proc.stdout


def _target_name(part: str) -> str:
    return "." + part[len("dot-") :] if part.startswith("dot-") else part


def _overlay_files(src: Path) -> dict[str, bytes]:
    """Map repository-relative paths to file contents (LF line endings)."""
    files = {}
    for path in sorted(src.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        rel = "/".join(_target_name(part) for part in path.relative_to(src).parts)
        files[rel] = path.read_bytes().replace(b"\r\n", b"\n")
    return files


def _write_overlay(repo: Path, files: dict[str, bytes]) -> None:
    for rel, content in files.items():
        target = repo / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.unlink()
        target.write_bytes(content)


def _read_text(path: Path) -> str:
    return path.read_bytes().decode("utf-8").replace("\r\n", "\n")


def _strip_index_lines(diff: str) -> str:
    """Drop ``index <sha>..<sha>`` header lines, as SWE-bench patches do."""
    out = []
    in_header = False
    for line in diff.splitlines(keepends=True):
        if line.startswith("diff --git "):
            in_header = True
        elif line.startswith("@@"):
            in_header = False
        if in_header and line.startswith("index "):
            continue
        out.append(line)
    return "".join(out)


def _diff_overlay(repo: Path, base: str, files: dict[str, bytes]) -> tuple[str, list[str]]:
    """Return the diff that ``files`` make against ``base`` and the new paths."""
    git(repo, "checkout", "-q", "--detach", base)
    _write_overlay(repo, files)
    git(repo, "add", "-A")
    changed = git(repo, "diff", "--cached", "--name-only", "--no-renames", base).split()
    diff = git(
        repo, "diff", "--cached", "--no-color", "--no-ext-diff", "--no-textconv",
        "--no-renames", "-U3", "--src-prefix=a/", "--dst-prefix=b/", base,
    )  # fmt: skip
    git(repo, "reset", "-q", "--hard", base)
    git(repo, "clean", "-q", "-fdx")
    existing = set(git(repo, "ls-tree", "-r", "--name-only", base).split("\n"))
    new = [rel for rel in sorted(files) if rel not in existing]
    unchanged = sorted(set(files) - set(changed))
    if unchanged:
        raise BuildError(f"overlay files identical to base: {unchanged}")
    return _strip_index_lines(diff), new


def make_eval_script(
    base_commit: str, test_patch: str, test_files: list[str], new: list[str]
) -> str:
    """Return a portable SWE-bench 5 style eval script (repository at ``$TESTBED``)."""
    existing = [path for path in test_files if path not in new]
    reset = []
    if existing:
        reset.append(f"git checkout {base_commit} -- {' '.join(existing)}")
    if new:
        reset.append(f"rm -f -- {' '.join(new)}")
    lines = [
        "#!/bin/bash",
        "set -uxo pipefail",
        'cd "$TESTBED"',
        "git status",
        f"git -c core.fileMode=false diff {base_commit}",
        *reset,
        f"git apply -v - <<'{HEREDOC}'",
        test_patch.rstrip("\n"),
        HEREDOC,
        f": '{START_TEST_OUTPUT}'",
        f"{PYTEST_COMMAND} {' '.join(test_files)}",
        f": '{END_TEST_OUTPUT}'",
        *reset,
    ]
    return "\n".join(lines) + "\n"


def _load_json(path: Path) -> dict:
    return json.loads(_read_text(path))


def _build_repo(spec_dir: Path, work: Path) -> tuple[Path, list[dict]]:
    """Create one repository under ``work`` and return it with its dataset rows."""
    spec = _load_json(spec_dir / "repo.json")
    name = spec["name"]
    repo = work / name
    repo.mkdir()
    git(repo, "init", "-q")

    commits = []
    for commit in spec["commits"]:
        _write_overlay(repo, _overlay_files(spec_dir / commit["tree"]))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "--no-verify", "-m", commit["message"], date=commit["date"])
        commits.append(git(repo, "rev-parse", "HEAD").strip())
    head = commits[-1]

    task_dirs = sorted(
        (path for path in (spec_dir / "tasks").iterdir() if path.is_dir()),
        key=lambda path: int(path.name),
    )
    rows = []
    for task_dir in task_dirs:
        task = _load_json(task_dir / "task.json")
        number = int(task_dir.name)
        base = commits[task["base"] - 1]
        patch, new_src = _diff_overlay(repo, base, _overlay_files(task_dir / "patch"))
        test_files_map = _overlay_files(task_dir / "test_patch")
        test_patch, new_tests = _diff_overlay(repo, base, test_files_map)
        test_files = sorted(test_files_map)
        bad = [path for path in test_files if not path.startswith("tests/")]
        bad += [path for path in _overlay_files(task_dir / "patch") if path.startswith("tests/")]
        if bad:
            raise BuildError(f"{name} task {number}: misplaced files {bad}")
        if new_src:
            raise BuildError(f"{name} task {number}: gold patch may not add files {new_src}")
        hints = task_dir / "hints.md"
        row = {
            "repo": f"{DATASET_NAME}/{name}",
            "instance_id": f"{DATASET_NAME}__{name}-{number}",
            "base_commit": base,
            "patch": patch,
            "test_patch": test_patch,
            "problem_statement": _read_text(task_dir / "problem_statement.md"),
            "hints_text": _read_text(hints).strip() if hints.exists() else "",
            "created_at": task["created_at"],
            "version": task["version"],
            "FAIL_TO_PASS": json.dumps(task["FAIL_TO_PASS"]),
            "PASS_TO_PASS": json.dumps(task["PASS_TO_PASS"]),
            "environment_setup_commit": base,
            "difficulty": task["difficulty"],
            "eval_script": make_eval_script(base, test_patch, test_files, new_tests),
            "log_parser": "parse_log_pytest",
            "eval_type": "pass_and_fail",
            "image": f"{spec['image']}:{task['version']}",
        }
        rows.append({key: row[key] for key in ROW_KEYS})

    git(repo, "checkout", "-q", "main")
    if git(repo, "rev-parse", "HEAD").strip() != head:
        raise BuildError(f"{name}: main moved while building tasks")
    return repo, rows


def bundle_heads(bundle: Path) -> str:
    """Return ``git bundle list-heads`` for ``bundle`` (refs and their commits)."""
    return git(bundle.parent, "bundle", "list-heads", str(bundle))


def repo_specs(repos_dir: Path = REPOS_DIR) -> list[Path]:
    """Return the source folders of the demo repositories, in dataset order."""
    specs = sorted(path.parent for path in repos_dir.glob("*/repo.json"))
    if not specs:
        # The sources ship in the source tree only, not in the installed package.
        raise FileNotFoundError(f"no demo repository sources under {repos_dir}: rebuild "
                                f"from a source checkout of Proctor")
    return specs


def build(out_dir: Path | str = DATA_DIR, repos_dir: Path = REPOS_DIR) -> list[dict]:
    """Build every bundle and ``dataset.jsonl`` into ``out_dir``; return the rows.

    An existing bundle whose refs already match is left untouched, so that a
    rebuild with another git version does not rewrite identical history.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="proctor-demo-") as tmp:
        work = Path(tmp)
        for spec_dir in repo_specs(repos_dir):
            repo, repo_rows = _build_repo(spec_dir, work)
            rows.extend(repo_rows)
            fresh = work / f"{repo.name}.bundle"
            git(repo, "bundle", "create", str(fresh), "HEAD", "main")
            target = out_dir / f"{repo.name}.bundle"
            if not target.exists() or bundle_heads(target) != bundle_heads(fresh):
                shutil.copyfile(fresh, target)
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    (out_dir / DATASET_FILE).write_bytes(text.encode("utf-8"))
    return rows


def check(data_dir: Path = DATA_DIR) -> list[str]:
    """Rebuild into a temporary folder; return differences from ``data_dir``."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="proctor-demo-check-") as tmp:
        fresh = Path(tmp)
        build(fresh)
        for path in sorted(fresh.iterdir()):
            shipped = data_dir / path.name
            if not shipped.exists():
                problems.append(f"missing: {path.name}")
            elif path.suffix == ".bundle":
                if bundle_heads(shipped) != bundle_heads(path):
                    problems.append(f"stale bundle: {path.name}")
            elif shipped.read_bytes() != path.read_bytes():
                problems.append(f"stale file: {path.name}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proctor.datasets.demo.build",
                                     description=__doc__)
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="output folder")
    parser.add_argument("--check", action="store_true", help="verify the shipped data")
    args = parser.parse_args(argv)
    if args.check:
        problems = check(args.out)
        for problem in problems:
            print(problem, file=sys.stderr)
        print("demo dataset is up to date" if not problems else "demo dataset is stale")
        return 1 if problems else 0
    rows = build(args.out)
    print(f"wrote {len(rows)} tasks to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
