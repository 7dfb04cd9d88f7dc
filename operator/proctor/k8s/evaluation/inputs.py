"""What an Evaluation's items are made of: its dataset selection and each task's prompt
variants, loaded once and kept (off the loop: loading takes seconds).

Template variants are made in-process (`prompt_variants`, shared with `proctor run`); llm
ones are read from the Evaluation's variants Job (`llm_variants`), whose VariantsReady
condition stays False until it ends.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from proctor import __version__, datasets
from proctor.core.plan import Variant
from proctor.core.spec import Evaluation
from proctor.k8s.children import manifests
from proctor.k8s.children.podstatus import PodsByJob
from proctor.k8s.evaluation.act import Tracked, create_variants_job, still_there, write_status
from proctor.k8s.features import llm_variants
from proctor.k8s.machinery.api import Kube, owner_uid
from proctor.k8s.machinery.conditions import now_text, set_condition
from proctor.k8s.machinery.indexes import Indexes, Key
from proctor.k8s.machinery.objects import MutableObj
from proctor.prepare import Refusal, load_selection, prompt_variants

log = logging.getLogger("proctor.controller")
Made = dict[str, list[Variant]]


def sized(evaluation: Evaluation, selection: datasets.Selection, made: Made
          ) -> Made | Refusal:
    """The variants ``made``, or the refusal of a task whose ConfigMap they would make too
    large (as `proctor render` refuses it)."""
    try:
        manifests.check_task_sizes(evaluation, selection.instances,
                                   manifests.variant_texts(made))
    except manifests.TaskTooLarge as exc:
        return Refusal("TaskTooLarge", str(exc))
    return made


def made_variants(evaluation: Evaluation, selection: datasets.Selection) -> Made | Refusal:
    """Each task's template prompt variants, or the refusal of a task too large for them."""
    return sized(evaluation, selection, prompt_variants(evaluation, selection))


class Inputs:
    """The datasets and template variants loaded so far, shared by every Evaluation."""

    def __init__(self, kube: Kube, indexes: Indexes, runner_image: str | None):
        self.kube, self.indexes, self.runner_image = kube, indexes, runner_image
        self._datasets: dict[tuple[Any, ...], datasets.Selection] = {}
        self._variants: dict[tuple[Any, ...], Made | Refusal] = {}

    async def dataset(self, evaluation: Evaluation) -> datasets.Selection:
        ds = evaluation.spec.dataset
        key = (ds.name, ds.split, ds.revision, ds.instance_ids, ds.max_rows)
        if key not in self._datasets:
            self._datasets[key] = await asyncio.to_thread(load_selection, evaluation)
        return self._datasets[key]

    async def variants(self, key: Key, tracked: Tracked, body: MutableObj, evaluation: Evaluation,
                       selection: datasets.Selection) -> Made | None:
        """Each task's prompt variants: template ones made here (`template_variants`), llm
        ones read from the Evaluation's variants Job; None (and VariantsReady False in the
        status) while that Job is writing them."""
        sensitivity = evaluation.spec.prompt_sensitivity
        if not (sensitivity.enabled and sensitivity.strategy == "llm"):
            return await self.template_variants(evaluation, selection)
        if tracked.llm_variants is None or not tracked.llm_variants.ready:
            tracked.llm_variants = await self.llm_variants(key, tracked, body, evaluation,
                                                           selection)
        state = tracked.llm_variants
        if not state.ready:
            generation = body["metadata"].get("generation")
            waiting = set_condition(
                (body.get("status") or {}).get("conditions") or [], llm_variants.CONDITION,
                False, state.reason, state.message, now=now_text(),
                observed_generation=generation)
            await write_status(self.kube, tracked, body, {
                "reason": "MakingVariants", "conditions": waiting,
                "observedGeneration": generation})
            return None
        checked = sized(evaluation, selection, state.variants)
        if isinstance(checked, Refusal):
            raise checked
        return checked

    async def llm_variants(self, key: Key, tracked: Tracked, body: MutableObj,
                           evaluation: Evaluation, selection: datasets.Selection
                           ) -> llm_variants.VariantsState:
        """Where the Evaluation's variants Job stands (created here when it has none); its
        pod's log is read once the Job has ended (its pod gone: no variants, every task
        its original only)."""
        name = llm_variants.variants_job_name(evaluation)
        job = next((j for j in self.indexes.jobs(key) if j["metadata"]["name"] == name
                    and owner_uid(j) == tracked.uid), None)
        task_ids = tuple(i.instance_id for i in selection.instances)
        if job is None and await still_there(self.kube, key[0], tracked):
            await create_variants_job(self.kube, body, llm_variants.variants_job(
                evaluation, runner_version=__version__, runner_image_default=self.runner_image))
        state = llm_variants.variants_state(job, None, task_ids)
        if state.reason == "ReadingLog":
            assert job is not None
            pods = PodsByJob(self.indexes.pods(key)).of(job)
            text = await asyncio.to_thread(self.kube.pod_log, key[0],
                                           pods[-1]["metadata"]["name"], "variants"
                                           ) if pods else ""
            state = llm_variants.variants_state(job, text, task_ids)
        if state.ready:
            log.info("Read the llm variants evaluation=%s tasks=%d failed=%d reason=%s",
                     tracked.name, len(task_ids), len(state.failed), state.reason)
        return state

    async def template_variants(self, evaluation: Evaluation, selection: datasets.Selection
                                ) -> Made:
        """Each task's prompt variants (`prompt_variants`), made once per dataset and
        promptSensitivity, off the loop (the Verified split's 3 template variants take
        2 s, its 14 take 20 s); a Refusal (kept, not made again) when a task's ConfigMap
        would be too large for them."""
        spec = evaluation.spec
        key = (selection.fingerprint, spec.prompt_sensitivity, spec.predictions)
        if key not in self._variants:
            self._variants[key] = await asyncio.to_thread(made_variants, evaluation,
                                                          selection)
        made = self._variants[key]
        if isinstance(made, Refusal):  # a new one each time: a raise adds to its traceback
            raise Refusal(made.reason, made.message)
        return made
