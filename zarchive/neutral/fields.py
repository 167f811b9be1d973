"""Checked reads of a node's fields for the neutral form's describers (spec/neutral.md): each raises
a FormatError naming the object path when the field is missing or of the wrong JSON type."""

from __future__ import annotations

from typing import Any

from ..errors import FormatError
from .encode import D, float_bits, number_desc


def text_field(node: D, key: str, path: str) -> str:
    """The string `node[key]`."""
    value = node.get(key)
    if not isinstance(value, str):
        raise FormatError(f"a {str(node.get('$type'))[:40]!r} node needs a string {key!r}", path=path)
    return value


def object_field(node: D, key: str, path: str) -> dict[str, Any]:
    """The JSON object `node[key]` of a model node (empty when absent)."""
    value = node.get(key, {})
    if not isinstance(value, dict):
        raise FormatError(f"a model's {key!r} must be an object", path=path)
    return value


def strings_field(value: Any, key: str, path: str) -> list[str]:
    """A model node's list of strings `value` (its field `key`)."""
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise FormatError(f"a model's {key!r} must be a list of strings", path=path)
    return value


def float_part(x: Any, path: str) -> str:
    """The bits of a complex number's part (a JSON number or a `float`/`int` node)."""
    desc = number_desc(x, path)
    if desc["kind"] == "int":  # a float NODE written without a fraction: its double
        return float_bits(float(int(desc["value"])))
    return str(desc["bits"])


def zone_fields(node: D, path: str) -> D:
    """A time zone as the node records it: `tz` (a name), `tz_offset_seconds` (a number DESC),
    `tz_name`, `tz_lib`; only those present."""
    out: D = {}
    if "tz" in node:
        out["tz"] = text_field(node, "tz", path)
    if "tz_offset_seconds" in node:
        out["tz_offset_seconds"] = number_desc(node["tz_offset_seconds"], path)
    for key in ("tz_name", "tz_lib"):
        if key in node:
            out[key] = text_field(node, key, path)
    return out


__all__ = ["float_part", "object_field", "strings_field", "text_field", "zone_fields"]
