"""The 177 real harness runs of the shared data (swebench 2.x logs, no output markers), each
laid out as a Proctor work folder; a skip, for the whole module that imports this, without
the shared data."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from proctor.core.model import Instance, WorkItem
from proctor.datasets import load
from proctor.runner.workdir import WorkDir, write_task
from support.paths import SHARED_DATA, shared

DATA = shared(SHARED_DATA / "swebench-verified")  # every test reads the old logs
DISAGREEMENTS = Path(__file__).with_name("data") / "legacy_log_disagreements.json"
"""The figures the regrading must give, from tools/analyze_legacy_logs.py."""
@cache
def verified() -> dict[str, Instance]:
    return load(str(DATA / "SWE-bench_Verified_test.parquet"), max_rows=-1).by_id


def log_ids() -> list[str]:
    return sorted(p.name for p in (DATA / "logs").iterdir() if p.is_dir())


def old_run_as_work_dir(tmp: Path, instance_id: str) -> WorkDir:
    """An old run laid out as a Proctor work folder (what `runner grade` reads)."""
    src = DATA / "logs" / instance_id
    work = WorkDir(tmp / instance_id)
    write_task(work, verified()[instance_id], WorkItem(id="1" * 32, instance_id=instance_id))
    (work / "patch.diff").write_text((src / "patch.diff").read_text())
    (work / "test_output.txt").write_text((src / "test_output.txt").read_text(errors="replace"))
    return work
