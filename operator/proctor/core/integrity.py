"""What an agent's patch may not change: the machinery that runs and reports the tests.

The agent's patch is adversarial. Inside one pytest process no reporting channel is
safe from code the patch controls (a conftest.py hook can rewrite every outcome), so
the defence is *what runs*, not how its output is read: before the patch goes near a
repository, `screen_patch` drops every part of it that touches the test machinery,
and records each as a `Finding` (its path, its class, why). The rest of the patch is
applied and graded as usual. It is a pure function of the patch text and the task, so
the process sandbox, the Docker sandbox and a cluster's Job apply the same decision.

The set was chosen against the 500 gold patches of SWE-bench Verified: none of them
loses a hunk (tests/unit/core/test_integrity.py checks it over the dataset). SWE-bench itself
files every path containing "test" under the test patch; the rule here is narrower
(whole path components), so that pytest-dev/pytest's own source (`src/_pytest/`),
which is the library under test, stays the agent's to change.

`guard_eval_script` adds a second line of defence inside the eval script, right before
the test command: whatever the eval script's build step (`pip install -e .` runs the
patch's setup code) did to the same files is undone, and named in the log.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePosixPath

from proctor.core.patches import header_paths, is_symlink_mode


class Threat(StrEnum):
    """The classes of the threat model (docs/threat-model.md)."""

    HOOK = "hook"
    """conftest.py: pytest hooks and fixtures that rewrite outcomes."""
    CONFIG = "config"
    """pytest's configuration: pytest.ini, tox.ini, setup.cfg, pyproject.toml sections."""
    PLUGIN = "plugin"
    """Plugins loaded by entry points (pytest11, *.dist-info, *.egg-info)."""
    STARTUP = "startup"
    """Files Python runs at start-up: sitecustomize, usercustomize, *.pth."""
    SHADOW = "shadow"
    """A top-level module that shadows the test runner or the standard library."""
    TESTS = "tests"
    """Test files (added, edited, deleted, renamed) and the data beside them."""
    SYMLINK = "symlink"
    """A symbolic link (it could point a restored file elsewhere)."""
    BUILD = "build"
    """Test machinery changed by the eval script's build step, undone before the tests."""
    LOG = "log"
    """A forged test log or an early exit."""


@dataclass(frozen=True)
class Finding:
    """One part of a patch that Proctor did not let through, and why."""

    path: str
    kind: Threat
    reason: str
    tampering: bool = True
    """False for what honest agents do and is only set aside: a new test file of their
    own (the task is graded by its own tests; a new file the test command collected
    would run code in the test process, so it is not applied either way)."""


@dataclass(frozen=True)
class Screened:
    """A patch after screening: what is applied, and what was dropped."""

    kept: str
    findings: tuple[Finding, ...] = ()

    @property
    def tampering(self) -> tuple[Finding, ...]:
        """The findings that are tampering (not an honest agent's own new test files)."""
        return tuple(f for f in self.findings if f.tampering)


# Directories whose files are tests or their data; file names that are tests.
TEST_DIRS = frozenset({"test", "tests", "testing"})
_TEST_FILE = re.compile(r"^(?:test_.*|.*_test|tests|runtests)\.py$")
STARTUP_FILES = frozenset({"sitecustomize.py", "usercustomize.py"})
PYTEST_INI = frozenset({"pytest.ini", ".pytest.ini"})
SECTIONED_CONFIG = frozenset({"setup.cfg", "tox.ini", "pyproject.toml"})
BUILD_FILES = frozenset({"setup.py", "setup.cfg", "pyproject.toml"})
# Modules the test command imports before any test: a repository file of that name at
# the top of sys.path (`python -m pytest` puts the repository there) replaces them.
RUNNER_MODULES = frozenset({"pytest", "_pytest", "pluggy", "py", "iniconfig", "xdist",
                            "pytest_django", "nose", "coverage", "hypothesis"})
_IMPORTABLE = (".py", ".pyc", ".so", ".pyd")

_KEY = re.compile(r"^\s*([\w.\-\"']+)\s*=")
_SECTION = re.compile(r"^\s*\[+\s*(?P<name>[^\]]+?)\s*\]+\s*(?:[#;].*)?$")


def is_test_path(path: str) -> bool:
    """A test file or a file in a test directory (what swebench counts as tests, by
    whole path components)."""
    parts = PurePosixPath(path).parts
    return any(p.lower() in TEST_DIRS for p in parts[:-1]) or bool(
        parts and (parts[-1].lower() in TEST_DIRS or _TEST_FILE.match(parts[-1])))


def _shadows(path: str) -> bool:
    """Whether a file at this path would be imported in place of the test runner's
    modules or the standard library's (the repository's root is on sys.path)."""
    parts = PurePosixPath(path).parts
    if not parts or not path.endswith(_IMPORTABLE):
        return False
    top = parts[0].split(".")[0] if len(parts) == 1 else parts[0]
    return top in RUNNER_MODULES or top in sys.stdlib_module_names


def classify_path(path: str, protected: frozenset[str] = frozenset()) -> Finding | None:
    """The whole-file finding for a path the patch touches, or None if it may change."""
    name = PurePosixPath(path).name
    parts = PurePosixPath(path).parts
    if name == "conftest.py":
        return Finding(path, Threat.HOOK, "a conftest.py (pytest hooks and fixtures)")
    if name in STARTUP_FILES or name.endswith(".pth"):
        return Finding(path, Threat.STARTUP, f"{name} runs when Python starts")
    if any(p.endswith((".dist-info", ".egg-info")) for p in parts):
        return Finding(path, Threat.PLUGIN, "package metadata (entry points load plugins)")
    if name in PYTEST_INI:
        return Finding(path, Threat.CONFIG, f"pytest's configuration file {name}")
    if path in protected or is_test_path(path):
        return Finding(path, Threat.TESTS, "a test file or test data")
    if _shadows(path):
        return Finding(path, Threat.SHADOW, f"a module named like {parts[0]!r}, which the "
                                            f"test runner imports")
    return None


@dataclass(frozen=True)
class _Section:
    """One file's part of a patch: its line range, paths, and hunks."""

    start: int
    end: int
    paths: tuple[str, ...]
    symlink: bool
    hunks: tuple[tuple[int, int], ...]
    new: bool = False
    """The section creates its file."""


def _sections(lines: list[str]) -> list[_Section]:
    """Split a unified diff into per-file sections (git's or plain `---`/`+++` ones)."""
    git_style = any(line.startswith("diff --git ") for line in lines)
    starts = [i for i, line in enumerate(lines)
              if (line.startswith("diff --git ") if git_style else
                  line.startswith("--- ") and i + 1 < len(lines)
                  and lines[i + 1].startswith("+++ "))]
    sections = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        paths: list[str] = []
        hunk_starts = []
        for i in range(start, end):
            line = lines[i]
            if line.startswith("@@"):
                hunk_starts.append(i)
            elif not hunk_starts:
                paths += header_paths(line)
        hunks = tuple(zip(hunk_starts, [*hunk_starts[1:], end], strict=False))
        header = lines[start:hunk_starts[0] if hunk_starts else end]
        symlink = any(is_symlink_mode(line) for line in header)
        new = any(line.startswith(("new file mode", "--- /dev/null")) for line in header)
        sections.append(_Section(start, end, tuple(dict.fromkeys(paths)), symlink, hunks, new))
    return sections


def _is_pytest_section(name: str | None) -> bool:
    return name is None or "pytest" in name.lower()


def _config_hunk_finding(path: str, hunk: list[str]) -> Finding | None:
    """Why a hunk of setup.cfg / tox.ini / pyproject.toml / setup.py touches pytest's
    configuration or its plugins, or None when it provably does not.

    A changed line counts as pytest's when the section above it (as far as the hunk
    shows) is pytest's or is not shown at all: a hunk deep in a long section is
    restored, the safe side. In setup.py only entry points are looked for."""
    name = PurePosixPath(path).name
    section: str | None = None
    for line in hunk[1:]:
        body, changed = line[1:], line[:1] in "+-"
        if changed and "pytest11" in body:
            return Finding(path, Threat.PLUGIN, "registers a pytest plugin (pytest11 entry "
                                                "point)")
        if name == "setup.py":
            continue
        match = _SECTION.match(body)
        if match:
            section = match["name"]
            if changed and "pytest" in section.lower():
                return Finding(path, Threat.CONFIG, f"adds or removes pytest's section "
                                                    f"[{section}]")
            continue
        key = _KEY.match(body)
        if changed and body.strip() and (_is_pytest_section(section)
                                          or (key and "pytest" in key[1].lower())):
            where = f"[{section}]" if section else "a section the patch does not show"
            return Finding(path, Threat.CONFIG, f"changes pytest's configuration ({where})")
    return None


def screen_patch(patch: str, protected: Iterable[str] = ()) -> Screened:
    """Drop from `patch` every part that touches the test machinery.

    `protected` names more paths that are tests (the test patch's files, the files of
    the task's FAIL_TO_PASS / PASS_TO_PASS tests). A patch with nothing to drop comes
    back byte for byte."""
    lines = patch.splitlines(keepends=True)
    bare = [line.rstrip("\r\n") for line in lines]
    protected = frozenset(protected)
    drop: set[int] = set()
    findings: list[Finding] = []
    for section in _sections(bare):
        finding = _whole_file_finding(section, protected)
        if finding:
            findings.append(finding)
            drop.update(range(section.start, section.end))
            continue
        path = section.paths[-1] if section.paths else ""
        if PurePosixPath(path).name not in SECTIONED_CONFIG | BUILD_FILES:
            continue
        for start, end in section.hunks:
            finding = _config_hunk_finding(path, bare[start:end])
            if finding:
                findings.append(finding)
                drop.update(range(start, end))
        if section.hunks and all(i in drop for i in range(section.hunks[0][0], section.end)):
            drop.update(range(section.start, section.end))  # no hunk left: no header either
    if not findings:
        return Screened(patch)
    kept = "".join(line for i, line in enumerate(lines) if i not in drop)
    return Screened(kept if kept.strip() else "", tuple(_merge(findings)))


def _whole_file_finding(section: _Section, protected: frozenset[str]) -> Finding | None:
    if section.symlink:
        return Finding(section.paths[-1] if section.paths else "?", Threat.SYMLINK,
                       "a symbolic link")
    for path in section.paths:
        finding = classify_path(path, protected)
        if finding and finding.kind == Threat.TESTS and section.new and path not in protected:
            return Finding(path, Threat.TESTS, "a new test file of the patch's own, set aside "
                                               "(the task's own tests grade it)", False)
        if finding:
            return finding
    return None


def _merge(findings: list[Finding]) -> list[Finding]:
    """One finding per (path, class): the first reason."""
    seen: dict[tuple[str, Threat], Finding] = {}
    for f in findings:
        seen.setdefault((f.path, f.kind), f)
    return list(seen.values())


_TEST_ID_FILE = re.compile(r"^(?P<file>[^:\s\[]+\.py)(?:::|$)")


def protected_paths(test_patch: str, test_ids: Iterable[str]) -> frozenset[str]:
    """The task's own test files: those of its test patch and of its F2P/P2P ids."""
    paths = {p for s in _sections([x.rstrip("\r\n") for x in test_patch.splitlines()])
             for p in s.paths}
    for test_id in test_ids:
        match = _TEST_ID_FILE.match(test_id)
        if match:
            paths.add(match["file"])
    return frozenset(paths)


def patch_paths(patch: str) -> tuple[str, ...]:
    """Every path a patch names."""
    sections = _sections([x.rstrip("\r\n") for x in patch.splitlines()])
    return tuple(dict.fromkeys(p for s in sections for p in s.paths))


START_MARK = ">>>>> Start Test Output"
GUARD_MARK = ">>>>> Proctor Restored "
# What the guard watches, as git pathspecs: files found by name anywhere (new ones are
# deleted), and tracked test files (changed or deleted ones are checked out again).
_NAMED = ("conftest.py", "sitecustomize.py", "usercustomize.py", "*.pth", "pytest.ini",
          ".pytest.ini")
GUARD_NAMED = tuple(f":(glob)**/{n}" for n in _NAMED)
GUARD_TRACKED = GUARD_NAMED + tuple(f":(glob)**/{d}/**" for d in sorted(TEST_DIRS)) + (
    ":(glob)**/test_*.py", ":(glob)**/*_test.py", ":(glob)**/tests.py",
    ":(glob)**/runtests.py")


def _quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


# The interpreter's start-up loaders outside the repository: what Python and pytest load
# by name from every directory on sys.path (taken before the build step, by the
# interpreter the eval script activated, in isolated mode). Files of the repository are
# the git guard's, except entry points, which it does not watch.
_SITE_DIRS = ("python -I -c 'import site, sys; print(chr(10).join(dict.fromkeys("
              "[*sys.path, *site.getsitepackages(), site.getusersitepackages()])))' "
              "2>/dev/null")
_QUIET = '{ PROCTOR_X="${-//[^x]/}"; set +x; } 2>/dev/null'  # no trace of the guard itself
_LOUD = 'if [ -n "$PROCTOR_X" ]; then set -x; fi'
_SITE_GUARD_SETUP = [
    _QUIET,
    f'PROCTOR_REPO="$(pwd -P)"; PROCTOR_SITE="$({_SITE_DIRS})"; '
    'PROCTOR_SNAP="$(mktemp -d 2>/dev/null || echo /tmp/proctor-snap-$$)"',
    "proctor_loaders() {",
    '  printf "%s\\n" "$PROCTOR_SITE" | while IFS= read -r d; do',
    '    [ -n "$d" ] && [ -d "$d" ] || continue',
    '    for f in "$d"/*.pth "$d"/sitecustomize.py "$d"/usercustomize.py '
    '"$d"/*.dist-info/entry_points.txt "$d"/*.egg-info/entry_points.txt; do',
    '      [ -f "$f" ] || continue',
    '      case "$f" in "$PROCTOR_REPO"/*entry_points.txt) ;; "$PROCTOR_REPO"/*) continue ;; esac',
    '      printf "%s\\n" "$f"',
    "    done",
    "  done",
    "}",
    # Each loader's checksum line, all in one sha256sum.
    "proctor_sums() {",
    '  local -a files; mapfile -t files < <(proctor_loaders)',
    '  [ "${#files[@]}" -eq 0 ] || sha256sum -- "${files[@]}"',
    "}",
    # Harmless when new: a .pth of paths inside the repository, or setuptools' editable
    # finder (an editable install writes one when the package's version changes);
    # entry points that load no pytest plugin.
    "proctor_harmless() {",
    '  case "$1" in',
    # (grep answers 1 when no line is left: anything else, an error too, is not harmless)
    '    *.pth) grep -Evq "^(#.*|[[:space:]]*|${PROCTOR_REPO}(/.*)?|import (__editable___'
    '[A-Za-z0-9_]+_finder); __editable___[A-Za-z0-9_]+_finder\\.install\\(\\))$" -- "$1"; '
    '[ $? -eq 1 ] ;;',
    '    *entry_points.txt) grep -q pytest11 -- "$1"; [ $? -eq 1 ] ;;',
    "    *) false ;;",
    "  esac",
    "}",
    'mkdir -p "$PROCTOR_SNAP"; proctor_loaders >"$PROCTOR_SNAP/list"',
    'proctor_sums >"$PROCTOR_SNAP/sums"',
    'tar -cPf "$PROCTOR_SNAP/files.tar" -T "$PROCTOR_SNAP/list" 2>/dev/null',
    _LOUD,
]
_SITE_GUARD = [
    _QUIET,
    'proctor_sums | grep -Fxv -f "$PROCTOR_SNAP/sums" | while IFS= read -r proctor_sum; do',
    '  f="${proctor_sum#*  }"',
    '  proctor_harmless "$f" && continue',
    '  if grep -Fxq -- "$f" "$PROCTOR_SNAP/list"; then',
    '    tar -xPf "$PROCTOR_SNAP/files.tar" -- "$f" && '
    f'echo "{GUARD_MARK}changed $f"',
    "  else",
    f'    rm -f -- "$f" && echo "{GUARD_MARK}added $f"',
    "  fi",
    "done",
    _LOUD,
]


def guard_eval_script(eval_script: str, base_commit: str, test_patch: str) -> str:
    """The eval script with Proctor's guard before its test command.

    The eval script's build step (`pip install -e .`) runs code the patch controls; the
    guard undoes what it did to the watched files since the eval script began (a file
    that already differed from the base commit then, as an image may have it, is left
    alone), except the test patch's own files, which the eval script has just set. Each
    file undone is named in the log, before the Start marker, for the grade step.

    Outside the repository it does the same for the interpreter's start-up loaders on
    sys.path (`*.pth`, `sitecustomize.py`, `usercustomize.py`, entry points declaring
    `pytest11`): one the build step added or changed is removed or restored from a copy
    taken before it, unless it is harmless (see `proctor_harmless`)."""
    start = f": '{START_MARK}'"
    lines = eval_script.split("\n")
    if start not in lines:
        return eval_script
    first_git = next((i for i, line in enumerate(lines) if line.startswith("git ")), None)
    if first_git is None or first_git > lines.index(start):
        return eval_script
    base = _quote(base_commit)
    exclude = " ".join(_quote(f":(exclude,literal){p}") for p in patch_paths(test_patch))
    tracked = " ".join(_quote(s) for s in GUARD_TRACKED)
    named = " ".join(_quote(s) for s in GUARD_NAMED)
    changed = f"git -c core.fileMode=false diff --name-only {base} -- {tracked} {exclude}"
    added = f"git ls-files -o -- {named} {exclude}"
    snapshot = [f"PROCTOR_BEFORE=\"$({changed}; {added})\"", *_SITE_GUARD_SETUP]
    guard = [
        ": 'Proctor guard: undo what the build step did to the test machinery'",
        f"{{ {changed} | sed 's/^/changed /'; {added} | sed 's/^/added /'; }} | "
        "while IFS= read -r proctor_line; do",
        '  proctor_path="${proctor_line#* }"',
        '  printf "%s\\n" "$PROCTOR_BEFORE" | grep -Fxq -- "$proctor_path" && continue',
        f'  git checkout -q {base} -- "$proctor_path" 2>/dev/null || rm -f -- "$proctor_path"',
        f'  echo "{GUARD_MARK}$proctor_line"',
        "done",
        *_SITE_GUARD,
    ]
    at = lines.index(start)
    return "\n".join([*lines[:first_git], *snapshot, *lines[first_git:at], *guard,
                      *lines[at:]])
