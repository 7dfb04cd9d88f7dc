"""An item's graded files, made in this one place (pure).

RESULT_FILE holds Proctor's RunResult; REPORT_FILE swebench's per-instance report of the
same result. Every step that keeps a graded item (the grade step in its work folder, the
operator in the object store, `proctor results pull` in a results folder) takes the names
and the bytes from `result_files`, so they agree byte for byte; the others import the
names.
"""

from __future__ import annotations

import json

from proctor.core.model import RunResult
from proctor.core.report_json import report_json

RESULT_FILE = "result.json"
REPORT_FILE = "report.json"


def json_bytes(data: object) -> bytes:
    """JSON as every graded file is written: indented, one trailing newline."""
    return (json.dumps(data, indent=1) + "\n").encode()


def result_files(result: RunResult, test_log: str | None) -> dict[str, bytes]:
    """RESULT_FILE and REPORT_FILE of `result`; `test_log` is the item's test log
    (swebench's report classifies infra failures from it)."""
    return {RESULT_FILE: json_bytes(result.model_dump(mode="json")),
            REPORT_FILE: json_bytes(report_json(result, test_log))}
