"""Read Evaluation and AgentUnderTest manifests exactly as the cluster would.

This module is the one way Proctor reads these YAML files, so that the embedded engine and
the operator agree on what a manifest means. Each document goes through the same steps as
in the apiserver, driven by the CRDs that ship in this package (``proctor/crds/``):

1. YAML is decoded as kubectl's decoder does: timestamp-like scalars stay strings.
2. Structural defaults are applied: nulls of non-nullable fields are dropped, then each
   missing property with a ``default`` gets it, recursively, including inside defaults.
3. The document is validated with jsonschema against the CRD's ``openAPIV3Schema``,
   translated from the OpenAPI v3 subset (``nullable``, ``x-kubernetes-int-or-string``,
   ``x-kubernetes-preserve-unknown-fields``, ``x-kubernetes-list-type``).
4. Every ``x-kubernetes-validations`` rule is evaluated with cel-python at its schema
   location, ``self`` bound to the value there; a failing rule reports its ``message``.
   Transition rules (those that read ``oldSelf``) are skipped: they judge an update
   against the stored object, and a manifest read here is always a creation, where the
   apiserver skips them too.
5. The defaulted spec becomes a frozen model from ``proctor.core.spec``.

Deliberate differences from the apiserver, each stricter, as with
``kubectl apply --validate=strict``:

- Unknown fields are refused with an error naming their path, where the apiserver would
  silently prune them: for a person writing a manifest, a typo is worse than an error.
- Duplicate keys in a YAML mapping are refused rather than the last one winning.
- ``metadata.name`` is required (``generateName`` is not supported) and, like
  ``metadata.namespace``, must be a valid Kubernetes name.
- ``integer`` fields refuse floats such as ``3.0``.
- A CEL rule that cannot be evaluated because the value under it already breaks the
  schema is not reported; the schema's own error says what is wrong.

Every problem is raised as one ``ManifestError`` listing all problems found, each naming the
file, the document, the field path and the schema's own message.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from importlib import resources
from typing import Any, TypeVar

import celpy
import jsonschema
import pydantic
import yaml
from celpy import celtypes
from jsonschema.protocols import Validator

from proctor.core.exits import BadInput
from proctor.core.spec import API_VERSION, RESOURCE_TYPES, AgentUnderTest, Evaluation, Resource

KINDS: dict[str, type[Resource]] = {cls.KIND: cls for cls in RESOURCE_TYPES}
"""Model class of each kind this module reads."""

_CRD_FILES = {"Evaluation": "evaluation.yaml", "AgentUnderTest": "agentundertest.yaml"}

# The apiserver's own rules for object names (RFC 1123 subdomain) and namespaces (label).
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

# The parts of a document that the CRD's schema leaves to the apiserver itself.
_ENVELOPE: dict[str, Any] = {
    "apiVersion": {"type": "string", "enum": [API_VERSION]},
    "kind": {"type": "string", "enum": list(_CRD_FILES)},
    "metadata": {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "maxLength": 253, "pattern": _DNS_SUBDOMAIN},
            "namespace": {"type": "string", "maxLength": 63, "pattern": _DNS_LABEL},
        },
    },
}


class ManifestError(BadInput):
    """A manifest could not be read; ``problems`` lists every problem, one line each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


# --- CRDs -----------------------------------------------------------------------------------


@functools.cache
def _crd(kind: str) -> dict[str, Any]:
    """The shipped CRD of ``kind``, shared: callers must not change it."""
    if kind not in _CRD_FILES:
        raise KeyError(f"no CRD for kind {kind!r}; known kinds: {', '.join(_CRD_FILES)}")
    path = resources.files("proctor") / "crds" / _CRD_FILES[kind]
    loaded: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded


def _openapi_schema(kind: str) -> dict[str, Any]:
    """The shipped ``openAPIV3Schema`` of ``kind``, shared: callers must not change it."""
    (version,) = _crd(kind)["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def crd(kind: str) -> dict[str, Any]:
    """The CustomResourceDefinition of ``kind`` as shipped in the package (a fresh copy)."""
    return copy.deepcopy(_crd(kind))


def openapi_schema(kind: str) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of ``kind``'s only version (a fresh copy)."""
    return copy.deepcopy(_openapi_schema(kind))


def spec_schema(kind: str) -> dict[str, Any]:
    """The schema of ``kind``'s ``spec`` (a fresh copy)."""
    return copy.deepcopy(_openapi_schema(kind)["properties"]["spec"])


# --- Defaulting -----------------------------------------------------------------------------


def apply_defaults(value: Any, schema: Mapping[str, Any]) -> Any:
    """``value`` with ``schema``'s structural defaults applied, as the apiserver does.

    Objects along the way are rebuilt, so ``value`` itself is left as it was.
    """
    if isinstance(value, dict):
        return _default_object(value, schema)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [apply_defaults(item, schema["items"]) for item in value]
    return value


def _default_object(obj: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    properties: Mapping[str, Any] = schema.get("properties", {})
    # Nulls of non-nullable fields are dropped first, so that a default can take their place.
    out = {
        key: item
        for key, item in obj.items()
        if item is not None or key not in properties or properties[key].get("nullable", False)
    }
    for key, prop in properties.items():
        if key not in out and "default" in prop:
            out[key] = copy.deepcopy(prop["default"])
    additional = schema.get("additionalProperties")
    fallback = additional if isinstance(additional, Mapping) else {}
    return {key: apply_defaults(item, properties.get(key, fallback)) for key, item in out.items()}


# --- Validation -----------------------------------------------------------------------------


def to_json_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Translate a CRD's OpenAPI v3 schema node into a JSON schema (draft 4) for validation.

    Objects that neither preserve unknown fields nor declare ``additionalProperties`` are
    closed, so unknown fields are errors. ``x-kubernetes-list-type`` and
    ``x-kubernetes-validations`` stay; this module's validator gives them meaning.
    """
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties":
            out[key] = {name: to_json_schema(prop) for name, prop in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, Mapping):
            out[key] = to_json_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_json_schema(item) for item in value]
        else:
            out[key] = value
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if schema.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    closed = not schema.get("x-kubernetes-preserve-unknown-fields") and (
        "additionalProperties" not in schema
    )
    if schema.get("type") == "object" and closed:
        out["additionalProperties"] = False
    return out


def _list_type(
    validator: Validator, list_type: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    """``x-kubernetes-list-type``: items of a set, or keys of a map's items, are unique."""
    if list_type not in ("set", "map") or not validator.is_type(instance, "array"):
        return
    keys = schema.get("x-kubernetes-list-map-keys", [])
    seen: list[Any] = []
    for index, item in enumerate(instance):
        identity = item
        if list_type == "map" and isinstance(item, Mapping):
            identity = {key: item.get(key) for key in keys}
        if identity in seen:
            yield jsonschema.ValidationError(
                f"Duplicate value: {json.dumps(identity)}", path=[index]
            )
        seen.append(identity)


_StructureValidator = jsonschema.validators.extend(
    jsonschema.Draft4Validator, {"x-kubernetes-list-type": _list_type}
)


@functools.cache
def _cel_program(expression: str) -> celpy.Runner:
    environment = celpy.Environment()
    return environment.program(environment.compile(expression))


@functools.cache
def is_transition_rule(expression: str) -> bool:
    """Whether a rule reads ``oldSelf``, which the apiserver evaluates on updates only."""
    # The identifier, not the text: a string literal 'oldSelf' does not make one.
    tokens = celpy.Environment().compile(expression).scan_values(lambda _: True)
    return any(getattr(t, "type", None) == "IDENT" and t == "oldSelf" for t in tokens)


def _cel_outcome(rule: str, activation: dict[str, Any]) -> bool | None:
    """Whether the rule holds; None when it cannot be evaluated (a runtime error)."""
    try:
        result = _cel_program(rule).evaluate(activation)
    except celpy.CELEvalError:
        return None
    return bool(result) if isinstance(result, celtypes.BoolType) else None


def _cel_message(rule: Mapping[str, Any], activation: dict[str, Any]) -> str:
    if "messageExpression" in rule:
        try:
            message = _cel_program(rule["messageExpression"]).evaluate(activation)
        except celpy.CELEvalError:
            message = None
        # The apiserver falls back to `message` when the expression gives no usable line.
        if isinstance(message, str) and message.strip() and "\n" not in message:
            return str(message)
    return str(rule.get("message") or f"failed rule: {rule['rule']}")


def _field_path(field_path: str) -> list[str]:
    """``.a.b['c.d']`` as ``["a", "b", "c.d"]``."""
    return [dotted or quoted for dotted, quoted in re.findall(r"\.(\w+)|\['([^']*)'\]", field_path)]


def _cel_rules(
    validator: Validator,
    rules: Sequence[Mapping[str, Any]],
    instance: Any,
    schema: Mapping[str, Any],
) -> Iterator[jsonschema.ValidationError]:
    """``x-kubernetes-validations``: every rule holds, with ``self`` bound to ``instance``."""
    activation = {"self": celpy.json_to_cel(instance)}
    for rule in rules:
        if is_transition_rule(rule["rule"]):
            continue
        outcome = _cel_outcome(rule["rule"], activation)
        # A rule that cannot run on a value that breaks the schema would only add noise: the
        # schema's own error says what is wrong. Otherwise the apiserver fails it, and so do we.
        if outcome is None and not _StructureValidator(schema).is_valid(instance):
            continue
        if not outcome:
            message = _cel_message(rule, activation)
            yield jsonschema.ValidationError(message, path=_field_path(rule.get("fieldPath", "")))


_Validator = jsonschema.validators.extend(
    _StructureValidator, {"x-kubernetes-validations": _cel_rules}
)


@functools.cache
def _document_validator(kind: str | None) -> Validator:
    """Validator of a whole document of ``kind``, or of its envelope if the kind is unknown."""
    root: dict[str, Any] = to_json_schema(_openapi_schema(kind)) if kind else {"type": "object"}
    root["properties"] = {**root.get("properties", {}), **_ENVELOPE}
    root["required"] = [*root.get("required", []), "apiVersion", "kind", "metadata"]
    return _Validator(root)


def _format_path(path: Sequence[str | int]) -> str:
    parts: list[str] = []
    for part in path:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif re.fullmatch(r"[\w-]+", part):
            parts.append(f".{part}" if parts else part)
        else:
            parts.append(f"[{json.dumps(part)}]")
    return "".join(parts)


def _problems(error: jsonschema.ValidationError) -> Iterator[tuple[str, str]]:
    """(field path, message) pairs of one jsonschema error; one per unknown field."""
    path = list(error.absolute_path)
    # `instance` is the object holding the unknown fields (jsonschema types it loosely).
    if error.validator == "additionalProperties" and error.validator_value is False \
            and isinstance(error.instance, Mapping):
        known = error.schema.get("properties", {}) if isinstance(error.schema, Mapping) else {}
        for field in error.instance:
            if field not in known:
                yield _format_path([*path, field]), f"unknown field {json.dumps(field)}"
    else:
        yield _format_path(path), error.message


# --- Documents ------------------------------------------------------------------------------


def _label(document: Mapping[str, Any], where: str) -> str:
    """How messages name a document: its source, and its kind and name where it has them."""
    kind = document.get("kind")
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(kind, str):
        return where
    return f'{where}: {kind} "{name}"' if isinstance(name, str) else f"{where}: {kind}"


_INT64 = (-(2**63), 2**63 - 1)


def _out_of_range(value: Any, path: list[str | int]) -> Iterator[tuple[str, str]]:
    """(field path, message) for each integer that does not fit in 64 bits."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _out_of_range(item, [*path, str(key)])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _out_of_range(item, [*path, index])
    elif isinstance(value, int) and not isinstance(value, bool) \
            and not _INT64[0] <= value <= _INT64[1]:
        yield _format_path(path), f"{value} does not fit in a 64-bit integer"


def _check(document: Any, where: str) -> tuple[Resource | None, list[str]]:
    """The resource a document describes, or every problem found in it."""
    if not isinstance(document, dict):
        return None, [f"{where}: expected a mapping, got {type(document).__name__}"]
    label = _label(document, where)
    too_big = list(_out_of_range(document, []))
    if too_big:  # the apiserver cannot decode these; CEL would overflow on them
        return None, [f"{label}: {path}: {message}" for path, message in too_big]
    kind = document.get("kind")
    kind = kind if isinstance(kind, str) and kind in _CRD_FILES else None
    if kind:
        document = apply_defaults(document, _openapi_schema(kind))
    problems = [
        f"{label}: {path}: {message}" if path else f"{label}: {message}"
        for error in _document_validator(kind).iter_errors(document)
        for path, message in _problems(error)
    ]
    if problems or kind is None:
        return None, problems
    return _to_model(document, kind, label)


def _to_model(document: dict[str, Any], kind: str, label: str) -> tuple[Resource | None, list[str]]:
    metadata = document["metadata"]
    try:
        resource = KINDS[kind].model_validate(
            {
                "name": metadata["name"],
                "namespace": metadata.get("namespace", "default"),
                "spec": document["spec"],
            }
        )
    except pydantic.ValidationError as error:  # a CRD and its model disagree: a Proctor bug
        return None, [f"{label}: {error}"]
    return resource, []


def parse_resource(document: Mapping[str, Any], source: str = "<resource>") -> Resource:
    """Validate one already decoded object (e.g. one read from the cluster) into a model."""
    resource, problems = _check(dict(document), source)
    if resource is None:
        raise ManifestError(problems)
    return resource


_Kind = TypeVar("_Kind", Evaluation, AgentUnderTest)


def parse_kind(document: Mapping[str, Any], kind: type[_Kind], source: str = "<resource>"
               ) -> _Kind:
    """`parse_resource` where only one kind will do: a resource of the other is refused."""
    resource = parse_resource(document, source)
    if not isinstance(resource, kind):
        raise ManifestError([f"{source}: a {resource.KIND}, where a {kind.KIND} was expected"])
    return resource


# --- YAML -----------------------------------------------------------------------------------


class _KubeYamlLoader(yaml.SafeLoader):
    """SafeLoader that decodes as kubectl does, and refuses duplicate keys."""


_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_MERGE = "tag:yaml.org,2002:merge"

# kubectl's YAML decoder leaves timestamp-like scalars (a date as a revision) as strings.
_KubeYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _construct_mapping(loader: _KubeYamlLoader, node: yaml.MappingNode) -> Iterator[Any]:
    seen: set[str] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE:
            if key_node.value in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key_node.value!r}",
                    key_node.start_mark,
                )
            seen.add(key_node.value)
    yield from loader.construct_yaml_map(node)


_KubeYamlLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _yaml_documents(text: str, source: str) -> list[Any]:
    try:
        return list(yaml.load_all(text, Loader=_KubeYamlLoader))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise ManifestError([f"{where}: {error.problem or error}"]) from error
    except yaml.YAMLError as error:
        raise ManifestError([f"{source}: {error}"]) from error


def without_agent(document: Any) -> Any:
    """An Evaluation that asks an agent but names none, read as one whose patches are given
    (predictions.source empty): for commands that use only its dataset and prompts
    (`proctor variants generate`), which have no agent to ask. Anything else as it is."""
    if not isinstance(document, dict) or document.get("kind") != "Evaluation":
        return document
    spec = document.get("spec")
    if not isinstance(spec, dict) or spec.get("agentRef") is not None:
        return document
    predictions = spec.get("predictions")
    source = predictions.get("source", "agent") if isinstance(predictions, dict) else "agent"
    if (predictions is not None and not isinstance(predictions, dict)) or source != "agent":
        return document  # a wrong type is the schema's to name; other sources need no agent
    return {**document, "spec": {**spec, "predictions": {**(predictions or {}),
                                                         "source": "empty"}}}


def parse_manifests(text: str, source: str = "<string>", *,
                    agent_needed: bool = True) -> list[Resource]:
    """Every resource in a YAML text of one or more documents; ``source`` names it in errors.

    Empty documents are skipped. Raises ``ManifestError`` listing the problems of every
    document, or if the text holds no document at all. ``agent_needed=False``: an
    Evaluation need not name its agent (see `without_agent`).
    """
    documents = _yaml_documents(text, source)
    if not agent_needed:
        documents = [without_agent(d) for d in documents]
    found: list[Resource] = []
    problems: list[str] = []
    for index, document in enumerate(documents, start=1):
        if document is None:
            continue
        where = f"{source} (document {index})" if len(documents) > 1 else source
        resource, document_problems = _check(document, where)
        problems.extend(document_problems)
        if resource is not None:
            found.append(resource)
    if problems:
        raise ManifestError(problems)
    if not found:
        raise ManifestError([f"{source}: no manifests found"])
    return found


def load_manifests(path: str | os.PathLike[str], *, agent_needed: bool = True
                   ) -> list[Resource]:
    """Every resource in the YAML file at ``path``; see ``parse_manifests``."""
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as file:
            text = file.read()
    except OSError as error:
        raise ManifestError([f"{source}: cannot read: {error.strerror}"]) from error
    except UnicodeDecodeError as error:
        line = error.object[:error.start].count(b"\n") + 1
        raise ManifestError([f"{source}:{line}: not UTF-8 text (byte "
                             f"{error.object[error.start]:#04x}); save the file as UTF-8"]
                            ) from None
    return parse_manifests(text, source, agent_needed=agent_needed)
