"""Prompt variants on the cluster: the pure parts (what is refused, the items and their Jobs,
the texts each Job gets, what `proctor results pull` reads back, the status).

The operator makes template variants in-process, the same as `proctor run` makes them: its
items carry the engine's ids (a restart, or an engine run of the same manifests, names each
item the same), and each variant's text reaches its Job through its task's ConfigMap.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from proctor.cli.main import main as cli_main
from proctor.core.labels import ANNOTATION_ITEM
from proctor.core.model import ORIGINAL_VARIANT
from proctor.core.spec import LLM_VARIANTS_NOT_RENDERED, VARIANTS_FILE_ON_CLUSTER, Evaluation
from proctor.datasets import demo
from proctor.formats.manifest import parse_manifests, parse_resource
from proctor.k8s.children.manifests import (
    TaskTooLarge,
    check_task_sizes,
    prompt_key,
    task_variants,
    variant_texts,
)
from proctor.k8s.evaluation import reconcile
from proctor.k8s.evaluation.act import Tracked
from proctor.k8s.features.llm_variants import variants_job
from proctor.k8s.render import agent_of, render
from proctor.prepare import (
    Refusal,
    check_runnable,
    load_selection,
    plan_items,
    prompt_variants,
    variants_store,
)
from proctor.variants import read_variants, template_variants, text_hash, write_variants
from proctor.variants.template import style_ids

TASKS = len(demo.load_rows())
AGENT = """\
apiVersion: proctor.dev/v1alpha1
kind: AgentUnderTest
metadata: {name: sensitive, namespace: evals}
spec: {endpoint: "http://sensitive.agents:9009/"}
"""
TEMPLATE = {"enabled": True, "strategy": "template", "numVariations": 2}


def evaluation_yaml(**spec: Any) -> str:
    body = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
            "metadata": {"name": "demo", "namespace": "evals"},
            "spec": {"agentRef": {"name": "sensitive"},
                     "dataset": {"name": "proctor-demo", "maxRows": -1}, **spec}}
    return yaml.safe_dump(body)


# --- What the operator refuses --------------------------------------------------------------


def test_a_variants_file_is_refused_on_the_cluster_only() -> None:
    (evaluation,) = parse_manifests(evaluation_yaml(
        promptSensitivity={**TEMPLATE, "variantsFile": "variants.jsonl"}))
    with pytest.raises(Refusal) as refused:
        check_runnable(evaluation, on_cluster=True)
    assert (refused.value.reason, refused.value.message) == ("PromptSensitivityUnsupported",
                                                            VARIANTS_FILE_ON_CLUSTER)
    check_runnable(evaluation, on_cluster=False)  # `proctor run` runs it


def refusal(evaluation: Evaluation, on_cluster: bool) -> str | None:
    """The reason `check_runnable` refuses the Evaluation for, or None where it runs it."""
    try:
        check_runnable(evaluation, on_cluster=on_cluster)
    except Refusal as refused:
        return refused.reason
    return None


@pytest.mark.parametrize(("sensitivity", "strategy"), [
    (TEMPLATE, "template"),
    ({"enabled": True}, "llm"),  # llm: the CRD's default (its variants Job writes them)
    ({"enabled": True, "strategy": "llm", "model": "openai/gpt-4o"}, "llm")],
    ids=["template", "llm-default", "llm"])
def test_template_and_llm_variants_run_on_the_cluster(sensitivity: dict, strategy: str) -> None:
    (evaluation,) = parse_manifests(evaluation_yaml(promptSensitivity=sensitivity, repeats=2))
    assert evaluation.spec.prompt_sensitivity.strategy == strategy
    assert refusal(evaluation, on_cluster=True) is None
    # And the operator makes them: template ones in its process, planned as `proctor run`
    # plans them; llm ones in the Job that runs `proctor variants generate`.
    if strategy == "template":
        selection = load_selection(evaluation)
        items = Tracked(uid="u", name="demo").items({"metadata": {"generation": 1}}, evaluation,
                                                    selection,
                                                    prompt_variants(evaluation, selection))
        assert len(items) == TASKS * 3 * 2
        assert {i.variant_id for i in items} == {ORIGINAL_VARIANT, *style_ids()[:2]}
    else:
        job = variants_job(evaluation, runner_version="0.1.0")
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert "exec proctor variants generate" in container["command"][-1]


def test_the_operator_runs_llm_variants_and_template_takes_a_variants_file(tmp_path: Path
                                                                          ) -> None:
    llm = parse_manifests(evaluation_yaml(promptSensitivity={"enabled": True,
                                                             "numVariations": 2}))[0]
    assert llm.spec.prompt_sensitivity.strategy == "llm"
    assert refusal(llm, on_cluster=False) is None
    assert refusal(llm, on_cluster=True) is None  # its variants Job writes them
    template = parse_manifests(evaluation_yaml(promptSensitivity={
        **TEMPLATE, "variantsFile": str(tmp_path / "v.jsonl")}))[0]
    assert refusal(template, on_cluster=False) is None
    assert variants_store(template) == tmp_path / "v.jsonl"  # where its records are kept


# --- One Job per item, each with its own variant's text -------------------------------------


def rendered(text: str) -> tuple[list[dict], list[dict], list]:
    """The task ConfigMaps and Jobs `proctor render` prints, and the engine's plan."""
    evaluation, *agents = parse_manifests(text)
    selection = load_selection(evaluation)
    variants = prompt_variants(evaluation, selection)
    items = plan_items(evaluation, selection, variants)
    objects = render(evaluation, agent_of(evaluation, agents), selection, items,
                     variants=variants)
    return ([o for o in objects if o["kind"] == "ConfigMap"],
            [o for o in objects if o["kind"] == "Job"], items)


def item_of(job: dict) -> dict:
    """The work item a Job's pod reads as /task/item.json."""
    return json.loads(job["spec"]["template"]["metadata"]["annotations"][ANNOTATION_ITEM])


def projected(job: dict) -> tuple[str, dict[str, str]]:
    """The task ConfigMap a Job's /task comes from, and its key -> path items."""
    volume = next(v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "task")
    source = volume["projected"]["sources"][0]["configMap"]
    return source["name"], {i["key"]: i["path"] for i in source["items"]}


def test_one_job_per_task_variant_and_repeat_named_as_the_engine_names_its_items() -> None:
    configmaps, jobs, items = rendered(evaluation_yaml(promptSensitivity=TEMPLATE, repeats=2)
                                       + "---\n" + AGENT)
    assert len(jobs) == len(items) == TASKS * 3 * 2 and len(configmaps) == TASKS
    shown = [item_of(j) for j in jobs]
    assert [s["id"] for s in shown] == [i.id for i in items]
    assert len({s["id"] for s in shown}) == len(items)
    assert {s["variant_id"] for s in shown} == {ORIGINAL_VARIANT, *style_ids()[:2]}


def test_each_job_reads_its_own_variants_text() -> None:
    configmaps, jobs, _ = rendered(evaluation_yaml(promptSensitivity=TEMPLATE) + "---\n" + AGENT)
    by_name = {c["metadata"]["name"]: c["data"] for c in configmaps}
    (evaluation,) = parse_manifests(evaluation_yaml())
    rows = load_selection(evaluation).by_id
    for job in jobs:
        item = item_of(job)
        name, paths = projected(job)
        key = prompt_key(item["variant_id"])
        assert paths[key] == "prompt.txt"
        data = by_name[name]
        instance_id = json.loads(data["instance.json"])["instance_id"]
        assert instance_id == item["instance_id"]
        if item["variant_id"] == ORIGINAL_VARIANT:
            assert data[key] == json.loads(data["instance.json"])["problem_statement"]
        else:
            (want,) = [v for v in template_variants(rows[instance_id], 2)
                       if v.variant_id == item["variant_id"]]
            assert data[key] == want.text != data[prompt_key(ORIGINAL_VARIANT)]


def test_without_prompt_sensitivity_only_originals() -> None:
    configmaps, jobs, items = rendered(evaluation_yaml() + "---\n" + AGENT)
    assert len(jobs) == len(items) == TASKS
    assert all(set(c["data"]) == {"instance.json", prompt_key(ORIGINAL_VARIANT)}
               for c in configmaps)


def test_the_command_prints_one_job_per_item(tmp_path: Path, capsys) -> None:
    manifest = tmp_path / "ev.yaml"
    manifest.write_text(evaluation_yaml(promptSensitivity=TEMPLATE, repeats=2) + "---\n" + AGENT)
    assert cli_main(["render", "-f", str(manifest)]) == 0
    printed = list(yaml.safe_load_all(capsys.readouterr().out))
    assert sum(o["kind"] == "Job" for o in printed) == TASKS * 3 * 2


def test_the_command_refuses_llm_variants_in_one_line(tmp_path: Path, capsys) -> None:
    """Which items exist depends on what the model writes on the cluster: nothing to print
    (and no model is called from the user's machine)."""
    manifest = tmp_path / "ev.yaml"
    manifest.write_text(evaluation_yaml(promptSensitivity={"enabled": True}) + "---\n" + AGENT)
    assert cli_main(["render", "-f", str(manifest)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert captured.out == "" and LLM_VARIANTS_NOT_RENDERED in line


# --- Read back: what `proctor results pull` writes as variants.jsonl ------------------------


def test_the_task_configmaps_give_back_the_variants_the_engine_records(tmp_path: Path) -> None:
    """variants.jsonl from the ConfigMaps equals the one `proctor run` writes: the analysis
    reads each variant's hash and similarity from it."""
    configmaps, _, _ = rendered(evaluation_yaml(promptSensitivity=TEMPLATE) + "---\n" + AGENT)
    (evaluation,) = parse_manifests(evaluation_yaml(promptSensitivity=TEMPLATE))
    selection = load_selection(evaluation)
    write_variants(tmp_path / "engine", selection.instances,
                   prompt_variants(evaluation, selection))
    write_variants(tmp_path / "cluster", *task_variants(configmaps))
    engine, cluster = read_variants(tmp_path / "engine"), read_variants(tmp_path / "cluster")
    assert cluster == engine and len(engine) == TASKS * 3
    assert all(r["sha256"] == text_hash(r["text"]) for r in cluster.values())


def test_configmaps_that_are_not_tasks_are_skipped() -> None:
    assert task_variants([{"data": {"result.json": "{}"}}, {"metadata": {}}]) == ([], {})


# --- The status -----------------------------------------------------------------------------


def status_with(variants_failed: int | None) -> dict:
    evaluation = parse_resource({
        "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation", "metadata": {"name": "ev"},
        "spec": {"dataset": {"name": "proctor-demo"}, "predictions": {"source": "gold"}}})
    return reconcile.build_status(evaluation, "gold", [], [], [], generation=1,
                                  fingerprint="abc", variants_failed=variants_failed)


def test_the_status_says_how_many_tasks_got_no_variants() -> None:
    assert status_with(0)["variantsFailed"] == 0
    assert status_with(2)["variantsFailed"] == 2
    assert "variantsFailed" not in status_with(None)  # promptSensitivity off


# --- What the operator keeps per Evaluation -------------------------------------------------


def test_the_operator_plans_the_engines_items_once_per_generation() -> None:
    (evaluation,) = parse_manifests(evaluation_yaml(promptSensitivity=TEMPLATE, repeats=2))
    selection = load_selection(evaluation)
    made = prompt_variants(evaluation, selection)
    tracked = Tracked(uid="u", name="demo")
    body = {"metadata": {"generation": 1}}
    items = tracked.items(body, evaluation, selection, made)
    assert items == plan_items(evaluation, selection, made)  # what `proctor run` plans
    # Made afresh (a restarted operator, or `proctor run`): the same items, the same ids.
    fresh = load_selection(evaluation)
    assert plan_items(evaluation, fresh, prompt_variants(evaluation, fresh)) == items
    assert tracked.variants_failed == 0
    assert tracked.variants == {task: {v.variant_id: v.text for v in own}
                                for task, own in made.items()}
    # The same generation keeps its plan; a new one plans again (here: one task lost its
    # variants, as a failed generation leaves it: it runs its original only).
    assert tracked.items(body, evaluation, selection, {}) is items
    first = selection.instances[0].instance_id
    fewer = {task: own for task, own in made.items() if task != first}
    again = tracked.items({"metadata": {"generation": 2}}, evaluation, selection, fewer)
    assert len(again) == len(items) - 2 * 2 and tracked.variants_failed == 1
    assert {i.variant_id for i in again if i.instance_id == first} == {ORIGINAL_VARIANT}


def test_without_prompt_sensitivity_no_count_of_failed_variants() -> None:
    (evaluation,) = parse_manifests(evaluation_yaml())
    selection = load_selection(evaluation)
    tracked = Tracked(uid="u", name="demo")
    items = tracked.items({"metadata": {"generation": 1}}, evaluation, selection, {})
    assert len(items) == TASKS and tracked.variants_failed is None


def test_variants_that_make_a_task_too_large_are_found_before_any_item_starts() -> None:
    """A task whose ConfigMap fits with its original alone may not with its variants: the
    operator checks every task when it plans (and refuses, reason TaskTooLarge)."""
    (evaluation,) = parse_manifests(evaluation_yaml(promptSensitivity=TEMPLATE))
    rows = list(load_selection(evaluation).instances)
    big = rows[0].model_copy(update={"problem_statement": "word " * 80_000})  # 400 kB
    check_task_sizes(evaluation, [big, *rows[1:]], {})
    variants = variant_texts(prompt_variants_of([big, *rows[1:]]))
    with pytest.raises(TaskTooLarge, match=f"task data of {big.instance_id} holds"):
        check_task_sizes(evaluation, [big, *rows[1:]], variants)


def prompt_variants_of(rows: list) -> dict:
    return {row.instance_id: template_variants(row, 2) for row in rows}
