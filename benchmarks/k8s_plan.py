"""Planning on the real Verified split: 500 tasks x 4 variants = 2,000 items.

Prints the planning time (target: under 1 s), the time to build every task ConfigMap
and Job manifest, and the size of an Evaluation's status with 2,000 kept results
(it must stay under 256 KiB).

    python benchmarks/k8s_plan.py [path/to/SWE-bench_Verified_test.parquet]
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from proctor import datasets
from proctor.core.model import Outcome, PassFail, RunResult
from proctor.core.plan import PlanInputs, Variant, plan
from proctor.formats.manifest import parse_resource
from proctor.k8s.children.manifests import desired_objects
from proctor.k8s.children.podstatus import item_state
from proctor.k8s.evaluation.reconcile import build_status, conditions_for, decide, observe

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench-verified" / \
    "SWE-bench_Verified_test.parquet"


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    selection = datasets.load(str(path), max_rows=-1)
    evaluation = parse_resource({
        "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation", "metadata": {"name": "v"},
        "spec": {"agentRef": {"name": "a"}, "dataset": {"name": str(path), "maxRows": -1},
                 "maxConcurrentRows": 50}})
    agent = parse_resource({"apiVersion": "proctor.dev/v1alpha1", "kind": "AgentUnderTest",
                            "metadata": {"name": "a"}, "spec": {"endpoint": "http://a:9009/"}})
    variants = {i.instance_id: [Variant(f"tpl-{n}", f"{i.problem_statement}\n(variant {n})")
                                for n in range(1, 4)] for i in selection.instances}
    started = time.perf_counter()
    items = plan(PlanInputs("SWE-bench/SWE-bench_Verified", selection.fingerprint, "a"),
                 selection.instances, variants)
    planned = time.perf_counter() - started
    texts = {iid: {v.variant_id: v.text for v in vs} for iid, vs in variants.items()}
    started = time.perf_counter()
    configmaps, jobs = desired_objects(evaluation, agent, items, selection.by_id, texts,
                                       runner_version="0.1.0")
    built = time.perf_counter() - started
    results = [RunResult(item_id=i.id, instance_id=i.instance_id, variant_id=i.variant_id,
                         outcome=list(Outcome)[n % 7], tests_ran=True,
                         FAIL_TO_PASS=PassFail(success=["a"], failure=["b"]),
                         PASS_TO_PASS=PassFail(success=["c"] * 5))
               for n, i in enumerate(items)]
    views = observe(items, [], {r.item_id: r for r in results}, item_state)  # no Jobs to read
    decision = decide(evaluation, views, datetime.now(UTC))
    status = build_status(evaluation, "a", views, results,
                          conditions_for([], views, decision, "2026-01-01T00:00:00Z", 1),
                          generation=1, fingerprint=selection.fingerprint)
    size = len(json.dumps(status).encode())
    print(f"items: {len(items)} ({len(selection.instances)} tasks x 4 prompts)")
    print(f"planning time: {planned * 1000:.0f} ms (target: under 1 s)")
    print(f"manifests: {len(configmaps)} task ConfigMaps, {len(jobs)} Jobs in {built:.2f} s")
    print(f"status size with {len(results)} results: {size / 1024:.1f} KiB "
          f"(limit: 256 KiB)")


if __name__ == "__main__":
    main()
