"""The spec models (proctor.core.spec) against the CRDs (crds/), field by field.

The CRDs are the one source of each schema; the models are checked against them, not generated
(spec.py's docstring says why). Every property of every CRD spec, recursively, must have a
model field of the same camelCase name and vice versa, with the same type (enums as Literals),
the same default, the same required-ness, and the same bounds wherever the model states one.
What the models leave to the CRD on purpose is listed in EXCEPTIONS, each with its reason.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any

import annotated_types
import pytest
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from proctor.core.spec import AgentUnderTestSpec, EvaluationSpec
from proctor.formats.manifest import apply_defaults, spec_schema

SPEC_MODELS: dict[str, type[BaseModel]] = {
    "Evaluation": EvaluationSpec, "AgentUnderTest": AgentUnderTestSpec}

EXCEPTIONS: dict[str, str] = {
    # path (as problems name it) -> why the model differs from the CRD there.
}
"""Documented differences between a model and its CRD; none today. A new one names the path
of the problem it excuses and says why."""

SCALARS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
BOUNDS: dict[type, tuple[str, str]] = {
    # pydantic's constraint -> (its attribute, the CRD's keyword)
    annotated_types.Ge: ("ge", "minimum"), annotated_types.Le: ("le", "maximum"),
    annotated_types.MinLen: ("min_length", "minLength"),
    annotated_types.MaxLen: ("max_length", "maxLength")}


def _optional(annotation: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (it, False)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(args) < len(typing.get_args(annotation)):
            return args[0], True
    return annotation, False


def _bare(annotation: Any) -> Any:
    """The type inside ``Annotated[X, ...]`` (a validator adds no wire type)."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def type_problems(annotation: Any, node: Mapping[str, Any], path: str) -> Iterator[str]:
    """Where a model's type annotation and a CRD schema node disagree."""
    annotation = _bare(_optional(annotation)[0])
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    crd_type = node.get("type")
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if crd_type != "object" or "properties" not in node:
            yield f"{path}: model {annotation.__name__}, CRD type {crd_type}"
        else:
            yield from model_problems(annotation, node, path)
    elif origin is typing.Literal:
        if crd_type != "string" or node.get("enum") != list(args):
            yield f"{path}: model Literal{list(args)}, CRD {crd_type} enum {node.get('enum')}"
    elif origin is tuple:
        if crd_type != "array":
            yield f"{path}: model a tuple, CRD type {crd_type}"
        else:
            yield from type_problems(args[0], node["items"], f"{path}[]")
    elif origin is dict:
        if crd_type != "object" or "properties" in node:
            yield f"{path}: model a dict, CRD type {crd_type}" + (
                " with properties" if "properties" in node else "")
        elif args[1] is Any:
            if not node.get("x-kubernetes-preserve-unknown-fields"):
                yield f"{path}: model dict[str, Any], CRD keeps no unknown fields"
        else:
            yield from type_problems(args[1], node.get("additionalProperties", {}), f"{path}{{}}")
    elif SCALARS.get(annotation) != crd_type:
        yield f"{path}: model {annotation}, CRD type {crd_type}"
    elif "enum" in node:
        yield f"{path}: CRD enum {node['enum']}, model a plain {annotation.__name__}"


def _default(field: FieldInfo) -> Any:
    """The field's default as it goes on the wire (camelCase, lists for tuples)."""
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return list(value) if isinstance(value, tuple) else value


def default_problems(field: FieldInfo, node: Mapping[str, Any], path: str) -> Iterator[str]:
    """A CRD default must be the model's; a field the CRD leaves unset is None or empty."""
    if field.is_required():
        if "default" in node:
            yield f"{path}: CRD default {node['default']!r}, model field required"
        return
    ours = _default(field)
    if "default" in node:
        theirs = apply_defaults(node["default"], node)
        if isinstance(theirs, dict):  # the model writes out what the CRD leaves unset
            ours = {key: value for key, value in ours.items() if value not in ((), [], "")}
            theirs = {key: value for key, value in theirs.items() if value not in ((), [], "")}
        if ours != theirs:
            yield f"{path}: CRD default {theirs!r}, model {ours!r}"
    elif ours not in (None, [], ""):
        # Left unset on the cluster, a field reads as absent: None, or an empty value.
        yield f"{path}: no CRD default, model {ours!r}"


def bound_problems(field: FieldInfo, node: Mapping[str, Any], path: str) -> Iterator[str]:
    """Every bound the model states must be the CRD's (the CRD may state more)."""
    for constraint in field.metadata:
        if type(constraint) in BOUNDS:
            attribute, key = BOUNDS[type(constraint)]
            stated = getattr(constraint, attribute)
            if node.get(key) != stated:
                yield f"{path}: model {key} {stated}, CRD {node.get(key)}"
        pattern = getattr(constraint, "pattern", None)
        if pattern is not None and node.get("pattern") != pattern:
            yield f"{path}: model pattern {pattern!r}, CRD {node.get('pattern')!r}"


def model_problems(model: type[BaseModel], schema: Mapping[str, Any],
                   path: str = "spec") -> Iterator[str]:
    """Every disagreement between ``model`` and the CRD object schema ``schema``."""
    properties: Mapping[str, Any] = schema.get("properties", {})
    fields = {field.alias or name: field for name, field in model.model_fields.items()}
    for name in sorted(set(properties) - set(fields)):
        yield f"{path}.{name}: in the CRD, not in {model.__name__}"
    for name in sorted(set(fields) - set(properties)):
        yield f"{path}.{name}: in {model.__name__}, not in the CRD"
    required = set(schema.get("required", []))
    for name in sorted(set(fields) & set(properties)):
        field, node, here = fields[name], properties[name], f"{path}.{name}"
        if field.is_required() != (name in required):
            yield f"{here}: required in the {'model' if field.is_required() else 'CRD'} only"
        yield from type_problems(field.annotation, node, here)
        yield from default_problems(field, node, here)
        yield from bound_problems(field, node, here)


def unexcused(problems: Iterator[str]) -> list[str]:
    return [p for p in problems if p.split(":", 1)[0] not in EXCEPTIONS]


@pytest.mark.parametrize("kind", sorted(SPEC_MODELS))
def test_the_model_is_the_crd_field_by_field(kind: str) -> None:
    problems = unexcused(model_problems(SPEC_MODELS[kind], spec_schema(kind)))
    assert problems == [], "\n".join(problems)


def test_every_exception_still_excuses_something() -> None:
    problems = {p.split(":", 1)[0] for kind, model in SPEC_MODELS.items()
                for p in model_problems(model, spec_schema(kind))}
    assert set(EXCEPTIONS) <= problems, set(EXCEPTIONS) - problems
    assert all(reason.strip() for reason in EXCEPTIONS.values())


# --- The comparison itself finds each kind of difference --------------------------------------


class _Spec(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class _Inner(_Spec):
    size: int = 2
    """A bounded count."""


class _Model(_Spec):
    name: str
    """A required name."""
    mode: typing.Literal["a", "b"] = "a"
    """An enum."""
    count: typing.Annotated[int, Field(ge=1, le=5)] = 3
    """A bounded count."""
    labels: dict[str, str] | None = None
    """A string map."""
    items: tuple[str, ...] = ()
    """A list."""
    inner: _Inner = Field(default_factory=_Inner)
    """A nested object."""


SCHEMA: dict[str, Any] = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string", "minLength": 1},
    "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
    "count": {"type": "integer", "minimum": 1, "maximum": 5, "default": 3},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "items": {"type": "array", "items": {"type": "string"}},
    "inner": {"type": "object", "default": {}, "properties": {
        "size": {"type": "integer", "default": 2}}},
}}


def _changed(name: str, **changes: Any) -> dict[str, Any]:
    """SCHEMA with property ``name`` updated (a value of None removes the key)."""
    node = {**SCHEMA["properties"][name], **changes}
    node = {key: value for key, value in node.items() if value is not None}
    return {**SCHEMA, "properties": {**SCHEMA["properties"], name: node}}


def test_a_matching_pair_has_no_problem() -> None:
    assert list(model_problems(_Model, SCHEMA)) == []


@pytest.mark.parametrize(("schema", "expected"), [
    ({**SCHEMA, "properties": {**SCHEMA["properties"], "extra": {"type": "string"}}},
     r"spec\.extra: in the CRD, not in _Model"),
    ({**SCHEMA, "properties": {k: v for k, v in SCHEMA["properties"].items() if k != "items"}},
     r"spec\.items: in _Model, not in the CRD"),
    ({**SCHEMA, "required": []}, r"spec\.name: required in the model only"),
    (_changed("name", type="integer"), r"spec\.name: model <class 'str'>, CRD type integer"),
    (_changed("mode", enum=["a", "c"]), r"spec\.mode: model Literal\['a', 'b'\]"),
    (_changed("mode", default="b"), r"spec\.mode: CRD default 'b', model 'a'"),
    (_changed("count", maximum=10), r"spec\.count: model maximum 5, CRD 10"),
    (_changed("count", default=None), r"spec\.count: no CRD default, model 3"),
    (_changed("labels", additionalProperties={"type": "integer"}),
     r"spec\.labels\{\}: model <class 'str'>, CRD type integer"),
    (_changed("items", type="string"), r"spec\.items: model a tuple, CRD type string"),
    (_changed("inner", default={"size": 4}), r"spec\.inner: CRD default \{'size': 4\}"),
], ids=["crd-only", "model-only", "required", "type", "enum", "default", "bound",
        "no-default", "map-values", "array", "object-default"])
def test_each_kind_of_difference_is_found(schema: dict[str, Any], expected: str) -> None:
    problems = list(model_problems(_Model, schema))
    assert any(re.match(expected, p) for p in problems), problems
