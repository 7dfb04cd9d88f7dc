"""How different the template variants are: the figure of issue 26, exactly as it states it.

Over the first 60 SWE-bench Verified problem statements, each template style's median of
`difflib.SequenceMatcher(None, original, variant, autojunk=False).ratio()` (the
character-level ratio; `proctor variants show` prints the token-level one, which is fast
enough for every statement), then the median pooled over the first three styles (the
variants a run with 3 variations takes), and the range of variant length / original
length. Target: pooled median at most 0.8, every length within 75-150%.

    python benchmarks/variant_similarity.py [--data DIR] [--statements 60] [--styles 5]
"""

from __future__ import annotations

import argparse
import difflib
import statistics
from pathlib import Path

from proctor.variants.template import reword, style_ids

TARGET = 0.8


def char_ratio(original: str, variant: str) -> float:
    return difflib.SequenceMatcher(None, original, variant, autojunk=False).ratio()


def statements(data: Path, count: int) -> list[str]:
    import pyarrow.parquet as pq

    table = pq.read_table(data / "SWE-bench_Verified_test.parquet",
                          columns=["problem_statement"])
    return table.column("problem_statement").to_pylist()[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2]
                        / "shared" / "data" / "swebench-verified",
                        help="folder holding SWE-bench_Verified_test.parquet")
    parser.add_argument("--statements", type=int, default=60)
    parser.add_argument("--styles", type=int, default=5, help="how many styles to print")
    args = parser.parse_args()
    texts = statements(args.data, args.statements)
    ratios: dict[str, list[float]] = {}
    lengths: list[float] = []
    for style in style_ids()[:max(3, args.styles)]:
        variants = [reword(t, style) for t in texts]
        ratios[style] = [char_ratio(t, v) for t, v in zip(texts, variants, strict=True)]
        lengths += [len(v) / len(t) for t, v in zip(texts, variants, strict=True)]
        print(f"{style:<12} median {statistics.median(ratios[style]):.3f}  "
              f"min {min(ratios[style]):.3f}  max {max(ratios[style]):.3f}", flush=True)
    pooled = statistics.median(r for s in style_ids()[:3] for r in ratios[s])
    print(f"first three pooled over {len(texts)} statements: median {pooled:.3f} "
          f"(target <= {TARGET}: {'met' if pooled <= TARGET else 'NOT met'})")
    print(f"variant length / original: {min(lengths):.3f} to {max(lengths):.3f}")


if __name__ == "__main__":
    main()
