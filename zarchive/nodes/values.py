"""Schemas of the nodes for Python's own values: numbers, containers, bytes, dates, paths."""

from __future__ import annotations

import json
import math
from typing import Any

from ..container.jsontext import decode_jsonl, dumps_compact
from .base import MISSING, NodeSchema, PlanSink, is_int
from .tensor_rows import plan_tables, tensor_node, tensor_nodes

# defaultdict factories a file may name: builtin types only (audit lists them, they are always allowed)
DEFAULT_FACTORIES = ("list", "dict", "set", "int", "float", "str", "tuple")
DICT_CLASSES = (None, "OrderedDict", "defaultdict")


class JsonSchema(NodeSchema):
    name = "json"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        raise p.error("'json' is not a node type")


class IntSchema(NodeSchema):
    name = "int"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        if not isinstance(node.get("hex"), str):
            raise p.error("'int' node lacks its 'hex' string")


class FloatSchema(NodeSchema):
    name = "float"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        if node.get("value") not in ("nan", "inf", "-inf"):
            raise p.error(f"bad special float {str(node.get('value'))[:20]!r}")


class ListSchema(NodeSchema):
    """A list in a `.jsonl` member (short lists are plain JSON arrays)."""

    name = "list"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        length, nbytes, items, ref = node.get("length"), node.get("nbytes"), node.get("items"), node.get("$ref")
        if (
            not (isinstance(length, int) and isinstance(nbytes, int) and is_int(length) and is_int(nbytes))
            or length < 0
        ):
            raise p.error("a 'list' node needs int 'length' and 'nbytes'")
        if not isinstance(ref, str):
            raise p.error("a 'list' node needs its '$ref' member name")
        if items not in ("plain", "nodes"):
            raise p.error(f"unknown list items kind {str(items)[:20]!r}")
        if items == "plain":
            p.member(ref, expected_size=nbytes)
            return
        # lines that are nodes: planned like the manifest's own
        values = decode_jsonl(p.member_bytes(ref, nbytes), length, member=ref)
        if points_at_member(values):  # never written: would allow ref cycles and 2**n blow-ups
            raise p.error("a .jsonl list holds nodes that point at members", member=ref)
        for i, v in enumerate(values):
            p.visit(v, i)

    def summary(self, node: dict[str, Any]) -> str:
        return f"list[{node.get('length')}] -> {node.get('$ref')}"


def points_at_member(values: list[Any]) -> bool:
    """Whether a node inside `values` has a '$ref' (iterative: the nesting depth is the file's choice)."""
    stack: list[Any] = [values]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if "$ref" in x:
                return True
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return False


class TupleSchema(NodeSchema):
    name = "tuple"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        items = node.get("items")
        if not (isinstance(items, list) or (isinstance(items, dict) and items.get("$type") == "list")):
            raise p.error("tuple items must be a list")
        if isinstance(items, list):
            for i, v in enumerate(items):
                p.visit(v, i)
        else:
            p.visit(items)

    def children(self, node: dict[str, Any]) -> dict[str, Any] | None:
        items = node.get("items")
        return {str(i): v for i, v in enumerate(items)} if isinstance(items, list) else None


class SetSchema(NodeSchema):
    name = "set"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        items = node.get("items")
        if not isinstance(items, list):
            raise p.error("set items must be a list")
        for i, v in enumerate(items):
            p.visit(v, i)


class DictSchema(NodeSchema):
    """dict, OrderedDict, defaultdict; keys of any type; a dict of many tensors as a table."""

    name = "dict"
    since = "1.2"  # "tensors" may be a list of tables

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        kind = node.get("class")
        if kind not in DICT_CLASSES:
            raise p.error(f"unknown dict class {str(kind)[:40]!r}")
        if kind == "defaultdict":
            factory = node.get("default_factory")
            if factory is not None and factory not in DEFAULT_FACTORIES:
                raise p.error(f"unknown defaultdict factory {str(factory)[:40]!r}")
            if factory is not None:
                p.callable_used(f"builtins:{factory}")
        if "data" in node:
            data = node["data"]
            if not isinstance(data, dict):
                raise p.error("a dict's 'data' must be an object")
            for k, v in data.items():
                p.visit(v, k)
        elif "tensors" in node:
            plan_tables(node["tensors"], p)
        else:
            items = node.get("items")
            if not isinstance(items, list):
                raise p.error("a 'dict' node needs 'data', 'tensors' or 'items'")
            for pair in items:
                if not isinstance(pair, list) or len(pair) != 2:
                    raise p.error("dict items must be [key, value] pairs")
                p.visit(pair[0], f"{node_label(pair[0])}.key")
                p.visit(pair[1], node_label(pair[0]))
        attrs = node.get("attrs")
        if attrs is not None:
            if not isinstance(attrs, dict) or not attrs.keys() <= {"_metadata"}:
                raise p.error("a dict's 'attrs' may only hold '_metadata'")
            for k, v in attrs.items():
                p.visit(v, k)

    def children(self, node: dict[str, Any]) -> dict[str, Any] | None:
        if isinstance(node.get("data"), dict):
            return dict(node["data"])
        if "tensors" in node:
            return dict(tensor_nodes(node["tensors"], None))
        items = node.get("items")
        if not isinstance(items, list):
            return None
        out: dict[str, Any] = {}
        for pair in items:
            if isinstance(pair, list) and len(pair) == 2:
                out.setdefault(node_label(pair[0]), pair[1])  # '1' for both 1 and '1': the first wins
        return out

    def child(self, node: dict[str, Any], key: str) -> Any:
        if "tensors" in node and "data" not in node:  # one row, without building its 4,999 siblings
            found = tensor_node(node["tensors"], key)
            return found if found is not None else MISSING
        return super().child(node, key)


def node_label(node: Any) -> str:
    """The object-path component of a dict value, from its key's manifest node, so that saving,
    loading and browsing (`keys()`, `arc["d/1,2"]`) name it alike: 1 -> '1', (1, 'a') -> '1,a'."""
    if isinstance(node, dict):
        tag = node.get("$type")
        if tag == "int" and isinstance(node.get("hex"), str) and len(node["hex"]) <= 64:
            try:
                return str(int(node["hex"], 16))
            except ValueError:
                pass
        elif tag == "float" and node.get("value") in ("nan", "inf", "-inf"):
            return str(node["value"])
        elif tag == "tuple" and isinstance(node.get("items"), list):
            return ",".join(node_label(item) for item in node["items"])
        return dumps_compact(node)[:200]
    if isinstance(node, list):
        return dumps_compact(node)[:200]
    return key_label(node)


def key_label(key: Any) -> str:
    """The object-path component for a dict key of any type."""
    if isinstance(key, str):
        return key
    if isinstance(key, (int, float, bool)) or key is None:
        return json.dumps(key) if not isinstance(key, float) or math.isfinite(key) else repr(key)
    if isinstance(key, tuple):
        return ",".join(key_label(k) for k in key)
    return repr(key)[:100]


class BytesSchema(NodeSchema):
    name = "bytes"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        if "$ref" in node:
            nbytes = node.get("nbytes")
            if not is_int(nbytes):
                raise p.error("a 'bytes' member node needs int 'nbytes'")
            p.member(node["$ref"], expected_size=nbytes)
        elif isinstance(node.get("base64"), str):
            p.inline_bytes(len(node["base64"]) * 3 // 4)
        else:
            raise p.error("a 'bytes' node needs 'base64' or '$ref'")


class _FieldsSchema(NodeSchema):
    """Nodes whose values are plain JSON fields checked when they are read (no classes, no members)."""

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        for k, v in node.items():
            if k.startswith("$") and k not in ("$type", "$version"):
                raise p.error(f"a {self.name!r} node has no {k!r}")
            if isinstance(v, (dict, list)):
                p.visit(v, k)


class ComplexSchema(_FieldsSchema):
    name = "complex"


class DateTimeSchema(_FieldsSchema):
    name = "datetime"


class PathSchema(_FieldsSchema):
    name = "path"


class TextValueSchema(_FieldsSchema):
    name = "text_value"
