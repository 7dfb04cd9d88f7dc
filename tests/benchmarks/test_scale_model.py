"""benchmarks/scale_model.py: the model of 100,000 items, figures from given inputs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))
from scale_model import (
    TARGET,
    Half,
    Inputs,
    Shape,
    metric_value,
    model,
    per_item,
    render,
)

SCRIPT = BENCHMARKS / "scale_model.py"
INPUTS = Inputs(source="given", record_bytes=1800, full_bytes=24000, stored_bytes=90000,
                task_bytes=30000, evaluation_bytes=5000, status_bytes=1500,
                requests={"POST": 3.0, "GET": 2.0}, watch_events={"pods": 6.0, "jobs": 4.0},
                watch_bytes=20000, cpu_seconds=0.05, cpu_per_evaluation=30,
                rss_base_mib=200, rss_per_item_kib=2, db_bytes_per_item=15000)


def test_the_target_is_100000_items_in_10_evaluations() -> None:
    assert (TARGET.items, TARGET.per_evaluation) == (100_000, 10_000)


def test_each_figure_is_per_item_per_task_and_per_evaluation() -> None:
    f = model(TARGET, INPUTS)
    fixed = 500 * 10 * 30000 + 10 * 5000  # a task ConfigMap per task and Evaluation
    assert f.etcd_store_bytes == 100_000 * 1800 + fixed
    assert f.etcd_full_bytes == 100_000 * 24000 + fixed
    assert f.etcd_db_store_bytes == 100_000 * 15000
    assert f.store_bytes == 100_000 * 90000
    assert f.requests == {"GET": 200_000, "POST": 300_000} and f.requests_total == 500_000
    assert f.watch_events == 1_000_000 and f.watch_bytes == 2e9
    assert f.cpu_seconds == pytest.approx(100_000 * 0.05 + 10 * 30)  # and once an Evaluation
    assert f.rss_mib == pytest.approx(200 + 100_000 * 2 / 1024)
    assert f.status_bytes == 1500  # an Evaluation's status does not grow with items


def test_twice_the_items_twice_the_per_item_figures() -> None:
    small, big = Shape(500, 4, 5, 1), Shape(500, 4, 10, 1)
    a, b = model(small, INPUTS), model(big, INPUTS)
    assert b.store_bytes == 2 * a.store_bytes and b.requests_total == 2 * a.requests_total
    # The task ConfigMaps are per task: they do not double.
    assert b.etcd_store_bytes - a.etcd_store_bytes == 10_000 * 1800


def test_what_was_not_measured_is_said_so_not_guessed() -> None:
    bare = Inputs(source="sizes only", record_bytes=1, full_bytes=2, stored_bytes=3,
                  task_bytes=4)
    f = model(TARGET, bare)
    assert f.cpu_seconds is None and f.rss_mib is None and f.watch_events is None
    assert f.etcd_db_store_bytes is None
    assert "memory not measured" in render(f, bare)


def test_a_runs_counters_become_per_item_inputs() -> None:
    before = {"requests": {"POST": 100.0, "GET": 50.0}, "events": {"pods": 10.0, "nodes": 1},
              "event_bytes": 1000.0, "db": 1_000_000.0, "cpu": 2.0}
    after = {"requests": {"POST": 700.0, "GET": 50.0, "DELETE": 200.0},
             "events": {"pods": 1210.0, "nodes": 2}, "event_bytes": 201_000.0,
             "db": 1_600_000.0, "cpu": 12.0}
    kept = {"kept_total": 250_000.0, "evaluation_bytes": 50_000.0, "status_bytes": 1400.0,
            "result_bytes": 900.0, "task_bytes": 20000.0}
    # Half done at 8 s of CPU and 300 MiB; at the end 12 s and 310 MiB.
    run = per_item(before, after, kept, 200, Half(100, 300.0, 8.0), rss=310.0)
    assert run["requests"] == {"POST": 3.0, "DELETE": 1.0}  # GET did not move
    # A node's event in the run is the cluster's, not the items'.
    assert run["watch_events"] == {"pods": 6.0} and run["watch_bytes"] == 1000.0
    assert run["cpu_seconds"] == pytest.approx(4 / 100)  # the second half's
    assert run["cpu_per_evaluation"] == pytest.approx(10 - 0.04 * 200)
    assert run["rss_per_item_kib"] == pytest.approx(10 * 1024 / 100)
    assert run["rss_base_mib"] == pytest.approx(310 - 200 * 0.1)
    assert run["db_bytes_per_item"] == pytest.approx(600_000 / 200)
    no_db = per_item({**before, "db": None}, after, kept, 200, Half(100, 300.0, 8.0), 310.0)
    assert no_db["db_bytes_per_item"] is None


def test_an_unlabelled_metric_is_read_and_a_missing_one_is_none() -> None:
    text = ("# HELP etcd_mvcc_db_total_size_in_bytes x\n"
            "etcd_mvcc_db_total_size_in_bytes_other 1\n"
            "etcd_mvcc_db_total_size_in_bytes 2.5e+06\n")
    assert metric_value(text, "etcd_mvcc_db_total_size_in_bytes") == 2.5e6
    assert metric_value(text, "nothing") is None


def test_a_missing_data_folder_is_one_line_and_exit_2(tmp_path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--data", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and str(tmp_path) in done.stderr


def test_inputs_that_are_not_a_runs_figures_are_one_line_and_exit_2(tmp_path) -> None:
    bad = tmp_path / "run.json"
    bad.write_text("[1, 2]")
    done = subprocess.run([sys.executable, str(SCRIPT), "--inputs", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "not a run's figures" in done.stderr
