"""The SWE-bench datasets known by name: each short name and alias to its hub id (pure).

swebench 5 keeps its own aliases inline in `swebench.harness.utils.load_swebench_dataset`
(`swe-bench`, `swebench`, `lite`, `swe-bench_lite`, ...: full and Lite only), not in a
table it exports, so this is our one table. It holds those aliases and the same spellings
of Verified, Multilingual and Multimodal, plus the datasets' older `princeton-nlp/` ids:
those rows lack `image`, `eval_script` and `log_parser`, and the `SWE-bench/` ids hold the
same tasks in the swebench 5 format.

Any other name (another hub id, a local file) is left as given: every row set in the
swebench 5 format is accepted, whatever its name.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_SPLIT = "test"


@dataclass(frozen=True)
class KnownDataset:
    """One SWE-bench dataset on the hub, by its short name."""

    hub_id: str
    splits: tuple[str, ...]
    """Its splits on the hub (for the error a wrong one gets; the hub stays the judge)."""


KNOWN: dict[str, KnownDataset] = {
    "full": KnownDataset("SWE-bench/SWE-bench", ("dev", "test", "train")),
    "lite": KnownDataset("SWE-bench/SWE-bench_Lite", ("dev", "test")),
    "verified": KnownDataset("SWE-bench/SWE-bench_Verified", ("test",)),
    "multilingual": KnownDataset("SWE-bench/SWE-bench_Multilingual", ("test",)),
    "multimodal": KnownDataset("SWE-bench/SWE-bench_Multimodal", ("dev", "test")),
}

# swebench's own spellings of a benchmark's name: swe-bench, swebench, swe_bench, each
# followed by -, _ and the variant (swe-bench_lite, swebench-lite, ...).
_PREFIXES = ("swe-bench", "swebench", "swe_bench")
_SEPARATORS = ("-", "_")


def _aliases(short: str, known: KnownDataset) -> set[str]:
    """Every spelling of one dataset, lowercased (the hub's ids ignore case too)."""
    hub_name = known.hub_id.split("/", 1)[1]
    spellings = {short, known.hub_id, hub_name, f"princeton-nlp/{hub_name}"}
    if short == "full":
        spellings |= set(_PREFIXES)
    else:
        spellings |= {f"{p}{s}{short}" for p in _PREFIXES for s in _SEPARATORS}
    return {s.lower() for s in spellings}


ALIASES: dict[str, str] = {alias: short for short, known in KNOWN.items()
                           for alias in _aliases(short, known)}
"""Each accepted spelling (lowercase) to its short name in KNOWN."""


def known(name: str) -> KnownDataset | None:
    """The SWE-bench dataset `name` spells, if it spells one."""
    short = ALIASES.get(name.strip().lower())
    return KNOWN[short] if short else None


def hub_id(name: str) -> str:
    """The hub id a known dataset's name or alias stands for; any other name as given."""
    found = known(name)
    return found.hub_id if found else name


def resolve(name: str, split: str = "") -> tuple[str, str]:
    """The hub id and split to load for `name` (an empty split is the test split)."""
    return hub_id(name), split or DEFAULT_SPLIT
