"""`proctor eval`'s options, as the swebench harness spells them, turned into manifests.

The translation is pure: options in, Evaluation (and AgentUnderTest) manifest dicts out.
The command then parses them through the CRD schemas, as `proctor run -f` parses a file,
and runs them on the same engine.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from proctor.core.exits import UsageError
from proctor.core.spec import API_VERSION
from proctor.datasets import names

SOURCES = ("gold", "empty")
DEFAULT_RUN_ID = "run"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


@dataclass(frozen=True)
class EvalOptions:
    """What `proctor eval` was asked, once parsed."""

    predictions: str | None = None
    """A predictions file, `gold` or `empty`; None when an agent is evaluated."""
    agent: str | None = None
    """The AgentUnderTest's name (given by `-f` or made for `--agent URL`)."""
    dataset: str = "SWE-bench/SWE-bench_Verified"
    split: str = "test"
    instance_ids: tuple[str, ...] = ()
    max_workers: int = 4
    run_id: str = DEFAULT_RUN_ID
    timeout: int = 1800


def dataset_name(name: str) -> str:
    """A known dataset's alias as its hub id; any other name (hub id, local path) as given."""
    return names.hub_id(name)


def k8s_name(text: str, fallback: str) -> str:
    """`text` as a Kubernetes object name (lowercase letters, digits and -)."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].strip("-")
    return name or fallback


def check_run_id(run_id: str) -> str:
    """The run id, which names a folder and a file: one plain name, no path."""
    if not _RUN_ID.fullmatch(run_id):
        raise UsageError(f"--run_id {run_id!r}: use letters, digits, '.', '_' and '-' only")
    return run_id


def evaluation_manifest(options: EvalOptions,
                        prediction_ids: Collection[str] | None = None) -> dict[str, Any]:
    """The Evaluation that runs what the options ask. `prediction_ids` are the ids a
    predictions file names: as in swebench, only those rows run (within --instance_ids)."""
    if (options.predictions is None) == (options.agent is None):
        raise ValueError("give either predictions or an agent")
    check_run_id(options.run_id)
    ids = list(options.instance_ids)
    if prediction_ids is not None:
        ids = sorted(set(prediction_ids) & set(ids) if ids else prediction_ids)
    dataset: dict[str, Any] = {"name": dataset_name(options.dataset), "split": options.split,
                               "maxRows": -1}
    if ids:
        dataset["instanceIds"] = ids
    spec: dict[str, Any] = {"dataset": dataset, "maxConcurrentRows": options.max_workers,
                            "timeouts": {"testSeconds": options.timeout}}
    if options.agent is not None:
        spec["agentRef"] = {"name": options.agent}
        spec["predictions"] = {"source": "agent"}
    elif options.predictions in SOURCES:
        spec["predictions"] = {"source": options.predictions}
    else:
        spec["predictions"] = {"source": "file",
                               "path": str(Path(options.predictions or "").absolute())}
    return {"apiVersion": API_VERSION, "kind": "Evaluation",
            "metadata": {"name": k8s_name(options.run_id, "eval")}, "spec": spec}


def agent_manifest(url: str) -> dict[str, Any]:
    """An AgentUnderTest for an agent already running at `url`, named after its address."""
    where = urlparse(url)
    name = k8s_name(f"{where.hostname or ''}-{where.port or ''}", "agent")
    return {"apiVersion": API_VERSION, "kind": "AgentUnderTest", "metadata": {"name": name},
            "spec": {"endpoint": url}}
