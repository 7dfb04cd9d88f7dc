#!/usr/bin/env python3
"""Recompute S_prompt from a results folder's results.jsonl, without Proctor's code.

    python scripts/recompute_s_prompt.py RESULTS_DIR [--score resolved|f2p]

Prints `S_prompt num_tasks`. It follows the definition in docs/reliability.md
(its figures' table), written out again here on purpose, with the standard library only, so
that a mistake in Proctor's own module cannot hide itself: per item a score (1 if
resolved else 0, or the share of FAIL_TO_PASS tests passed), errors left out; per
(task, variant) the mean over repeats; per task with 2 or more scored variants the
population variance of those means; S_prompt = 1 - their mean over tasks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def item_score(line: dict, score: str) -> float | None:
    if line["outcome"] == "error":
        return None
    if score == "resolved":
        return float(line["outcome"] == "resolved")
    f2p = line.get("FAIL_TO_PASS") or {}
    total = len(f2p.get("success", [])) + len(f2p.get("failure", []))
    return len(f2p.get("success", [])) / total if total else 0.0


def s_prompt(results: Path, score: str = "resolved") -> tuple[float, int]:
    latest = {}
    for raw in results.read_text().splitlines(keepends=True):
        if raw.endswith("\n") and raw.strip():
            line = json.loads(raw)
            latest[line["item_id"]] = line
    runs: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for line in latest.values():
        value = item_score(line, score)
        if value is not None:
            runs[line["instance_id"]][line.get("variant_id", "original")].append(value)
    variances = [statistics.pvariance([statistics.fmean(v) for v in variants.values()])
                 for variants in runs.values() if len(variants) >= 2]
    if not variances:
        return float("nan"), 0
    return 1 - statistics.fmean(variances), len(variances)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results_dir")
    parser.add_argument("--score", choices=("resolved", "f2p"), default="resolved")
    args = parser.parse_args()
    value, tasks = s_prompt(Path(args.results_dir) / "results.jsonl", args.score)
    print(repr(value), tasks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
