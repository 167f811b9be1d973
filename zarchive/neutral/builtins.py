"""The class-free neutral form of the built-in node types (spec/neutral.md section 5.1): numbers
that JSON cannot hold, lists, tuples, sets, dicts, byte strings, complex numbers, dates and times,
paths, enums and text values."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from ..errors import FormatError
from ..nodes.tensor_rows import tensor_nodes
from ..nodes.values import node_label
from .encode import D, int_from_hex, sha256_hex, special_float_bits
from .fields import float_part, text_field, zone_fields
from .walker import NodeDescriber, Walker, child

_TEXT_KINDS = {"Decimal": "decimal", "UUID": "uuid"}
_PATH_CLASSES = frozenset({"PurePosixPath", "PureWindowsPath", "PosixPath", "WindowsPath"})


def int_node(w: Walker, node: D, path: str) -> D:
    return {"kind": "int", "value": str(int_from_hex(text_field(node, "hex", path), path))}


def float_node(w: Walker, node: D, path: str) -> D:
    return {"kind": "float", "bits": special_float_bits(node, path)}


def list_node(w: Walker, node: D, path: str) -> D:
    return {"kind": "list", "items": [w.value(v, child(path, i)) for i, v in enumerate(w.lines(node, path))]}


def tuple_node(w: Walker, node: D, path: str) -> D:
    items = w.sequence(node.get("items"), path)
    return {"kind": "tuple", "items": [w.value(v, child(path, i)) for i, v in enumerate(items)]}


def set_node(w: Walker, node: D, path: str) -> D:
    items = node.get("items")
    if not isinstance(items, list):
        raise FormatError("set items must be a list", path=path)
    return {
        "kind": "set",
        "frozen": node.get("frozen") is True,
        "items": [w.value(v, child(path, i)) for i, v in enumerate(items)],
    }


def dict_node(w: Walker, node: D, path: str) -> D:
    cls = node.get("class", "dict")
    out: D = {"kind": "dict", "class": cls}
    entries: list[Any] = []
    if isinstance(node.get("data"), dict):
        entries = [[k, w.value(v, child(path, k))] for k, v in node["data"].items()]
    elif "tensors" in node:
        try:
            rows = list(tensor_nodes(node["tensors"], None))
        except ValueError as e:
            raise FormatError(str(e), path=path) from None
        entries = [[name, w.value(n, child(path, name))] for name, n in rows]
    elif isinstance(node.get("items"), list):
        for pair in node["items"]:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise FormatError("dict items must be [key, value] pairs", path=path)
            name = node_label(pair[0])
            key = pair[0] if type(pair[0]) is str else w.value(pair[0], child(path, name + ".key"))
            entries.append([key, w.value(pair[1], child(path, name))])
    else:
        raise FormatError("a 'dict' node needs 'data', 'tensors' or 'items'", path=path)
    out["entries"] = entries
    if cls == "defaultdict":
        out["default_factory"] = node.get("default_factory")
    attrs = node.get("attrs")
    if isinstance(attrs, dict) and "_metadata" in attrs:
        out["_metadata"] = w.value(attrs["_metadata"], child(path, "_metadata"))
    return out


def bytes_node(w: Walker, node: D, path: str) -> D:
    if "$ref" in node:
        # (hashed once per member: a file may name it from thousands of nodes)
        length, digest = w.member_digest(node["$ref"], node.get("nbytes"), path)
        return {"kind": "bytes", "bytearray": node.get("bytearray") is True, "length": length, "sha256": digest}
    try:
        data = base64.b64decode(text_field(node, "base64", path), validate=True)
    except (binascii.Error, ValueError):
        raise FormatError("a 'bytes' node's base64 is malformed", path=path) from None
    return {
        "kind": "bytes",
        "bytearray": node.get("bytearray") is True,
        "length": len(data),
        "sha256": sha256_hex(data),
    }


def complex_node(w: Walker, node: D, path: str) -> D:
    real, imag = (float_part(node.get(k), path) for k in ("real", "imag"))
    return {"kind": "complex", "real": real, "imag": imag}


def datetime_node(w: Walker, node: D, path: str) -> D:
    kind = node.get("kind")
    if kind == "timedelta":
        parts = {k: node.get(k) for k in ("days", "seconds", "microseconds")}
        if not all(type(v) is int for v in parts.values()):
            raise FormatError("a timedelta needs int days, seconds and microseconds", path=path)
        return {"kind": "timedelta", **parts}
    if kind not in ("datetime", "date", "time"):
        raise FormatError(f"unknown datetime kind {str(kind)[:20]!r}", path=path)
    out: D = {"kind": kind, "iso": text_field(node, "iso", path)}
    out.update(zone_fields(node, path))
    if node.get("fold") == 1:
        out["fold"] = 1
    return out


def path_node(w: Walker, node: D, path: str) -> D:
    cls = node.get("class")
    if cls not in _PATH_CLASSES:
        raise FormatError(f"unknown path class {str(cls)[:40]!r}", path=path)
    return {"kind": "path", "class": cls, "value": text_field(node, "value", path)}


def enum_node(w: Walker, node: D, path: str) -> D:
    out: D = {"kind": "enum", "class": text_field(node, "class", path)}
    name = node.get("name")
    if name is not None and not isinstance(name, str):
        raise FormatError("an enum member's 'name' must be a string", path=path)
    out["name"] = name
    out["value"] = w.value(node["value"], child(path, "value")) if "value" in node else None
    names = node.get("names")  # format 1.5: the Flag members a combination is made of
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise FormatError("an enum's 'names' must be a list of strings", path=path)
    out["names"] = names
    return out


def text_value_node(w: Walker, node: D, path: str) -> D:
    kind = _TEXT_KINDS.get(str(node.get("kind")))
    if kind is None:
        raise FormatError(f"unknown text_value kind {str(node.get('kind'))[:20]!r}", path=path)
    return {"kind": kind, "value": text_field(node, "value", path)}


BUILTIN_TYPES: dict[str, NodeDescriber] = {
    "int": int_node,
    "float": float_node,
    "list": list_node,
    "tuple": tuple_node,
    "set": set_node,
    "dict": dict_node,
    "bytes": bytes_node,
    "complex": complex_node,
    "datetime": datetime_node,
    "path": path_node,
    "enum": enum_node,
    "text_value": text_value_node,
}

__all__ = ["BUILTIN_TYPES"]
