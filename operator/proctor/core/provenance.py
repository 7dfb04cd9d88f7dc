"""Where a run came from: the dataset, images, versions, seeds, agent card, sandbox and
machine it ran with, recorded in summary.json (`provenance`) and report.md's footer.

Scores move with things outside the spec (a library upgrade, a re-tagged image, fewer
CPUs), so two runs are comparable only when these agree; `differences` says where they
do not. All pure: `proctor.local.provenance` gathers the facts.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

NOT_INSTALLED = "not installed"
PACKAGES = ("proctor", "swebench", "a2a-sdk")
"""The packages whose versions decide how a run is driven and graded."""


class DatasetProvenance(BaseModel):
    """Which rows, exactly."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    name: str
    """The spec's dataset.name: a hub id (a short name or alias recorded as its hub id),
    a file's path, or a bundled dataset's name."""
    split: str = ""
    """The split read (hub datasets)."""
    revision: str = ""
    """The hub revision the spec pins; empty: the hub's latest, not pinned (compare
    `file_sha256` or `rows_sha256` then)."""
    file_sha256: str | None = None
    """sha256 of the dataset file read (a local file, or the bundled dataset's file);
    None for a hub dataset."""
    rows_sha256: str = ""
    """Hash of exactly the rows selected (16 hex digits): equal rows, equal hash."""


class AgentCardProvenance(BaseModel):
    """The agent's card as it answered at the start of the run (A2A)."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    name: str = ""
    """The card's name."""
    version: str = ""
    """The card's version."""
    url: str = ""
    """The card's first interface URL (else the endpoint asked)."""
    error: str | None = None
    """Why no card was fetched (every item was already done and the agent did not
    answer); None when it was."""


class SandboxProvenance(BaseModel):
    """Where the tests ran, and with what."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    kinds: tuple[str, ...] = ()
    """The sandboxes used: `docker`, `process` (both when rows differed)."""
    resources: dict[str, Any] | None = None
    """runner.resources as the spec gives them (CPU and memory requests and limits); None
    when unset."""
    limits_applied: str = ""
    """The CPU and memory limits the tests actually ran under, in words."""
    runtime: str = ""
    """The container runtime (Docker's default runtime, e.g. runc), or the process
    sandbox's `process` (no container)."""
    images: dict[str, str] = {}
    """Each image used, by name: its digest (repo digest when it has one, else its id)."""
    images_note: str = ""
    """Why `images` is empty, when it is (the process sandbox runs no image)."""


class MachineProvenance(BaseModel):
    """The machine that ran the engine (no hostname: it says nothing about the result)."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    platform: str = ""
    """OS and platform (`platform.platform()`)."""
    python: str = ""
    """The Python version."""
    cpu_count: int | None = None
    """Logical CPUs."""
    memory_total_bytes: int | None = None
    """Physical memory in all."""


class Provenance(BaseModel):
    """Where a run came from (summary.json's `provenance`)."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    dataset: DatasetProvenance
    """Which rows."""
    versions: dict[str, str] = {}
    """Versions of proctor, swebench and a2a-sdk (`not installed` where absent)."""
    seeds: dict[str, int | None] = {}
    """Every seed the run uses, by what it seeds; None where that step takes no seed."""
    seeds_note: str = ""
    """What the unseeded steps do instead."""
    agent: AgentCardProvenance | None = None
    """The agent's card; None when no agent was asked (gold, empty or file predictions)."""
    sandbox: SandboxProvenance = SandboxProvenance()
    """The sandbox and its resources."""
    machine: MachineProvenance = MachineProvenance()
    """The machine."""


def seeds_of(strategy: str, variants_enabled: bool) -> tuple[dict[str, int | None], str]:
    """The run's seeds and what stands in for the missing ones (pure).

    An Evaluation names no seed: rows are taken in dataset order, repeats are plain
    re-runs, template variants are fixed rewordings, and llm variants are drawn unseeded
    (temperature 0.7) and then stored, so reusing the variants file is what repeats them.
    """
    note = "rows in dataset order; repeats are plain re-runs"
    if variants_enabled:
        note += ("; template variants are fixed rewordings" if strategy == "template"
                 else "; llm variants are drawn unseeded (temperature 0.7) and stored in "
                      "the variants file, which is what makes them repeatable")
    return {"variant_generation": None, "sampling": None}, note


def card_provenance(card: Any, endpoint: str) -> AgentCardProvenance:
    """The fields of an A2A AgentCard worth keeping (pure)."""
    interfaces = list(getattr(card, "supported_interfaces", ()) or ())
    url = str(getattr(interfaces[0], "url", "")) if interfaces else ""
    return AgentCardProvenance(name=str(card.name), version=str(card.version),
                               url=url or endpoint)


def stable_fields(p: Provenance) -> dict[str, Any]:
    """The fields two comparable runs share, flattened to dotted names (pure).

    Left out: the agent's URL (a loopback agent gets a new port each run) and its name
    and version when they are simply two different agents (`differences` decides).
    """
    flat: dict[str, Any] = {}
    data = p.model_dump(mode="json", exclude={"agent", "seeds_note"})
    _flatten(data, "", flat)
    return flat


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            _flatten(inner, f"{prefix}.{key}" if prefix else key, out)
    else:
        out[prefix] = value


def differences(a: Provenance | None, b: Provenance | None) -> list[str]:
    """One line per stable field in which two runs differ (pure). A run without
    provenance (written before it was recorded) is one line, not a field per field.

    The agent's card counts when both runs evaluated the same agent (same card name):
    a new version of one agent is a difference, two agents are the comparison itself.
    """
    if a is None or b is None:
        return [] if a is b else ["provenance: recorded for one run only"]
    fa, fb = stable_fields(a), stable_fields(b)
    lines = [f"{key}: {fa.get(key)!r} vs {fb.get(key)!r}"
             for key in sorted(set(fa) | set(fb)) if fa.get(key) != fb.get(key)]
    if a.agent and b.agent and a.agent.name == b.agent.name \
            and a.agent.version != b.agent.version:
        lines.append(f"agent.version: {a.agent.version!r} vs {b.agent.version!r}")
    return lines


def footer(p: Provenance) -> list[str]:
    """report.md's provenance section (pure)."""
    d, s, m = p.dataset, p.sandbox, p.machine
    rows = [("Dataset", f"{d.name}" + (f" (split {d.split})" if d.split else "")
             + (f", revision {d.revision}" if d.revision else "")),
            ("Dataset file sha256", d.file_sha256 or "none (hub dataset)"),
            ("Rows hash", d.rows_sha256 or "–"),
            ("Versions", ", ".join(f"{k} {v}" for k, v in p.versions.items())),
            ("Seeds", ", ".join(f"{k} {'none' if v is None else v}"
                                for k, v in p.seeds.items()) + f" ({p.seeds_note})"),
            ("Agent card", _card(p.agent)),
            ("Sandbox", f"{', '.join(s.kinds) or '–'}; runtime {s.runtime or '–'}; "
                        f"limits: {s.limits_applied or '–'}"),
            ("Images", ", ".join(f"{k} {v}" for k, v in sorted(s.images.items()))
             or s.images_note or "–"),
            ("Machine", f"{m.platform}, Python {m.python}, {m.cpu_count} CPUs, "
                        f"{_gib(m.memory_total_bytes)} memory")]
    return ["## Provenance", "", "| | |", "|---|---|",
            *(f"| {k} | {v.replace('|', '/')} |" for k, v in rows), ""]


def _card(card: AgentCardProvenance | None) -> str:
    if card is None:
        return "none (no agent was asked)"
    if card.error:
        return f"not fetched ({card.error})"
    return f"{card.name} {card.version} at {card.url}"


def _gib(value: int | None) -> str:
    return "unknown" if value is None else f"{value / 2**30:.1f} GiB"

