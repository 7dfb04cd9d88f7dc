"""Work items: what an evaluation will run, as a pure function of its inputs."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from proctor.core.model import ORIGINAL_VARIANT, Instance, Usage, WorkItem


@dataclass(frozen=True)
class Variant:
    """A prompt variant of one task: the problem text the agent gets instead."""

    variant_id: str
    text: str
    usage: Usage | None = None
    """What writing it cost (llm variants: the variant's share of its model call)."""


@dataclass(frozen=True)
class PlanInputs:
    """What decides the meaning of an item, besides the task and the variant."""

    dataset: str
    revision: str
    agent: str
    repeats: int = 1
    include_hints: bool = True


def item_id(inputs: PlanInputs, instance: Instance, variant: Variant, repeat: int) -> str:
    """The resume key: equal exactly when the item would ask the same thing again."""
    key = [inputs.dataset, inputs.revision, inputs.agent, inputs.include_hints,
           instance.instance_id, instance.base_commit,
           hashlib.sha256(instance.model_dump_json().encode()).hexdigest(),
           variant.variant_id, hashlib.sha256(variant.text.encode()).hexdigest(), repeat]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32]


def plan(inputs: PlanInputs, instances: Sequence[Instance],
         variants: Mapping[str, Iterable[Variant]] | None = None) -> list[WorkItem]:
    """Every item: each task x (original + its variants) x repeat, in a fixed order."""
    items: list[WorkItem] = []
    for inst in instances:
        own = [Variant(ORIGINAL_VARIANT, inst.problem_statement),
               *(variants or {}).get(inst.instance_id, ())]
        for variant in own:
            for repeat in range(inputs.repeats):
                items.append(WorkItem(id=item_id(inputs, inst, variant, repeat),
                                      instance_id=inst.instance_id,
                                      variant_id=variant.variant_id, repeat=repeat))
    return items


def shard(instances: Sequence[Instance], index: int, count: int) -> list[Instance]:
    """The rows of shard `index` of `count`: every `count`-th row from the `index`-th, in
    dataset order (pure). The shards of a split are disjoint and together hold every row,
    whatever the rows, so runs of the shards, unioned, are the unsharded run."""
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard index {index} of {count}: the index must be at least 0 "
                         f"and below the number of shards (at least 1)")
    return list(instances[index::count])
