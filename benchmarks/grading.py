"""Grading time for a 20 MB pytest log (target: under 2 s).

Builds a realistic log: swebench-style eval script trace, then pytest -rA output
with tens of thousands of tests (PASSED/FAILED/SKIPPED lines, tracebacks, captured
output) between the Start/End markers, and the recorded exit code after them.
Times Proctor's grade step (swebench 5's parser and grading, then the outcome
tree) in-process; the one-off import of swebench.harness is reported apart.

    python benchmarks/grading.py [--mb 20]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from proctor.core.model import Instance


def make_log(target_bytes: int, seed: int = 7) -> tuple[str, list[str], list[str]]:
    rng = random.Random(seed)
    head = "+ cd /testbed\n+ git apply -v -\nChecking patch tests/test_big.py...\n"
    body, ids, size, n = [], [], 0, 0
    while size < target_bytes:
        test_id = f"tests/test_mod{n % 97}.py::TestCase{n % 13}::test_case_{n}[param-{n % 7}]"
        ids.append(test_id)
        noise = "".join(f"    line {k}: value = {rng.random():.12f}\n" for k in range(6))
        status = "PASSED" if n % 50 else rng.choice(["FAILED", "SKIPPED"])
        chunk = f"{noise}{status} {test_id}\n"
        body.append(chunk)
        size += len(chunk)
        n += 1
    log = (head + ": '>>>>> Start Test Output'\n" + "".join(body)
           + f"===== {n} tests in 99.0s =====\n: '>>>>> End Test Output'\n"
           + ">>>>> Test Exit Code: 1\n")
    return log, ids[:: max(1, len(ids) // 50)], ids[1::3]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=20)
    args = parser.parse_args()
    log, f2p, p2p = make_log(int(args.mb * 1024 * 1024))
    instance = Instance(instance_id="bench__big-1", repo="bench/big", base_commit="a" * 40,
                        problem_statement="", FAIL_TO_PASS=json.dumps(f2p),
                        PASS_TO_PASS=json.dumps(p2p), image="bench:1", eval_script="true",
                        log_parser="parse_log_pytest")
    started = time.perf_counter()
    import swebench.harness.grading  # noqa: F401 - timed here, once per process

    from proctor.runner.grade import grade_log
    imported = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "test_output.txt"
        path.write_text(log)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            graded = grade_log(instance, str(path))
            times.append(time.perf_counter() - t0)
    assert graded.error is None, graded.error
    print(f"log: {len(log) / 1e6:.1f} MB, {len(f2p)} F2P and {len(p2p)} P2P tests graded")
    print(f"grading time: best {min(times):.2f} s, worst {max(times):.2f} s "
          f"(target: under 2 s); swebench import once per process: "
          f"{imported - started:.2f} s")


if __name__ == "__main__":
    main()
