"""How much etcd holds per item: today's result ConfigMap against the small record
(`proctor.store.record.item_record`, in `k8s.store.record_configmap`) that is left once
the artefacts are in an object store.

On the 177 real harness runs of the shared data (swebench-verified/logs: the agent's
patch and the official harness's test log of each), each graded as `runner grade
--legacy-log` grades it. Today's size is the ConfigMap the operator writes
(`k8s.store.result_configmap`, with the artefacts `runner.artifacts.collect` packs), as
JSON; the record's is the ConfigMap that keeps it, as JSON. Target: at most 2 KiB on every
log.

    python benchmarks/record_size.py [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from proctor.core.model import WorkItem
from proctor.datasets import load
from proctor.formats.manifest import parse_resource
from proctor.k8s.children.store import item_files, record_configmap, result_configmap
from proctor.runner.artifacts import collect
from proctor.runner.grade import grade_work_dir
from proctor.runner.workdir import WorkDir, write_task
from proctor.store.location import parse_s3_url
from proctor.store.record import item_record

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench-verified"
TARGET_BYTES = 2048
# Names as long as real ones: an Evaluation's, and a run prefix that holds its namespace.
EVALUATION = parse_resource({
    "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
    "metadata": {"name": "verified-composio-agent", "namespace": "evaluations"},
    "spec": {"dataset": {"name": "verified"}, "predictions": {"source": "gold"}}})
RUN = parse_s3_url("s3://proctor-results/evaluations/verified-composio-agent")


@dataclass(frozen=True)
class ItemSize:
    """One real run's bytes: in etcd with a store and without, and in the store."""

    instance_id: str
    record: int
    """The ConfigMap that keeps its record (with the owner reference), as JSON."""
    configmap: int
    """The full result ConfigMap (no store), as JSON."""
    stored: int
    """Its files in the object store (`k8s.store.item_files`)."""


def item_sizes(data: Path, tmp: Path) -> list[ItemSize]:
    """The bytes of each real run. The record's is that of the whole ConfigMap that keeps
    it (`k8s.store.record_configmap`: metadata, labels and the record), with the owner
    reference the operator adds."""
    rows = load(str(data / "SWE-bench_Verified_test.parquet"), max_rows=-1).by_id
    out = []
    for src in sorted(p for p in (data / "logs").iterdir() if p.is_dir()):
        iid = src.name
        work = WorkDir(tmp / iid)
        write_task(work, rows[iid], WorkItem(id=iid.encode().hex()[:32].ljust(32, "0"),
                                             instance_id=iid))
        (work / "patch.diff").write_bytes((src / "patch.diff").read_bytes())
        log = (src / "test_output.txt").read_bytes()
        (work / "test_output.txt").write_bytes(log)
        result = grade_work_dir(work, legacy_log=True)
        artefacts = collect(work)
        files = item_files(result, artefacts)
        kept = record_configmap(EVALUATION, result, item_record(result, RUN, files))
        record = len(json.dumps(owned(kept)).encode())
        configmap = len(json.dumps(owned(result_configmap(EVALUATION, result, artefacts)))
                        .encode())
        out.append(ItemSize(iid, record, configmap, sum(len(b) for b in files.values())))
    return out


def sizes(data: Path, tmp: Path) -> list[tuple[str, int, int]]:
    """(instance id, record bytes, ConfigMap bytes) of each real run (`item_sizes`)."""
    return [(s.instance_id, s.record, s.configmap) for s in item_sizes(data, tmp)]


def owned(configmap: dict) -> dict:
    """`configmap` with the owner reference `kopf.adopt` gives it (a uid is 36 bytes)."""
    meta = configmap["metadata"]
    meta["ownerReferences"] = [{
        "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
        "name": EVALUATION.name, "uid": "0" * 36, "controller": True,
        "blockOwnerDeletion": True}]
    return configmap


def distribution(values: list[int]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (f"mean {statistics.mean(ordered):8.0f}  p95 {p95:8d}  max {ordered[-1]:8d}  "
            f"total {sum(ordered) / 1024:8.0f} KiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        found = sizes(args.data, Path(tmp))
    print(f"{len(found)} real runs, bytes per item:")
    print(f"  ConfigMap today  {distribution([c for _, _, c in found])}")
    print(f"  item record      {distribution([r for _, r, _ in found])}")
    largest = max(found, key=lambda f: f[1])
    verdict = "met" if largest[1] <= TARGET_BYTES else "MISSED"
    print(f"target {TARGET_BYTES} bytes per record: {verdict} (largest: {largest[0]}, "
          f"{largest[1]} bytes)")


if __name__ == "__main__":
    main()
