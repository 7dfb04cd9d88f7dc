"""The operator benchmark's own arithmetic: the durations it gives the real split, and the
correctness check that makes a stress run fail (the run itself is a script, not a test)."""

from __future__ import annotations

import json
import sys

from support.paths import BENCHMARKS, SHARED_DATA, shared

sys.path.insert(0, str(BENCHMARKS))
from operator_sim import ROWS, Record, check, task_seconds, utilisation

RUNS = [{"iid": "django__django-1", "repo": "django", "total": 100.0},
        {"iid": "django__django-2", "repo": "django", "total": 300.0},
        {"iid": "sympy__sympy-1", "repo": "sympy", "total": 50.0}]


def test_recorded_tasks_keep_their_time_and_others_borrow_their_repositorys() -> None:
    tasks = ["django__django-1", "django__django-9", "sympy__sympy-7", "pallets__flask-1"]
    seconds = task_seconds(tasks, RUNS, 20)
    assert seconds["django__django-1"] == 5.0
    assert seconds["django__django-9"] in (5.0, 15.0)  # a django time
    assert seconds["sympy__sympy-7"] == 2.5
    assert seconds["pallets__flask-1"] in (5.0, 15.0, 2.5)  # no flask time: any
    assert task_seconds(list(reversed(tasks)), RUNS, 20) == seconds  # a fixed draw


def test_the_real_split_gets_a_time_for_each_of_its_500_tasks() -> None:
    import pyarrow.parquet as pq

    data = shared(SHARED_DATA / "swebench-verified")
    tasks = pq.read_table(data / "SWE-bench_Verified_test.parquet",
                          columns=["instance_id"]).column(0).to_pylist()
    runs = json.loads((data / "eval_durations.json").read_text())
    seconds = task_seconds(tasks, runs, 20)
    assert len(seconds) == 500 and len(runs) == 177
    assert all(seconds[r["iid"]] == r["total"] / 20 for r in runs)


def _record(spans: list[tuple[float, float]], items: list[str] | None = None) -> Record:
    record = Record()
    for i, (began, ended) in enumerate(spans):
        record.created[f"job-{i}"], record.ended[f"job-{i}"] = began, ended
        record.item_of[f"job-{i}"] = (items or [f"item-{j}" for j in range(len(spans))])[i]
    return record


def test_a_run_within_the_limit_with_one_job_per_item_passes() -> None:
    record = _record([(0.0, 10.0)] * ROWS + [(10.5, 12.0)])
    assert check(record, {"items": {"done": ROWS + 1}}, ROWS + 1) == 0
    assert utilisation(record, 0.0, 10.0) == 1.0
    assert utilisation(record, 0.0, 11.0) == (ROWS * 10 + 0.5) / (ROWS * 11)


def test_one_item_over_the_limit_fails_the_run() -> None:
    record = _record([(0.0, 10.0)] * ROWS + [(9.9, 12.0)])
    assert check(record, {"items": {"done": ROWS + 1}}, ROWS + 1) == 1


def test_an_item_given_two_jobs_or_left_without_a_result_fails_the_run() -> None:
    twice = _record([(0.0, 1.0), (2.0, 3.0)], items=["item-a", "item-a"])
    assert check(twice, {"items": {"done": 2}}, 2) == 1
    assert check(_record([(0.0, 1.0), (2.0, 3.0)]), {"items": {"done": 1}}, 2) == 1
