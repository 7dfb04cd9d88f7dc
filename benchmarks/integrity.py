"""The hostile-patch suite as a benchmark: per class of the threat model, how many
items were credited (an outcome that earns anything: the defence failed), flagged
(not credited, `tampered: true` naming the class) and missed (not credited, not
flagged either).

Each hostile patch of proctor.datasets.hostile runs on every demo task through
`proctor eval -p FILE` in the chosen sandbox (Docker: `proctor images build-demo`
first).

    python benchmarks/integrity.py [--sandbox process|docker] [--tasks N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from proctor.datasets import demo, to_instance
from proctor.datasets.hostile import CREDITED, SUITE, Hostile, predictions_file
from proctor.sandboxes import process


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
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandbox", choices=("process", "docker"), default="process")
    parser.add_argument("--tasks", type=int, default=10)
    args = parser.parse_args()
    instances = [to_instance(r, i) for i, r in enumerate(demo.load_rows())][:args.tasks]
    tally: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    with tempfile.TemporaryDirectory() as tmp:
        read_for = reader_for(Path(tmp) / "repos")
        for hostile in SUITE:
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
