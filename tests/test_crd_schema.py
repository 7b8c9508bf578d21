"""The CRD (crds/speculativeservice.yaml) is the source of truth: check it teaches every field,
that the typed view in specd.api.spec mirrors it field for field, and that both agree on
defaults. (That the API server accepts and enforces it is tests/integration/test_crd_validation.py.)
"""

from __future__ import annotations

import copy
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from specd.api import k8s
from specd.api.spec import ServiceSpec, ServiceStatus, parse_spec

ROOT = Path(__file__).resolve().parents[1]
CRD = yaml.safe_load((ROOT / "crds" / "speculativeservice.yaml").read_text())
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]


def walk(schema: dict, path: str):
    yield path, schema
    for key, sub in schema.get("properties", {}).items():
        yield from walk(sub, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def test_names_match_contract() -> None:
    assert CRD["spec"]["group"] == k8s.GROUP
    assert VERSION["name"] == k8s.VERSION
    names = CRD["spec"]["names"]
    assert (names["kind"], names["plural"], names["singular"]) == \
        (k8s.KIND, k8s.PLURAL, k8s.SINGULAR)
    assert names["shortNames"] == [k8s.SHORT_NAME]
    assert CRD["metadata"]["name"] == f"{k8s.PLURAL}.{k8s.GROUP}"


def test_every_field_has_a_description() -> None:
    missing = [path for path, node in walk(SCHEMA["properties"]["spec"], "spec")
               if not node.get("description")]
    missing += [path for path, node in walk(SCHEMA["properties"]["status"], "status")
                if not node.get("description")]
    assert missing == []


def test_every_cel_rule_names_its_field() -> None:
    rules = [(path, rule) for path, node in walk(SCHEMA, "")
             for rule in node.get("x-kubernetes-validations", [])]
    assert len(rules) >= 15
    for path, rule in rules:
        assert rule["message"].startswith(("spec.", "metadata.")), (path, rule)
        # a messageExpression (naming the map key at fault) starts the same way
        assert rule.get("messageExpression", "'spec.").startswith("'spec."), (path, rule)


def test_subresources_and_columns_point_at_schema_fields() -> None:
    scale = VERSION["subresources"]["scale"]
    status_props = SCHEMA["properties"]["status"]["properties"]
    assert scale["specReplicasPath"] == ".spec.replicas"
    assert scale["statusReplicasPath"].removeprefix(".status.") in status_props
    assert scale["labelSelectorPath"].removeprefix(".status.") in status_props
    names = [c["name"] for c in VERSION["additionalPrinterColumns"]]
    assert names[:5] == ["Phase", "Ready", "Stable", "Canary-Weight", "Accept-Len"]
    for column in VERSION["additionalPrinterColumns"]:
        parts = column["jsonPath"].strip(".").split(".")
        if parts[0] == "metadata":
            continue
        node = SCHEMA
        for part in parts:
            node = node["properties"][part]


def _model_of(annotation) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _compare(model: type[BaseModel], schema: dict, path: str, problems: list[str]) -> None:
    if schema.get("type") == "array":
        schema = schema["items"]
    if isinstance(schema.get("additionalProperties"), dict):  # a map of one model
        schema = schema["additionalProperties"]
    props = schema.get("properties", {})
    aliases = {}
    for name, field in model.model_fields.items():
        # the Policy document keeps its own (snake_case) names inside status.policy
        alias = field.alias or name
        aliases[alias] = field
        if alias not in props:
            problems.append(f"{path}.{alias} is in {model.__name__} but not in the CRD")
    for key in props:
        if key not in aliases:
            problems.append(f"{path}.{key} is in the CRD but not in {model.__name__}")
    for alias, field in aliases.items():
        inner = _model_of(field.annotation)
        if inner is not None and alias in props:
            _compare(inner, props[alias], f"{path}.{alias}", problems)


def test_typed_view_mirrors_the_crd() -> None:
    problems: list[str] = []
    _compare(ServiceSpec, SCHEMA["properties"]["spec"], "spec", problems)
    _compare(ServiceStatus, SCHEMA["properties"]["status"], "status", problems)
    assert problems == []


def _defaults(value, schema):
    if schema.get("type") == "object" and isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = _defaults(value[key], sub)
    elif schema.get("type") == "array" and isinstance(value, list):
        value = [_defaults(v, schema.get("items", {})) for v in value]
    return value


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("speculativeservice-*.yaml")),
                         ids=lambda p: p.stem)
def test_typed_defaults_equal_crd_defaults(example: Path) -> None:
    doc = yaml.safe_load(example.read_text())
    raw = parse_spec(doc["spec"])
    defaulted = parse_spec(_defaults(copy.deepcopy(doc), SCHEMA)["spec"])
    assert raw == defaulted
