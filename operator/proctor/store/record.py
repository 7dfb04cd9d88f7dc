"""The small record of one item that the cluster's etcd keeps once its artefacts are in
the object store (pure).

Today a result ConfigMap holds the full RunResult (every test's name) and the compressed
patch and logs: tens of KiB per item, and etcd holds every one. With the artefacts in the
store, etcd needs only what status and metrics read (the outcome and the counts), digests
to check the stored files against, and their keys: under 2 KiB per item on the 177 real
logs (benchmarks/record_size.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from proctor.core.model import ErrorKind, Outcome, PassFail, PatchInfo, RunResult
from proctor.core.result_files import REPORT_FILE, RESULT_FILE
from proctor.store.location import S3Location, item_location

RECORD_VERSION = 1
ARTEFACTS = ("patch.diff", "test_output.txt", "apply.log", "transcript.json.gz",
             RESULT_FILE, REPORT_FILE)
"""An item's files that the store keeps and the record points at."""
MESSAGE_CHARS = 300
"""Of the error message: enough for status and a person's first look; the whole one is in
result.json."""


def item_record(result: RunResult, run: S3Location,
                files: Mapping[str, bytes]) -> dict[str, Any]:
    """The record of `result`, whose artefacts `files` (name -> bytes, of ARTEFACTS) are
    stored under the run's location `run`. No test names, patch or log: those are what
    the keys point at."""
    where = item_location(run, result.instance_id, result.variant_id, result.repeat)
    # One prefix, not a key per file: the key of each is prefix/name (`object_keys`).
    objects = {name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
               for name, data in sorted(files.items()) if name in ARTEFACTS}
    return {
        "v": RECORD_VERSION, "result_v": result.schema_version,
        "item": result.item_id, "instance": result.instance_id,
        "variant": result.variant_id, "repeat": result.repeat, "repo": result.repo,
        "outcome": result.outcome.value,
        "error_kind": result.error_kind.value if result.error_kind else None,
        "message": (result.error_message or "")[:MESSAGE_CHARS] or None,
        "f2p": [len(result.FAIL_TO_PASS.success), result.FAIL_TO_PASS.total],
        "p2p": [len(result.PASS_TO_PASS.success), result.PASS_TO_PASS.total],
        "tests_ran": result.tests_ran, "exit_code": result.test_exit_code,
        "patch_sha256": result.patch.sha256, "applied": result.patch.apply_method,
        "tampered": sorted({t.kind for t in result.tampering}),
        "attempts": result.attempts,
        "bucket": where.bucket, "prefix": where.prefix, "objects": objects,
    }


def object_keys(record: Mapping[str, Any]) -> dict[str, str]:
    """The object-store key of each artefact a record points at."""
    where = S3Location(bucket=record["bucket"], prefix=record["prefix"])
    return {name: where.key(name) for name in record["objects"]}


def result_from_record(record: Mapping[str, Any]) -> RunResult:
    """The result as far as a record tells it: what status and metrics read (outcome,
    error, counts, attempts). The tests are counted, not named (their names are in the
    stored result.json): each stands as "#n"."""
    def tests(counted: Any) -> PassFail:
        passed, total = (int(n) for n in counted)
        names = [f"#{i}" for i in range(total)]
        return PassFail(success=names[:passed], failure=names[passed:])

    return RunResult(
        schema_version=record["result_v"], item_id=record["item"],
        instance_id=record["instance"], variant_id=record["variant"],
        repeat=record["repeat"], outcome=Outcome(record["outcome"]),
        error_kind=ErrorKind(record["error_kind"]) if record.get("error_kind") else None,
        error_message=record.get("message"), tests_ran=bool(record.get("tests_ran")),
        test_exit_code=record.get("exit_code"), attempts=record.get("attempts", 1),
        FAIL_TO_PASS=tests(record["f2p"]), PASS_TO_PASS=tests(record["p2p"]),
        repo=record.get("repo", ""),
        patch=PatchInfo(present=record.get("patch_sha256") is not None,
                        sha256=record.get("patch_sha256"), applied=bool(record.get("applied")),
                        apply_method=record.get("applied")),
        tampered=bool(record.get("tampered")))
