"""`proctor scenario import`: an Agentbeats scenario.toml as Proctor's manifests.

The manifests are checked against the CRDs (as `proctor run` and the cluster read them)
before anything is written; a participant that only the platform can find (by
`agentbeats_id`) gets a note asking for `--endpoint` or `--image`, and the rest is still
written.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from proctor.core.exits import UsageError
from proctor.formats.agentbeats import (
    Imported,
    k8s_name,
    read_scenario,
    scenario_manifests,
    secret_commands,
)
from proctor.formats.manifest import parse_resource


def pairs(values: Sequence[str] | None, flag: str) -> dict[str, str]:
    """`NAME=VALUE` arguments as a dict, or a one-line usage error."""
    out: dict[str, str] = {}
    for value in values or ():
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise UsageError(f"{flag} {value!r}: expected NAME=VALUE")
        out[name] = rest
    return out


def import_scenario(path: Path, endpoints: dict[str, str], images: dict[str, str]
                    ) -> Imported:
    """The scenario's manifests, each validated against its CRD."""
    name = k8s_name(path.stem if path.stem != "scenario" else path.parent.name or "scenario",
                    "scenario")
    imported = scenario_manifests(read_scenario(path), name, endpoints, images, str(path))
    for doc in imported.documents:
        parse_resource(doc, f"{path} ({doc['kind']} {doc['metadata']['name']})")
    return imported


def write(imported: Imported, output_dir: Path | None) -> list[str]:
    """Write the manifests (one file each, or a YAML stream on stdout); the lines to print
    after them."""
    lines: list[str] = []
    if output_dir is None:
        print(yaml.safe_dump_all(imported.documents, sort_keys=False), end="")
    else:
        output_dir.mkdir(parents=True, exist_ok=True)
        for doc in imported.documents:
            target = output_dir / f"{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"
            target.write_text(yaml.safe_dump(doc, sort_keys=False))
            lines.append(f"wrote {target}")
    lines += [f"note: {note}" for note in imported.notes]
    commands = secret_commands(imported.secrets)
    if commands:
        lines.append("create the Secrets the agents read (values from your environment):")
        lines += [f"  {command}" for command in commands]
    return lines
