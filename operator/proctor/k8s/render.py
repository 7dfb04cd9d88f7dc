"""What the operator would create for an Evaluation, to review before it runs (pure).

`proctor render -f EV.yaml [-f AGENT.yaml] [--items N]` prints these objects, as
`helm template` prints a chart's: a service agent's Deployment and Service, the task
ConfigMaps and the first N Jobs. They come from the operator's own preparation
(``proctor.prepare``) and builders (``manifests``, ``agent_manifests``), so they are what
it creates, save for what it adds when it creates them: the owner reference to the
Evaluation or the agent (their uids are known only on the cluster) and the Evaluation's
own labels (`kopf.adopt` copies them), a node preferred because it ran the task before,
and what the operator's settings add (`manifests.JobDefaults`: the chart's `jobs` values).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from proctor import __version__
from proctor.core.model import WorkItem
from proctor.core.plan import Variant
from proctor.core.spec import AgentUnderTest, Evaluation
from proctor.datasets import Selection
from proctor.k8s.agents.status import agent_refusal
from proctor.k8s.children import agent_manifests
from proctor.k8s.children.manifests import TaskTooLarge, desired_objects, variant_texts
from proctor.k8s.features import prepull
from proctor.prepare import Refusal


def agent_of(evaluation: Evaluation, agents: Sequence[AgentUnderTest], *,
             allow_local: bool = False) -> AgentUnderTest | None:
    """The AgentUnderTest the evaluation asks (None when its patches are given), refused as
    the operator refuses it: absent from its namespace, or at a loopback or link-local
    address (unless ``allow_local``: the operator's --allow-local-endpoints)."""
    if evaluation.spec.predictions.source != "agent":
        return None
    ref = evaluation.spec.agent_ref.name if evaluation.spec.agent_ref else ""
    found = [a for a in agents if a.name == ref and a.namespace == evaluation.namespace]
    if not found:
        raise Refusal("AgentNotFound", f"Evaluation {evaluation.name!r} asks AgentUnderTest "
                                       f"{ref!r} in namespace {evaluation.namespace}: pass its "
                                       f"manifest too (-f agent.yaml)")
    if refusal := agent_refusal(found[0], allow_local=allow_local):
        reason, message = refusal
        if reason == "LocalEndpoint":  # say how to render it as such an operator would
            message += "; render it so with --allow-local-endpoints"
        raise Refusal(reason, message)
    return found[0]


def render(evaluation: Evaluation, agent: AgentUnderTest | None, selection: Selection,
           items: Sequence[WorkItem], n: int | None = None, *,
           runner_image_default: str | None = None,
           variants: Mapping[str, Sequence[Variant]] | None = None) -> list[dict[str, Any]]:
    """A service agent's Deployment and Service, the pull Jobs of the first ``n`` items'
    images (with spec.images.prePull), their task ConfigMaps (all items when ``n`` is
    None), then their Jobs, in the order the operator makes them (plan order).

    ``runner_image_default`` is the operator's default runner image (the chart sets it
    from its values), used when spec.runner.image is unset. ``variants`` are each task's
    prompt variants (`prepare.prompt_variants`), the ones ``items`` were planned with: their
    texts go into the task ConfigMaps.
    """
    chosen = list(items)[:n]  # all when None
    try:
        configmaps, jobs = desired_objects(evaluation, agent, chosen, selection.by_id,
                                           variant_texts(variants or {}),
                                           runner_version=__version__,
                                           runner_image_default=runner_image_default)
    except TaskTooLarge as exc:
        raise Refusal("TaskTooLarge", str(exc)) from exc
    pulls = [prepull.pull_job(evaluation, image) for image in prepull.images_of(
        evaluation, chosen, selection.by_id)] if evaluation.spec.images.pre_pull else []
    return [*(agent_manifests.desired(agent) if agent else []), *pulls, *configmaps, *jobs]


# libyaml's emitter where PyYAML has it: the whole Verified split (500 tasks, 14 MB of YAML)
# prints in about 1 s instead of 12.
# (misc: a base class computed at run time has no static type.)
class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Multi-line text (prompts, scripts) as literal blocks, to read as it will be."""


def _text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _text)


def to_yaml(objects: Sequence[dict[str, Any]]) -> str:
    """A stream of YAML documents, one per object, keys in the builders' order."""
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, width=100)
