"""Fixtures of the operator's tests: the real Verified rows its Jobs are built for."""

from __future__ import annotations

import pytest

from proctor import datasets
from proctor.core.model import Instance
from support.paths import VERIFIED_PARQUET, shared


@pytest.fixture(scope="module")
def verified() -> list[Instance]:
    """Every row of the real SWE-bench Verified split (a skip without the shared data)."""
    return list(datasets.load(str(shared(VERIFIED_PARQUET)), max_rows=-1).instances)


@pytest.fixture(scope="module")
def task(verified) -> Instance:
    """The Verified split's first row."""
    return verified[0]
