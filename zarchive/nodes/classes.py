"""Schemas of the nodes that name a class: dataclasses, named tuples, Enum members and
ConfiguredModels. Planning one records its class (checked against `trusted=` and resolved before
anything is constructed); the fields are nodes of their own."""

from __future__ import annotations

from typing import Any

from ..engine.typeref import class_tag
from .base import NodeSchema, PlanSink


def _plan_fields(node: dict[str, Any], p: PlanSink) -> None:
    fields = node.get("fields")
    if not isinstance(fields, dict):
        raise p.error(f"{node.get('$type')!r} node lacks its 'fields' object")
    for name, sub in fields.items():
        p.visit(sub, name)


def _fields(node: dict[str, Any]) -> dict[str, Any] | None:
    fields = node.get("fields")
    return dict(fields) if isinstance(fields, dict) else None


class DataclassSchema(NodeSchema):
    """{"class": tag, "fields": {name: node}}"""

    name = "dataclass"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        p.use_class(node.get("class"), "dataclass")
        _plan_fields(node, p)

    def children(self, node: dict[str, Any]) -> dict[str, Any] | None:
        return _fields(node)

    def summary(self, node: dict[str, Any]) -> str:
        return f"dataclass {node.get('class')}"


class NamedTupleSchema(NodeSchema):
    name = "namedtuple"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        p.use_class(node.get("class"), "namedtuple")
        _plan_fields(node, p)

    def children(self, node: dict[str, Any]) -> dict[str, Any] | None:
        return _fields(node)

    def summary(self, node: dict[str, Any]) -> str:
        return f"namedtuple {node.get('class')}"


class EnumSchema(NodeSchema):
    """{"class": tag, "name": member} or, for a combination of Flag members, {"class", "value"}.
    Format 1.5 adds `value` beside `name` (a member whose value is a bool, int, float, str or None)
    and `names` beside a combination's `value` (its members' names), for readers without the class."""

    name = "enum"
    since = "1.5"  # "value" beside "name", "names"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        p.use_class(node.get("class"), "enum")
        if "name" in node and not isinstance(node["name"], str):
            raise p.error("an enum member's 'name' must be a string")
        if "name" not in node and "value" not in node:
            raise p.error("an 'enum' node needs 'name' or 'value'")
        names = node.get("names")
        if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise p.error("an enum's 'names' must be a list of strings")
        if "value" in node:
            p.visit(node["value"], "value")

    def summary(self, node: dict[str, Any]) -> str:
        return f"enum {node.get('class')}.{node.get('name', '')}".rstrip(".")


MODEL_KEYS = (
    "class",
    "config",
    "state_dict",
    "training",
    "training_modules",
    "unsaved_buffers",
    "tensor_attributes",
    "training_records",
    "modules",
    "parameters",
    "buffers",
)


class ConfiguredModelSchema(NodeSchema):
    """{"class": tag, "config": dataclass node, "state_dict": dict node, "training": bool, ...}"""

    name = "torch.ConfiguredModel"
    since = "1.5"  # "training_records" (1.3); "modules", "parameters", "buffers" (1.5)

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        config = node.get("config")
        if not (isinstance(config, dict) and config.get("$type") == "dataclass"):
            raise p.error("a model's config must be a dataclass node")
        if p.tensors == "torch":
            cls = p.use_class(node.get("class"), "ConfiguredModel")
            declared = getattr(cls, "_config_class", None) if cls is not None else None
            if isinstance(declared, type) and class_tag(declared) == config.get("class"):
                p.seed_class(class_tag(declared), "dataclass", declared)  # the model's own config class
        else:  # tensors="numpy": the model is not built, only its config and weights are read
            p.callable_used(str(node.get("class"))[:1000])
        if not isinstance(node.get("training"), bool):
            raise p.error("a model node needs a boolean 'training'")
        for key in ("training_modules", "unsaved_buffers"):
            if key in node and not isinstance(node[key], dict):
                raise p.error(f"a model's {key!r} must be an object")
        if "tensor_attributes" in node and not isinstance(node["tensor_attributes"], list):
            raise p.error("a model's 'tensor_attributes' must be a list")
        _plan_inventory(node, p)
        p.visit(config, "config")
        p.visit(node.get("state_dict"), "state_dict")
        if "training_records" in node:
            p.visit(node["training_records"], "training_records")

    def children(self, node: dict[str, Any]) -> dict[str, Any] | None:
        return {k: node[k] for k in ("config", "state_dict", "training_records") if k in node}

    def summary(self, node: dict[str, Any]) -> str:
        return f"ConfiguredModel {node.get('class')}"


def _plan_inventory(node: dict[str, Any], p: PlanSink) -> None:
    """Format 1.5's model inventory: `modules` {name: class tag}, `parameters` {name: requires_grad},
    `buffers` [name]. Descriptive only: no tag in `modules` is ever resolved."""
    checks = (("modules", dict, str), ("parameters", dict, bool), ("buffers", list, str))
    for key, container, item in checks:
        if key not in node:
            continue
        value = node[key]
        items = value.values() if isinstance(value, dict) else value
        if not isinstance(value, container) or not all(isinstance(v, item) for v in items):
            kind = "an object of" if container is dict else "a list of"
            raise p.error(f"a model's {key!r} must be {kind} {item.__name__} values")


class OmegaConfSchema(NodeSchema):
    """Not a node type: configs are saved as the plain values they hold."""

    name = "omegaconf"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        raise p.error("'omegaconf' is not a node type: configs are stored as plain dicts and lists")
