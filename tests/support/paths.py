"""Where things are: the repository, and the shared data beside it (`shared` skips a test
that needs what a fresh clone lacks)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root."""
TESTS = ROOT / "tests"
BENCHMARKS = ROOT / "benchmarks"
EXAMPLES = ROOT / "examples"
SHARED_DATA = ROOT.parent / "shared" / "data"
"""Real data beside the repository (../shared/data): absent from a fresh clone."""
VERIFIED_PARQUET = SHARED_DATA / "swebench-verified" / "SWE-bench_Verified_test.parquet"


def shared(path: Path) -> Path:
    """``path`` (under SHARED_DATA), or a skip naming it where it is absent: a fresh clone
    has no ../shared. Called at a module's top level the skip covers the module; in a test
    or fixture, only what uses it."""
    if not path.exists():
        pytest.skip(f"shared data missing: {path}", allow_module_level=True)
    return path
