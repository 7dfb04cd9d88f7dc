"""The CRDs, the manifest loader and the spec models, on real files with real cel-python."""

from __future__ import annotations

import textwrap
import typing
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pytest
import yaml
from pydantic import BaseModel

from proctor.core.spec import (
    AgentUnderTest,
    AgentUnderTestSpec,
    DatasetSpec,
    Evaluation,
    EvaluationSpec,
)
from proctor.formats.manifest import (
    KINDS,
    ManifestError,
    apply_defaults,
    crd,
    load_manifests,
    parse_manifests,
    parse_resource,
    spec_schema,
    to_json_schema,
)
from support.paths import ROOT

CRD_FILES = sorted((ROOT / "crds").glob("*.yaml"))
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
SHORT_NAMES = {"Evaluation": "evals", "AgentUnderTest": "aut"}
SPEC_MODELS: dict[str, type[BaseModel]] = {
    "Evaluation": EvaluationSpec,
    "AgentUnderTest": AgentUnderTestSpec,
}


def manifest(kind: str, spec: str, name: str = "demo", api: str = "proctor.dev/v1alpha1") -> str:
    """A one-document manifest; ``spec`` is the YAML body of its spec."""
    body = textwrap.indent(textwrap.dedent(spec).strip(), "  ")
    return f"apiVersion: {api}\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n{body}\n"


def load_one(text: str) -> Evaluation | AgentUnderTest:
    (resource,) = parse_manifests(text, "test.yaml")
    return resource


def problems(text: str) -> list[str]:
    """Every problem the loader reports for ``text``, which must be refused."""
    with pytest.raises(ManifestError) as caught:
        parse_manifests(text, "test.yaml")
    assert str(caught.value) == "\n".join(caught.value.problems)
    return list(caught.value.problems)


def schema_nodes(schema: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping]]:
    """Every node of a CRD schema with its path; map values and list items as ``[]``."""
    yield path, schema
    for name, prop in schema.get("properties", {}).items():
        yield from schema_nodes(prop, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), Mapping):
            yield from schema_nodes(schema[key], f"{path}[]")


# --- Defaults -------------------------------------------------------------------------------


def test_defaults_fill_omitted_objects() -> None:
    evaluation = load_one(manifest("Evaluation", "agentRef: {name: my-agent}"))
    assert isinstance(evaluation, Evaluation)
    assert (evaluation.name, evaluation.namespace) == ("demo", "default")
    spec = evaluation.spec
    assert spec.dataset == DatasetSpec(
        name="SWE-bench/SWE-bench_Verified",
        split="test",
        revision="",
        instance_ids=(),
        max_rows=3,
        include_hints=True,
    )
    assert (spec.max_concurrent_rows, spec.repeats, spec.suspend) == (1, 1, False)
    assert spec.green_agent_model == "ollama/qwen2.5-coder:7b"
    assert spec.prompt_sensitivity.model_dump() == {
        "enabled": False,
        "num_variations": 3,
        "strategy": "llm",
        "model": None,
        "api_base": None,
        "api_key_secret_ref": None,
        "variants_file": None,
    }
    assert spec.predictions.source == "agent" and spec.predictions.path is None
    assert (spec.timeouts.test_seconds, spec.timeouts.pod_seconds) == (1800, None)
    assert (spec.runner.image, spec.runner.instance_image_registry) == ("", "")
    assert spec.runner.infra_retries == 2


def test_defaults_fill_present_objects() -> None:
    spec = load_one(
        manifest(
            "Evaluation",
            """
            agentRef: {name: a}
            dataset: {name: proctor-demo}
            promptSensitivity: {enabled: true}
            """,
        )
    ).spec
    assert isinstance(spec, EvaluationSpec)
    assert (spec.dataset.name, spec.dataset.split, spec.dataset.max_rows) == (
        "proctor-demo",
        "test",
        3,
    )
    assert spec.prompt_sensitivity.num_variations == 3


def test_defaults_fill_agent_objects_and_list_items() -> None:
    agent = load_one(
        manifest(
            "AgentUnderTest",
            """
            service: {image: agent:1, env: [{name: A}]}
            auth: {secretRef: {name: s, key: token}}
            """,
        )
    )
    assert isinstance(agent, AgentUnderTest)
    assert agent.spec.service is not None and agent.spec.service.port == 9009
    assert agent.spec.auth is not None
    assert (agent.spec.auth.header, agent.spec.auth.scheme) == ("Authorization", "Bearer")
    assert (agent.spec.request_timeout_seconds, agent.spec.max_concurrent_tasks) == (1800, 8)


def test_null_is_dropped_then_defaulted_as_the_apiserver_does() -> None:
    spec = load_one(manifest("Evaluation", "agentRef: {name: a}\ndataset:\nrepeats:")).spec
    assert isinstance(spec, EvaluationSpec)
    assert spec.dataset.max_rows == 3 and spec.repeats == 1


def test_apply_defaults_returns_a_new_value() -> None:
    given: dict[str, Any] = {"dataset": {"maxRows": 5}}
    defaulted = apply_defaults(given, spec_schema("Evaluation"))
    assert given == {"dataset": {"maxRows": 5}}
    assert defaulted["dataset"]["maxRows"] == 5 and defaulted["dataset"]["split"] == "test"
    assert defaulted["runner"]["infraRetries"] == 2


# --- Examples and the happy path ------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_loads(path: Path) -> None:
    assert load_manifests(path)


def test_examples_say_what_they_are_for() -> None:
    assert {path.name for path in EXAMPLES} >= {
        "demo-gold.yaml",
        "demo-empty.yaml",
        "agent.yaml",
        "evaluation.yaml",
    }
    for name, source in (("demo-gold.yaml", "gold"), ("demo-empty.yaml", "empty")):
        (evaluation,) = load_manifests(ROOT / "examples" / name)
        assert isinstance(evaluation, Evaluation)
        assert evaluation.spec.dataset.name == "proctor-demo"
        assert evaluation.spec.dataset.max_rows == -1
        assert evaluation.spec.predictions.source == source
        assert evaluation.spec.max_concurrent_rows == 2
    (agent,) = load_manifests(ROOT / "examples" / "agent.yaml")
    (evaluation,) = load_manifests(ROOT / "examples" / "evaluation.yaml")
    assert isinstance(agent, AgentUnderTest) and isinstance(evaluation, Evaluation)
    assert agent.spec.endpoint == "http://127.0.0.1:9009/"
    assert evaluation.spec.agent_ref is not None and evaluation.spec.agent_ref.name == agent.name
    assert evaluation.spec.repeats == 3
    assert not evaluation.spec.prompt_sensitivity.enabled  # refused on a cluster yet


def test_several_documents_and_a_namespace() -> None:
    text = (
        manifest("AgentUnderTest", "endpoint: https://agent.example/", name="a")
        + "---\n---\n"
        + manifest("Evaluation", "agentRef: {name: a}", name="b").replace(
            "name: b", "name: b\n  namespace: team-1"
        )
    )
    agent, evaluation = parse_manifests(text)
    assert isinstance(agent, AgentUnderTest) and isinstance(evaluation, Evaluation)
    assert (evaluation.name, evaluation.namespace) == ("b", "team-1")


def test_parse_resource_reads_an_object_from_the_cluster() -> None:
    body = yaml.safe_load(manifest("Evaluation", "predictions: {source: gold}"))
    body["metadata"].update(namespace="ns", uid="1234", resourceVersion="7")
    body["status"] = {"phase": "Running"}
    evaluation = parse_resource(body)
    assert isinstance(evaluation, Evaluation) and evaluation.namespace == "ns"
    assert "status" in body and "dataset" not in body["spec"]  # the input is left alone


def test_timestamp_like_scalars_stay_strings() -> None:
    spec = load_one(
        manifest("Evaluation", "agentRef: {name: a}\ndataset: {revision: 2024-01-31}")
    ).spec
    assert isinstance(spec, EvaluationSpec) and spec.dataset.revision == "2024-01-31"


# --- Refusals with the schema's own message -------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            "dataset: {maxRows: -2}",
            'test.yaml: Evaluation "demo": spec.dataset.maxRows: -2 is less than the minimum of -1',
        ),
        (
            "predictions: {source: magic}",
            "test.yaml: Evaluation \"demo\": spec.predictions.source: 'magic' is not one of "
            "['agent', 'gold', 'empty', 'file']",
        ),
        (
            "repeats: three",
            "test.yaml: Evaluation \"demo\": spec.repeats: 'three' is not of type 'integer'",
        ),
        (
            "repeats: 101",
            'test.yaml: Evaluation "demo": spec.repeats: 101 is greater than the maximum of 100',
        ),
        (
            "dataset: {mxRows: 3}",
            'test.yaml: Evaluation "demo": spec.dataset.mxRows: unknown field "mxRows"',
        ),
        (
            "runner: {nodeSelector: {kubernetes.io/os: 1}}",
            'test.yaml: Evaluation "demo": spec.runner.nodeSelector["kubernetes.io/os"]: '
            "1 is not of type 'string'",
        ),
        (
            "dataset: {instanceIds: [a, b, a]}",
            'test.yaml: Evaluation "demo": spec.dataset.instanceIds[2]: Duplicate value: "a"',
        ),
        (
            "agentRef: {}",
            "test.yaml: Evaluation \"demo\": spec.agentRef: 'name' is a required property",
        ),
    ],
)
def test_evaluation_refused_with_schema_message(spec: str, expected: str) -> None:
    prefix = "" if spec.startswith("agentRef") else "agentRef: {name: a}\n"
    assert problems(manifest("Evaluation", prefix + spec)) == [expected]


def test_agent_refused_with_schema_message() -> None:
    found = problems(
        manifest(
            "AgentUnderTest",
            """
            endpoint: ftp://agent
            requestTimeoutSeconds: 0
            """,
        )
    )
    assert found == [
        "test.yaml: AgentUnderTest \"demo\": spec.endpoint: endpoint must be an http:// or "
        "https:// URL with a host, e.g. http://my-agent.agents.svc:9009/",
        'test.yaml: AgentUnderTest "demo": spec.requestTimeoutSeconds: '
        "0 is less than the minimum of 1",
    ]


def test_unknown_fields_are_refused_everywhere() -> None:
    text = manifest("AgentUnderTest", "sidecar: {image: i, imag: j}\nendpiont: x")
    text += "extra: 1\n"
    assert problems(text) == [
        'test.yaml: AgentUnderTest "demo": spec.sidecar.imag: unknown field "imag"',
        'test.yaml: AgentUnderTest "demo": spec.endpiont: unknown field "endpiont"',
        'test.yaml: AgentUnderTest "demo": extra: unknown field "extra"',
    ]


def test_preserve_unknown_fields_objects_take_anything() -> None:
    spec = load_one(
        manifest(
            "Evaluation",
            """
            agentRef: {name: a}
            runner:
              resources: {limits: {cpu: "2", memory: 4Gi}}
              tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
            """,
        )
    ).spec
    assert isinstance(spec, EvaluationSpec)
    assert spec.runner.resources == {"limits": {"cpu": "2", "memory": "4Gi"}}
    assert spec.runner.tolerations[0]["key"] == "gpu"


def test_bad_api_version_and_kind() -> None:
    assert problems(manifest("Evaluation", "agentRef: {name: a}", api="proctor.dev/v1")) == [
        "test.yaml: Evaluation \"demo\": apiVersion: 'proctor.dev/v1' is not one of "
        "['proctor.dev/v1alpha1']"
    ]
    assert problems(manifest("Evalution", "agentRef: {name: a}")) == [
        "test.yaml: Evalution \"demo\": kind: 'Evalution' is not one of "
        "['Evaluation', 'AgentUnderTest']"
    ]
    assert problems("apiVersion: proctor.dev/v1alpha1\nmetadata: {name: x}\nspec: {}\n") == [
        "test.yaml: 'kind' is a required property"
    ]


def test_missing_or_invalid_name() -> None:
    text = "apiVersion: proctor.dev/v1alpha1\nkind: Evaluation\nspec: {agentRef: {name: a}}\n"
    assert problems(text) == ["test.yaml: Evaluation: 'metadata' is a required property"]
    assert problems(text.replace("spec:", "metadata: {}\nspec:")) == [
        "test.yaml: Evaluation: metadata: 'name' is a required property"
    ]
    (found,) = problems(manifest("Evaluation", "agentRef: {name: a}", name="My_Eval"))
    assert found.startswith("test.yaml: Evaluation \"My_Eval\": metadata.name: 'My_Eval' does")


def test_missing_spec() -> None:
    text = "apiVersion: proctor.dev/v1alpha1\nkind: AgentUnderTest\nmetadata: {name: a}\n"
    assert problems(text) == ["test.yaml: AgentUnderTest \"a\": 'spec' is a required property"]


# --- CEL rules ------------------------------------------------------------------------------

EXACTLY_ONE = (
    'test.yaml: AgentUnderTest "demo": spec: exactly one of endpoint, service, sidecar must be set'
)


@pytest.mark.parametrize(
    "spec",
    [
        "maxConcurrentTasks: 2",
        "endpoint: http://a/\nservice: {image: i}",
        "service: {image: i}\nsidecar: {image: i}",
    ],
    ids=["none", "endpoint+service", "service+sidecar"],
)
def test_agent_needs_exactly_one_way_to_reach_it(spec: str) -> None:
    assert problems(manifest("AgentUnderTest", spec)) == [EXACTLY_ONE]


@pytest.mark.parametrize(
    "spec", ["endpoint: http://a/", "service: {image: i}", "sidecar: {image: i}"]
)
def test_agent_with_one_way_to_reach_it(spec: str) -> None:
    assert isinstance(load_one(manifest("AgentUnderTest", spec)), AgentUnderTest)


def test_agent_ref_required_when_the_agent_predicts() -> None:
    expected = [
        'test.yaml: Evaluation "demo": spec.agentRef: agentRef is required when '
        "predictions.source is 'agent'"
    ]
    assert problems(manifest("Evaluation", "repeats: 2")) == expected
    assert problems(manifest("Evaluation", "predictions: {source: agent}")) == expected
    assert problems(manifest("Evaluation", "agentRef:")) == expected  # null is no agentRef
    assert load_one(manifest("Evaluation", "predictions: {source: gold}"))


def test_path_set_if_and_only_if_source_is_file() -> None:
    expected = [
        'test.yaml: Evaluation "demo": spec.predictions.path: path must be set when '
        "source is 'file', and only then"
    ]
    assert problems(manifest("Evaluation", "predictions: {source: file}")) == expected
    assert (
        problems(manifest("Evaluation", "predictions: {source: gold, path: p.jsonl}")) == expected
    )
    spec = load_one(manifest("Evaluation", "predictions: {source: file, path: p.jsonl}")).spec
    assert isinstance(spec, EvaluationSpec) and spec.predictions.path == "p.jsonl"


def test_max_rows_is_never_zero() -> None:
    assert problems(manifest("Evaluation", "agentRef: {name: a}\ndataset: {maxRows: 0}")) == [
        'test.yaml: Evaluation "demo": spec.dataset.maxRows: '
        "maxRows must be -1 (every row) or at least 1"
    ]


def test_rules_still_run_beside_schema_errors() -> None:
    found = problems(manifest("AgentUnderTest", "maxConcurrentTasks: 0\nbogus: 1"))
    assert EXACTLY_ONE in found and len(found) == 3


# --- Several problems at once ---------------------------------------------------------------


def test_every_problem_of_every_document_is_reported() -> None:
    text = (
        manifest(
            "Evaluation",
            """
            dataset: {maxRows: 0, split: 7}
            predictions: {source: file}
            timeouts: {testSeconds: 0}
            """,
        )
        + "---\n"
        + manifest("AgentUnderTest", "endpoint: http://ok/", name="fine")
        + "---\n"
        + manifest("AgentUnderTest", "{}", name="bad")
    )
    assert problems(text) == [
        'test.yaml (document 1): Evaluation "demo": spec.dataset.split: 7 is not of type '
        "'string'",
        'test.yaml (document 1): Evaluation "demo": spec.dataset.maxRows: maxRows must be -1 '
        "(every row) or at least 1",
        'test.yaml (document 1): Evaluation "demo": spec.predictions.path: path must be set '
        "when source is 'file', and only then",
        'test.yaml (document 1): Evaluation "demo": spec.timeouts.testSeconds: 0 is less than '
        "the minimum of 1",
        'test.yaml (document 3): AgentUnderTest "bad": spec: exactly one of endpoint, service, '
        "sidecar must be set",
    ]


# --- YAML and files -------------------------------------------------------------------------


def test_duplicate_keys_are_refused() -> None:
    text = manifest("Evaluation", "agentRef: {name: a}\nrepeats: 2\nrepeats: 3")
    assert problems(text) == ["test.yaml:8:3: found duplicate key 'repeats'"]


def test_yaml_syntax_error_names_the_line() -> None:
    (found,) = problems("kind: [Evaluation\n")
    assert found.startswith("test.yaml:2:1: ")


def test_not_a_mapping_and_no_documents() -> None:
    assert problems("- a\n- b\n") == ["test.yaml: expected a mapping, got list"]
    assert problems("# nothing here\n") == ["test.yaml: no manifests found"]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"nope\.yaml: cannot read"):
        load_manifests(tmp_path / "nope.yaml")


def test_load_manifests_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "evaluation.yaml"
    path.write_text(manifest("Evaluation", "agentRef: {name: a}\ndataset: {maxRows: -2}"))
    with pytest.raises(ManifestError) as caught:
        load_manifests(path)
    assert str(caught.value) == (
        f'{path}: Evaluation "demo": spec.dataset.maxRows: -2 is less than the minimum of -1'
    )


# --- The CRDs themselves --------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.29", "1.35"])
@pytest.mark.parametrize("path", CRD_FILES, ids=[path.name for path in CRD_FILES])
def test_crd_is_a_valid_custom_resource_definition(path: Path, version: str) -> None:
    document = yaml.safe_load(path.read_text())
    assert kubernetes_validate.validate(document, version, strict=True) == version


def test_kubernetes_validate_catches_a_broken_crd() -> None:
    document = crd("Evaluation")
    document["spec"]["versions"][0]["servd"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(document, "1.35", strict=True)


def test_package_copies_equal_the_canonical_crds() -> None:
    shipped = resources.files("proctor") / "crds"
    names = sorted(item.name for item in shipped.iterdir() if item.name.endswith(".yaml"))
    assert names == [path.name for path in CRD_FILES]
    for path in CRD_FILES:
        assert (shipped / path.name).read_bytes() == path.read_bytes(), path.name


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_crd_names_and_version(kind: str) -> None:
    definition = crd(kind)["spec"]
    assert definition["group"] == "proctor.dev" and definition["scope"] == "Namespaced"
    assert definition["names"]["kind"] == kind
    assert definition["names"]["categories"] == ["proctor"]
    assert definition["names"]["shortNames"] == [SHORT_NAMES[kind]]
    (version,) = definition["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["x-kubernetes-preserve-unknown-fields"] is True


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_crd_schema_is_structural_and_documented(kind: str) -> None:
    root = crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert root["properties"]["metadata"] == {"type": "object"}  # the apiserver allows no more
    for path, node in schema_nodes(root):
        assert "type" in node, f"{kind}{path} has no type"
        assert not {"oneOf", "anyOf", "allOf", "not"} & set(node), f"{kind}{path}"
        if path != ".metadata":
            assert node.get("description"), f"{kind}{path} has no description"
        for rule in node.get("x-kubernetes-validations", []):
            assert rule.get("message"), f"{kind}{path}: rule without a message"
            celpy.Environment().compile(rule["rule"])


def _object_defaults(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The defaults an object may have: {} (the API server then applies its children's
    defaults), or, when the object carries CEL rules, what {} becomes, written out: a real
    API server checks a default against the rules as written, before nested defaults."""
    if node.get("x-kubernetes-validations"):
        return [{}, apply_defaults({}, node)]
    return [{}]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_crd_defaults_validate_against_their_own_schema(kind: str) -> None:
    for path, node in schema_nodes(spec_schema(kind), "spec"):
        if "default" in node:
            default = apply_defaults(node["default"], node)
            jsonschema.Draft4Validator(to_json_schema(node)).validate(default)
            if node["type"] == "object":
                assert node["default"] in _object_defaults(node), \
                    f"{path}: only {{}} (or, with CEL rules, what it becomes) lets nested " \
                    f"defaults apply"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_objects_with_defaulted_children_default_to_empty(kind: str) -> None:
    # Otherwise an omitted object would miss its children's defaults. Objects with required
    # children (service, auth) cannot default, and list items are never defaulted.
    for path, node in schema_nodes(spec_schema(kind), "spec"):
        defaulted = any("default" in prop for prop in node.get("properties", {}).values())
        if path != "spec" and defaulted and not node.get("required") and "[]" not in path:
            assert node.get("default") in _object_defaults(node), \
                f"{path} should default to {{}}"


# --- The models match the CRDs --------------------------------------------------------------


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model inside ``X``, ``X | None`` or ``tuple[X, ...]``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


# Fields, types, enums, defaults, required-ness and bounds:
# tests/unit/core/test_spec_matches_crds.py.


@pytest.mark.parametrize(
    ("kind", "given"),
    [
        ("Evaluation", {"agentRef": {"name": "a"}}),
        (
            "AgentUnderTest",
            {
                "service": {"image": "i", "env": [{"name": "A"}]},
                "sidecar": {"image": "j"},
                "auth": {"secretRef": {"name": "s", "key": "k"}},
            },
        ),
    ],
)
def test_model_defaults_are_the_crd_defaults(kind: str, given: dict[str, Any]) -> None:
    model = SPEC_MODELS[kind]
    by_crd = model.model_validate(apply_defaults(given, spec_schema(kind)))
    assert by_crd == model.model_validate(given)


def test_every_model_field_is_documented() -> None:
    seen: set[type[BaseModel]] = set()
    todo: list[type[BaseModel]] = [Evaluation, AgentUnderTest]
    while todo:
        model = todo.pop()
        seen.add(model)
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"
            nested = _nested_model(field.annotation)
            if nested is not None and nested not in seen:
                todo.append(nested)
    assert EvaluationSpec in seen and DatasetSpec in seen


def test_models_are_frozen_and_camel_case() -> None:
    spec = EvaluationSpec(max_concurrent_rows=2)
    assert spec.model_dump(by_alias=True)["maxConcurrentRows"] == 2
    with pytest.raises(ValueError, match="frozen"):
        spec.repeats = 3  # type: ignore[misc]


def test_the_crd_refuses_more_template_variations_than_there_are() -> None:
    """The CRD's rule names the template strategy's count (proctor.variants.MAX_VARIATIONS),
    so `kubectl apply` refuses what `proctor run` would."""
    from proctor.variants import MAX_VARIATIONS

    def body(n: int) -> dict:
        return {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                "metadata": {"name": "e"},
                "spec": {"predictions": {"source": "gold"}, "promptSensitivity": {
                    "enabled": True, "strategy": "template", "numVariations": n}}}
    assert parse_resource(body(MAX_VARIATIONS)).spec.prompt_sensitivity.num_variations == \
        MAX_VARIATIONS
    with pytest.raises(ManifestError, match=f"is over {MAX_VARIATIONS}, but the template "):
        parse_resource(body(MAX_VARIATIONS + 1))
    llm = body(MAX_VARIATIONS + 1)
    llm["spec"]["promptSensitivity"]["strategy"] = "llm"
    parse_resource(llm)
