"""SWE-bench rows from the Hugging Face hub, local files, or a dataset bundled with Proctor.

A dataset is named by its hub id, by a short name or alias (`verified`, `lite`, `full`,
`multilingual`, ...: see `names`), by a local file's path, or as a bundled dataset.
Rows must be in the swebench 5 format (they carry `image`, `eval_script`,
`log_parser`): that is what tells Proctor how to run and read each task's tests, in any
language. Older rows without those fields are refused with a message saying so, and so is
a row whose log parser the installed swebench lacks: its tests could run but not be graded.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from proctor.core.exits import BadInput
from proctor.core.model import Instance
from proctor.datasets import demo, names

HUB_DEFAULT = "SWE-bench/SWE-bench_Verified"
SWEBENCH5_FIELDS = ("image", "eval_script", "log_parser")
_FILE_SUFFIXES = (".json", ".jsonl", ".parquet")
# A name ending so is a file's, never a hub id: it is refused as a file Proctor cannot
# read, not sent to the hub (where `rows.csv` would only fail as "cannot reach the hub").
_OTHER_FILE_SUFFIXES = (".csv", ".tsv", ".txt", ".arrow", ".feather", ".yaml", ".yml",
                        ".gz", ".zip", ".tar", ".xz", ".zst", ".bz2", ".xlsx", ".db")


# The datasets shipped inside the package, by name: each gives its rows and the git bundles
# of its repositories, so a checkout needs no network. Everything else reaches the bundled
# data through this registry, never through the fixtures' own module.
BUNDLED = {demo.DATASET_NAME: demo}


def repo_bundle(repo: str) -> Path | None:
    """The git bundle Proctor ships for a repository (`owner/name`), if any."""
    for bundled in BUNDLED.values():
        if path := bundled.bundle_path(repo):
            return path
    return None


class DatasetError(BadInput):
    """A dataset that cannot be used, with a message naming the row and the field."""


@dataclass(frozen=True)
class Selection:
    """The rows an evaluation runs on, in a deterministic order."""

    instances: tuple[Instance, ...]
    source: str
    fingerprint: str
    dataset_ids: frozenset[str] = frozenset()
    """Every instance id of the dataset, selected or not (predictions may name any)."""

    @property
    def by_id(self) -> dict[str, Instance]:
        return {i.instance_id: i for i in self.instances}


def is_local_file(name: str) -> bool:
    """Whether `name` is a file's path rather than a hub id: a data file's suffix, a path
    that is a file, or one written as a path (absolute, ./, ../, ~)."""
    return (name.lower().endswith(_FILE_SUFFIXES + _OTHER_FILE_SUFFIXES)
            or name.startswith(("/", "./", "../", "~")) or Path(name).is_file())


def read_rows(name: str, split: str = "test", revision: str = "") -> list[dict[str, Any]]:
    """Raw rows of a dataset: `proctor-demo`, a local file, or a hub dataset (by id, or by
    a known dataset's name or alias)."""
    if name in BUNDLED:
        return BUNDLED[name].load_rows()
    # A known name is the dataset, never a file of that name in the current folder.
    if is_local_file(name) and not names.known(name):
        return _read_file(Path(name).expanduser())
    return _read_hub(*names.resolve(name, split), revision)


def dataset_file(name: str) -> Path | None:
    """The file a dataset's rows are read from (a local file, or a bundled dataset's);
    None for a hub dataset, whose files the hub's cache keeps."""
    if name in BUNDLED:
        return BUNDLED[name].dataset_path()
    if is_local_file(name) and not names.known(name):
        path = Path(name).expanduser()
        return path if path.is_file() else None
    return None


def _read_file(path: Path) -> list[dict[str, Any]]:
    if path.is_dir():
        raise DatasetError(f"dataset file {path} is a folder, not a file")
    if not path.is_file():
        raise DatasetError(f"dataset file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix not in _FILE_SUFFIXES:
        raise DatasetError(f"dataset file {path}: Proctor reads .parquet, .jsonl and .json "
                           f"files, not {suffix or 'files without a suffix'}")
    if suffix == ".parquet":
        rows = _read_parquet(path)
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise DatasetError(f"{path}: not UTF-8 text ({exc.reason})") from None
        rows = _jsonl_rows(path, text) if suffix == ".jsonl" else _json_rows(path, text)
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            where = f"line {number}" if suffix == ".jsonl" else f"row {number}"
            raise DatasetError(f"{path} {where}: expected an object (a row), got "
                               f"{type(row).__name__}")
    return rows


def _read_parquet(path: Path) -> list[Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as exc:  # ArrowInvalid: not a parquet file
        raise DatasetError(f"{path}: not a readable parquet file ({exc})") from None


def _jsonl_rows(path: Path, text: str) -> list[Any]:
    """Each non-blank line's row; an error names the file's line, not the line's own 1."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path} line {number}: not valid JSON ({exc.msg}, column "
                               f"{exc.colno})") from None
    return rows


def _json_rows(path: Path, text: str) -> list[Any]:
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path} line {exc.lineno}: not valid JSON ({exc.msg}, column "
                           f"{exc.colno})") from None
    if not isinstance(rows, list):
        raise DatasetError(f"{path}: expected a JSON list of rows, got "
                           f"{type(rows).__name__}")
    return rows


HUB_PROBE_SECONDS = 5.0


def hub_unreachable(timeout_s: float = HUB_PROBE_SECONDS) -> str | None:
    """Why the Hugging Face hub cannot be reached from here, or None when it can.

    One connection attempt: the hub client itself retries for about 30 s before it
    gives up, which is no way to learn that a machine has no network.
    """
    from huggingface_hub import constants

    offline = [os.environ.get(k, "").upper() for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")]
    if any(v in ("1", "ON", "YES", "TRUE") for v in offline):
        return None  # offline mode: the hub's own cache answers, or says why not
    url = urlsplit(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=timeout_s).close()
    except OSError as exc:
        return f"{url.hostname}:{port}: {exc.strerror or type(exc).__name__}"
    return None


def _read_hub(name: str, split: str, revision: str) -> list[dict[str, Any]]:
    why = hub_unreachable()
    if why:
        raise DatasetError(
            f"cannot reach the Hugging Face hub to load {name} ({why}); on a machine "
            f"without it, download the split once elsewhere and name the local file as "
            f"dataset.name (a .parquet, .jsonl or .json path)")
    import datasets

    try:
        data = datasets.load_dataset(name, split=split, revision=revision or None)
    except Exception as exc:  # the hub raises many kinds; the user needs the name and cause
        raise DatasetError(f"could not load {name} (split {split}{_splits_hint(name, split)}) "
                           f"from the Hugging Face hub: {type(exc).__name__}: {exc}") from exc
    return data.to_list()


def _splits_hint(name: str, split: str) -> str:
    known = names.known(name)
    if known is None or split in known.splits:
        return ""
    return f"; {known.hub_id} has {', '.join(known.splits)}"


def unrunnable(instance: Instance, parsers: Iterable[str]) -> str | None:
    """Why Proctor cannot run and grade a valid swebench 5 row, or None when it can.

    The row itself says how to run its tests (`image`, `eval_script`); grading needs the
    log parser it names, which swebench must have (`parsers`: its PARSER_REGISTRY).
    """
    if instance.log_parser not in parsers:
        return (f"row {instance.instance_id} ({instance.repo}): swebench has no log parser "
                f"{instance.log_parser!r}, so Proctor cannot grade its tests; leave the row "
                f"out, or install a swebench that has the parser")
    return None


def swebench_parsers() -> frozenset[str]:
    """The log parsers the installed swebench has, by name."""
    from swebench.harness.log_parsers import PARSER_REGISTRY

    return frozenset(PARSER_REGISTRY)


def to_instance(row: dict[str, Any], index: int) -> Instance:
    """Validate one row's fields; errors name the row and the field."""
    rid = row.get("instance_id", f"#{index}")
    missing = [f for f in SWEBENCH5_FIELDS if not row.get(f)]
    if missing:
        raise DatasetError(
            f"row {rid} lacks {', '.join(missing)}: it is in the older SWE-bench format. "
            f"Proctor needs swebench 5 rows (as {HUB_DEFAULT} on the hub now has them)")
    try:
        return Instance.model_validate(row)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "row"
        raise DatasetError(f"row {rid}: field {where}: {first['msg']}") from exc


def select(rows: Sequence[dict[str, Any]], instance_ids: Iterable[str] = (),
           max_rows: int = 3) -> list[dict[str, Any]]:
    """Filter by ids (dataset order kept), then take the first `max_rows` (-1: all)."""
    wanted = list(dict.fromkeys(instance_ids))
    if wanted:
        present = {r.get("instance_id") for r in rows}
        unknown = [i for i in wanted if i not in present]
        if unknown:
            raise DatasetError(f"instance ids not in the dataset: {', '.join(unknown)}")
        keep = set(wanted)
        rows = [r for r in rows if r.get("instance_id") in keep]
    return list(rows if max_rows < 0 else rows[:max_rows])


def fingerprint(instances: Iterable[Instance]) -> str:
    """A hash of exactly the rows used: two runs on equal rows share it."""
    digest = hashlib.sha256()
    for inst in instances:
        digest.update(inst.model_dump_json().encode())
    return digest.hexdigest()[:16]


def load(name: str, split: str = "test", revision: str = "", instance_ids: Iterable[str] = (),
         max_rows: int = 3) -> Selection:
    """The selected, validated rows of a dataset."""
    every = read_rows(name, split, revision)
    rows = select(every, instance_ids, max_rows)
    instances = tuple(to_instance(row, i) for i, row in enumerate(rows))
    parsers = swebench_parsers()
    for instance in instances:  # all refused here, before any row runs
        if why := unrunnable(instance, parsers):
            raise DatasetError(why)
    counts = Counter(i.instance_id for i in instances)
    dupes = [iid for iid, n in counts.items() if n > 1]
    if dupes:
        raise DatasetError(f"duplicate instance ids: {', '.join(sorted(dupes))}")
    ids = frozenset(str(r["instance_id"]) for r in every if r.get("instance_id"))
    return Selection(instances, name, fingerprint(instances), ids)
