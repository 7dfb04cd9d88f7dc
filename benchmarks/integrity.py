"""The hostile-patch suite as a benchmark: per class of the threat model, how many
items were credited (an outcome that earns anything: the defence failed), flagged
(not credited, `tampered: true` naming the class) and missed (not credited, not
flagged either).

Each hostile patch of proctor.datasets.hostile runs on every demo task through
`proctor eval -p FILE` in the chosen sandbox (Docker: `proctor images build-demo`
first).

With `--real`: the same patches on real SWE-bench Verified rows (default
pytest-dev__pytest-7571 and pallets__flask-5014) in the images built from the shared
data's bundles (`proctor images build`), through `proctor eval --sandbox docker` and
through swebench 5.0.2's harness on the same images: per patch and row, what the harness
credits (its report graded by Proctor's outcome tree) beside Proctor's outcome and what
it named. `--network host` lets the eval scripts' `pip install -e .` reach PyPI, so the
build step runs the patch's setup code (on a daemon without a bridge nothing can be
reached and the build step fails before it runs any); the harness's containers get the
same network. `--patch NAME ...` runs only those hostile patches.

    python benchmarks/integrity.py [--sandbox process|docker] [--tasks N]
    python benchmarks/integrity.py --real [-i ID ...] [--data DIR] [--network host]
                                          [--patch NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import real_rows

from proctor.core.grading import decide_outcome
from proctor.datasets import demo, to_instance
from proctor.datasets.hostile import CREDITED, SUITE, Hostile, predictions_file
from proctor.formats.harness_logs import results_dir
from proctor.sandboxes import process

REAL_ROWS = ("pytest-dev__pytest-7571", "pallets__flask-5014")


def reader_for(root: Path):
    """A reader of each task's files at its base commit (a checkout per task)."""
    def read_for(instance):
        repo = root / instance.instance_id
        if not repo.exists():
            process.checkout(instance, repo)

        def read(path: str) -> str:
            file = repo / path
            return file.read_text() if file.is_file() else ""
        return read
    return read_for


def run_suite(hostile: Hostile, instances, work: Path, sandbox: str, read_for) -> list[dict]:
    """The results of one hostile patch on every task, through `proctor eval`."""
    preds = work / f"{hostile.name}.jsonl"
    preds.write_text(predictions_file(hostile, instances, read_for))
    out = work / hostile.name
    ids = [arg for i in instances for arg in ("-i", i.instance_id)]
    subprocess.run([sys.executable, "-m", "proctor.cli.main", "eval", "-p", str(preds),
                    "-d", "proctor-demo", *ids, "--output-dir", str(out), "--sandbox",
                    sandbox], check=False, capture_output=True)
    return [json.loads(line) for line in (results_dir(out, "run") / "results.jsonl")
            .read_text().splitlines()]


def harness_outcome(entry: dict | None) -> str:
    """What the harness's report.json entry earns, in Proctor's outcome tree."""
    if entry is None:
        return "error"
    if not entry.get("patch_successfully_applied"):
        return "no_op"
    status = entry.get("tests_status") or {}
    f2p, p2p = status.get("FAIL_TO_PASS", {}), status.get("PASS_TO_PASS", {})

    def count(tests: dict) -> tuple[int, int]:
        ok = len(tests.get("success", []))
        return ok, ok + len(tests.get("failure", []))
    return decide_outcome(True, *count(f2p), *count(p2p)).value


def real(args: argparse.Namespace) -> None:
    """The suite on real rows, in Proctor and in swebench's harness."""
    parquet = args.data / "SWE-bench_Verified_test.parquet"
    instances = real_rows.rows(parquet, tuple(args.instance))
    rows: list[tuple[Hostile, str, str, dict]] = []  # patch, instance, harness, ours
    with tempfile.TemporaryDirectory(prefix="integrity-real-") as tmp:
        read_for = real_rows.bundle_reader(args.data / "repos", Path(tmp) / "repos")
        for hostile in (h for h in SUITE if not args.patch or h.name in args.patch):
            work = Path(tmp) / hostile.name
            work.mkdir()
            model = f"hostile-{hostile.name}"
            preds = work / "preds.jsonl"
            preds.write_text(predictions_file(hostile, instances, read_for))
            patches = {json.loads(x)["instance_id"]: json.loads(x)["model_patch"]
                       for x in preds.read_text().splitlines()}
            real_rows.run_proctor(parquet, instances, str(preds), work / "proctor", 2,
                                  args.timeout, network=args.network)
            real_rows.run_harness(instances, model, work / "harness", 2, args.timeout,
                                  patches=patches, network=args.network)
            ours = {r["instance_id"]: r for r in map(json.loads, (
                work / "proctor" / "results.jsonl").read_text().splitlines())}
            theirs = real_rows.reports(work / "harness", model)
            rows += [(hostile, i.instance_id, harness_outcome(theirs.get(i.instance_id)),
                      ours[i.instance_id]) for i in instances]
    print(f"hostile patches on {len(instances)} real rows, swebench 5.0.2's harness against "
          f"proctor eval --sandbox docker (network {args.network or 'default'}); load "
          f"average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'patch':<27} {'class':<8} {'instance':<25} {'harness':<19} proctor [named]")
    for hostile, iid, harness, r in rows:
        named = ",".join(sorted({t["kind"] for t in r.get("tampering", [])})) or "-"
        print(f"{hostile.name:<27} {hostile.kind.value:<8} {iid:<25} {harness:<19} "
              f"{r['outcome']} [{named}]")
    credited = [r for r in rows if r[2] in CREDITED]
    ours_credited = [r for r in rows if r[3]["outcome"] in CREDITED]
    flagged = [r for r in rows if r[0].kind.value in {t["kind"] for t in r[3]["tampering"]}]
    print(f"credited: harness {len(credited)}/{len(rows)}, proctor {len(ours_credited)}/"
          f"{len(rows)}; proctor named the patch's class in {len(flagged)}/{len(rows)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandbox", choices=("process", "docker"), default="process")
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--real", action="store_true", help="real Verified rows, Docker")
    parser.add_argument("-i", "--instance", nargs="+", default=REAL_ROWS, help="with --real")
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2]
                        / "shared" / "data" / "swebench-verified", help="with --real")
    parser.add_argument("--network", default=None, help="with --real: the containers' "
                        "Docker network (default: the daemon's)")
    parser.add_argument("--timeout", type=int, default=600, help="with --real")
    parser.add_argument("--patch", nargs="+", default=(), help="with --real: only these")
    args = parser.parse_args()
    if args.real:
        real(args)
        return
    instances = [to_instance(r, i) for i, r in enumerate(demo.load_rows())][:args.tasks]
    tally: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    with tempfile.TemporaryDirectory() as tmp:
        read_for = reader_for(Path(tmp) / "repos")
        for hostile in (h for h in SUITE if not h.needs_build_step):
            for r in run_suite(hostile, instances, Path(tmp), args.sandbox, read_for):
                flagged = r.get("tampered") and any(t["kind"] == hostile.kind.value
                                                    for t in r.get("tampering", []))
                verdict = ("credited" if r["outcome"] in CREDITED else
                           "flagged" if flagged else "missed")
                tally[hostile.kind.value][verdict] += 1
                tally[hostile.kind.value]["items"] += 1
    print(f"hostile patches on {len(instances)} demo tasks, {args.sandbox} sandbox")
    print(f"{'class':<10} {'items':>6} {'credited':>9} {'flagged':>8} {'missed':>7}")
    for kind, counts in tally.items():
        print(f"{kind:<10} {counts['items']:>6} {counts['credited']:>9} "
              f"{counts['flagged']:>8} {counts['missed']:>7}")


if __name__ == "__main__":
    main()
