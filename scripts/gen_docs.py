"""Write docs/crds.md and docs/metrics.md from their sources, or check them.

    python scripts/gen_docs.py           # write both files
    python scripts/gen_docs.py --check   # exit 1, naming the file, when one is stale

docs/crds.md lists every field of the two CRDs in crds/ (path, type, default,
description, limits, CEL rules' messages); docs/metrics.md every metric the operator
exports, read from the exporter's own definitions. Both are generated so that they
cannot drift from what Kubernetes and Prometheus see; tests/e2e/test_docs.py fails when
either file differs from what this script writes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CRDS = ("evaluation.yaml", "agentundertest.yaml")
LIMITS = ("enum", "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems",
          "pattern", "format")


def _cell(text: str) -> str:
    """One table cell: a single line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _type(schema: dict) -> str:
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {schema.get('items', {}).get('type', 'any')}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of {schema['additionalProperties'].get('type', 'any')}"
    return kind


def _limits(schema: dict) -> str:
    parts = [f"{key}: `{json.dumps(schema[key])}`" for key in LIMITS if key in schema]
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        parts.append("any fields kept")
    parts += [f"rule: {rule.get('message') or rule['rule']}"
              for rule in schema.get("x-kubernetes-validations", [])]
    return "; ".join(parts)


def field_rows(schema: dict, path: str, required: bool = False) -> list[tuple[str, ...]]:
    """A row per field of a schema, depth first in the schema's order: path, type,
    required, default, description and limits (CEL rules by their messages)."""
    default = json.dumps(schema["default"]) if "default" in schema else ""
    rows = [(path, _type(schema), "yes" if required else "", default,
             schema.get("description", ""), _limits(schema))]
    needed = set(schema.get("required", []))
    for name, child in schema.get("properties", {}).items():
        rows += field_rows(child, f"{path}.{name}", name in needed)
    if isinstance(schema.get("items"), dict) and schema["items"].get("properties"):
        rows += field_rows(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict) and \
            schema["additionalProperties"].get("properties"):
        rows += field_rows(schema["additionalProperties"], f"{path}.<key>")
    return rows


def crd_section(crd: dict) -> str:
    names = crd["spec"]["names"]
    version = crd["spec"]["versions"][0]
    top = version["schema"]["openAPIV3Schema"]
    lines = [f"## {names['kind']}", "",
             f"`{crd['spec']['group']}/{version['name']}`, {crd['spec']['scope'].lower()}; "
             f"plural `{names['plural']}`, short names "
             f"{', '.join(f'`{n}`' for n in names.get('shortNames', []))}.", "",
             _cell(top.get("description", "")), "",
             "| field | type | required | default | description | limits and rules |",
             "|---|---|---|---|---|---|"]
    needed = set(top.get("required", []))
    for name in ("spec", "status"):
        if name in top.get("properties", {}):
            for row in field_rows(top["properties"][name], name, name in needed):
                path, *rest = row
                lines.append("| " + " | ".join([f"`{path}`", *map(_cell, rest)]) + " |")
    return "\n".join(lines) + "\n"


def crds_reference(crds: Path = ROOT / "crds") -> str:
    """docs/crds.md's text, from the CRD files in a folder."""
    head = ("# CRD reference\n\n"
            "Generated from `crds/` by `scripts/gen_docs.py`; do not edit by hand "
            "(`tests/e2e/test_docs.py` fails when it is stale). On a cluster, `kubectl explain "
            "evaluation.spec` shows the same descriptions. A rule is a CEL validation, named "
            "by the message `kubectl apply` gives when it fails. The CRDs are the one source "
            "of these schemas: the Python models of the specs (`proctor.core.spec`) are "
            "checked against them field by field "
            "(`tests/unit/core/test_spec_matches_crds.py`), not generated.\n\n")
    return head + "\n".join(crd_section(yaml.safe_load((crds / name).read_text()))
                             for name in CRDS)


def exported_metrics() -> list[tuple[str, str, tuple[str, ...], str]]:
    """(name, type, labels, help) of every metric the operator exports."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics import MetricWrapperBase

    from proctor.k8s.evaluation.metrics import Metrics

    metrics = Metrics(CollectorRegistry())
    collectors: list[MetricWrapperBase] = []
    for value in vars(metrics).values():
        for item in (value.values() if isinstance(value, dict) else [value]):
            if isinstance(item, MetricWrapperBase):
                collectors.append(item)
    rows = []
    for collector in collectors:
        (family,) = collector.describe()
        suffix = "_total" if family.type == "counter" else ""
        # prometheus_client has no public accessor for a metric's label names.
        labels = tuple(getattr(collector, "_labelnames", ()))
        rows.append((family.name + suffix, family.type, labels, family.documentation))
    return rows


def metrics_reference() -> str:
    """docs/metrics.md's text, from the exporter's definitions."""
    lines = ["# Metrics reference", "",
             "Generated from `operator/proctor/k8s/evaluation/metrics.py` by "
             "`scripts/gen_docs.py`; "
             "do not edit by hand (`tests/e2e/test_docs.py` fails when it is stale). The operator "
             "serves them on port 9090 (`/metrics`). The leaderboard figures are named after "
             "the fields of summary.json's EvalResult (`resolved_pct` -> "
             "`proctor_resolved_ratio`), the reliability figures after the status's "
             "`reliability` (an estimate's 95% interval in the `bound` label: `value`, "
             "`low`, `high`); a figure the status leaves out has no series.", "",
             "| metric | type | labels | help |", "|---|---|---|---|"]
    for name, kind, labels, help_text in exported_metrics():
        lines.append(f"| `{name}` | {kind} | {', '.join(labels)} | {_cell(help_text)} |")
    return "\n".join(lines) + "\n"


def generated(root: Path = ROOT) -> dict[Path, str]:
    """Each generated file under a checkout with the text it should hold."""
    return {root / "docs" / "crds.md": crds_reference(root / "crds"),
            root / "docs" / "metrics.md": metrics_reference()}


def stale(root: Path = ROOT) -> list[Path]:
    """The generated files that are missing or differ from what this script writes."""
    return [path for path, text in generated(root).items()
            if not path.exists() or path.read_text() != text]


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a file is stale")
    args = parser.parse_args(argv)
    if args.check:
        old = stale(root)
        for path in old:
            print(f"{path.relative_to(root)} is stale: run python scripts/gen_docs.py",
                  file=sys.stderr)
        return 1 if old else 0
    for path, text in generated(root).items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
