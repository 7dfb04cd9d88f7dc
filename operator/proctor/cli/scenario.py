"""`proctor scenario import`: an Agentbeats scenario.toml as Proctor's manifests.

The manifests are checked against the CRDs (as `proctor run` and the cluster read them)
before anything is written; a participant that only the platform can find (by
`agentbeats_id`) gets a note asking for `--endpoint` or `--image`, and the rest is still
written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from proctor.core.exits import UsageError

# The scenario's reader and the CRDs' schemas are imported where they are used:
# `proctor` imports this module for its parser, whatever the command.
if TYPE_CHECKING:
    from proctor.formats.agentbeats import Imported


def add_parser(sub: argparse._SubParsersAction) -> None:
    scen = sub.add_parser("scenario", help="Agentbeats scenarios")
    scen_sub = scen.add_subparsers(dest="scenario_command", required=True)
    imp = scen_sub.add_parser("import", help="turn an Agentbeats scenario.toml into "
                                             "Proctor's manifests (checked against the CRDs)")
    imp.add_argument("scenario", help="a scenario.toml")
    imp.add_argument("--output-dir", help="write one YAML file per manifest here (default: "
                                          "a YAML stream on stdout)")
    imp.add_argument("--endpoint", action="append", metavar="NAME=URL",
                     help="where participant NAME already runs; repeatable")
    imp.add_argument("--image", action="append", metavar="NAME=IMAGE",
                     help="run participant NAME from this image, as a sidecar of each task's "
                          "pod (cluster); repeatable")
    imp.set_defaults(func=cmd_scenario_import)


def cmd_scenario_import(args: argparse.Namespace) -> int:
    imported = import_scenario(Path(args.scenario), pairs(args.endpoint, "--endpoint"),
                               pairs(args.image, "--image"))
    lines = write(imported, Path(args.output_dir) if args.output_dir else None)
    if lines:
        print("\n".join(lines), file=sys.stdout if args.output_dir else sys.stderr)
    return 0



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
    from proctor.formats.agentbeats import k8s_name, read_scenario, scenario_manifests
    from proctor.formats.manifest import parse_resource

    name = k8s_name(path.stem if path.stem != "scenario" else path.parent.name or "scenario",
                    "scenario")
    imported = scenario_manifests(read_scenario(path), name, endpoints, images, str(path))
    for doc in imported.documents:
        parse_resource(doc, f"{path} ({doc['kind']} {doc['metadata']['name']})")
    return imported


def write(imported: Imported, output_dir: Path | None) -> list[str]:
    """Write the manifests (one file each, or a YAML stream on stdout); the lines to print
    after them."""
    import yaml

    from proctor.formats.agentbeats import secret_commands

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
