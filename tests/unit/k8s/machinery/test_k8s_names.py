"""Names of the objects Proctor creates: deterministic, valid, and distinct at scale."""

from __future__ import annotations

import hashlib

import pytest

from proctor import datasets
from proctor.core.plan import PlanInputs, Variant, plan
from proctor.k8s.machinery.names import (
    ITEM_HASH_CHARS,
    MAX_LABEL,
    configmap_name,
    is_dns_label,
    is_label_value,
    job_name,
    label_value,
    owner_part,
)
from support.paths import VERIFIED_PARQUET, shared

PARQUET = VERIFIED_PARQUET
LONGEST = "a" * 253  # the longest name an Evaluation can have (a DNS subdomain)


def fake_item_id(n: int) -> str:
    return hashlib.sha256(f"item {n}".encode()).hexdigest()[:32]


@pytest.fixture(scope="module")
def verified_plan():
    """The real split x (original + 3 variants): 2,000 work items."""
    instances = datasets.load(str(shared(PARQUET)), max_rows=-1).instances
    variants = {i.instance_id: [Variant(f"v{k}", f"rephrased {k}: {i.problem_statement}")
                                for k in (1, 2, 3)] for i in instances}
    inputs = PlanInputs(dataset="SWE-bench/SWE-bench_Verified", revision="r", agent="a")
    return instances, plan(inputs, instances, variants)


@pytest.mark.parametrize("evaluation", ["demo", "x" * 42, "x" * 43, LONGEST, "v1.2.eval"])
def test_ten_thousand_items_get_distinct_valid_job_names(evaluation: str) -> None:
    names = {job_name(evaluation, fake_item_id(n)) for n in range(10_000)}
    assert len(names) == 10_000
    assert all(is_dns_label(name) for name in names)


def test_the_real_split_times_four_variants_gets_distinct_job_names(verified_plan) -> None:
    _, items = verified_plan
    assert len(items) == 2000
    for evaluation in ("verified-gpt", LONGEST):
        names = {job_name(evaluation, item.id, attempt) for item in items for attempt in (0, 1)}
        assert len(names) == 4000
        assert all(is_dns_label(name) and len(name) <= MAX_LABEL for name in names)


def test_job_name_reads_as_evaluation_and_item() -> None:
    item = fake_item_id(1)
    assert job_name("demo", item) == f"demo-{item[:ITEM_HASH_CHARS]}"
    assert job_name("demo", item, attempt=2) == f"demo-{item[:ITEM_HASH_CHARS]}-r2"
    assert job_name("demo", item) == job_name("demo", item)  # deterministic


def test_long_evaluation_names_that_share_a_prefix_stay_apart() -> None:
    # Item ids do not depend on the Evaluation: its name alone keeps two runs apart.
    item = fake_item_id(7)
    first, second = "agent-x-on-verified-" + "a" * 40 + "-run-1", "agent-x-on-verified-" \
        + "a" * 40 + "-run-2"
    assert job_name(first, item) != job_name(second, item)
    assert len(job_name(first, item, attempt=10)) <= MAX_LABEL
    # Dots are fine in an Evaluation's name but not in a pod's hostname.
    assert owner_part("v1.2") != owner_part("v1-2") and is_dns_label(owner_part("v1.2"))


@pytest.mark.parametrize("attempt", [-1, 11])
def test_attempts_beyond_infra_retries_are_refused(attempt: int) -> None:
    with pytest.raises(ValueError, match="attempt"):
        job_name("demo", fake_item_id(1), attempt)


def test_every_verified_instance_id_is_its_own_label_value(verified_plan) -> None:
    instances, _ = verified_plan
    assert all(label_value(i.instance_id) == i.instance_id for i in instances)


@pytest.mark.parametrize("text", ["a" * 200, "ends-with-dash-", "_starts", "has space",
                                  "ünïcode", "-", ""])
def test_any_text_becomes_a_valid_label_value(text: str) -> None:
    value = label_value(text)
    assert is_label_value(value)
    assert label_value(text) == value


def test_cut_label_values_stay_distinct() -> None:
    values = {label_value("x" * 100 + str(n)) for n in range(1000)}
    assert len(values) == 1000


def test_configmap_names_are_content_addressed() -> None:
    digest = hashlib.sha256(b"content").hexdigest()
    name = configmap_name("demo", "task", digest)
    assert name == f"demo-task-{digest[:16]}"
    assert configmap_name(LONGEST, "patch", digest).endswith(f"-patch-{digest[:16]}")
    assert is_dns_label(configmap_name(LONGEST, "patch", digest))
