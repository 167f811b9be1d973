"""Schemas of polars nodes (format 1.3): `polars.DataFrame` and `polars.Series`.

A Series node holds one polars column of any supported dtype and its `name`, described by a JSON `dtype`
({"kind": "Int64"}, {"kind": "Datetime", "unit": "us", "tz": "UTC"}, {"kind": "List", "inner": ...},
{"kind": "Struct", "fields": [[name, dtype], ...]}, ...), its `length` and, when values are missing,
`valid` (a bool array node, true where present). By kind: numbers, booleans and temporal values as
one numpy `data` array of their physical type; text (String, Categorical, Enum) in Arrow's string
layout (`offsets`, `$ref`, `nbytes`: the pandas "utf8" layout, nodes/columns.py) or inline `strings`
when short; List as `offsets` plus a child column `values`; Struct as one child column per field in
`fields`; Null as nothing. See spec/polars.md. Imports no polars.
"""

from __future__ import annotations

import re
from typing import Any

from .arrow_array import converted_bytes
from .base import NodeSchema, PlanSink, is_int
from .columns import plan_utf8

NUMERIC_KINDS = {
    "Int8": "<i1", "Int16": "<i2", "Int32": "<i4", "Int64": "<i8",
    "UInt8": "|u1", "UInt16": "<u2", "UInt32": "<u4", "UInt64": "<u8",
    "Float16": "<f2", "Float32": "<f4", "Float64": "<f8", "Boolean": "|b1",
    "Date": "<i4", "Time": "<i8", "Datetime": "<i8", "Duration": "<i8",
}  # fmt: skip
TEXT_KINDS = frozenset({"String", "Categorical", "Enum"})
TIME_UNITS = frozenset({"ns", "us", "ms"})
TZ_TEXT = re.compile(r"[A-Za-z0-9_+\-:]{1,40}(/[A-Za-z0-9_+\-:]{1,40}){0,3}")
MAX_DTYPE_DEPTH = 32


def check_dtype(dtype: Any, depth: int = 0) -> str:
    """The `kind` of a column's JSON dtype, after checking its whole shape; ValueError if malformed."""
    if depth > MAX_DTYPE_DEPTH:
        raise ValueError("polars dtype nested too deep")
    if not isinstance(dtype, dict) or not isinstance(dtype.get("kind"), str):
        raise ValueError("a polars dtype must be an object with a 'kind'")  # noqa: TRY004 (callers catch ValueError)
    kind = dtype["kind"]
    if kind in ("Datetime", "Duration") and dtype.get("unit") not in TIME_UNITS:
        raise ValueError(f"a {kind} needs a time 'unit' of ns, us or ms")
    tz = dtype.get("tz")
    if kind == "Datetime" and not (tz is None or (isinstance(tz, str) and TZ_TEXT.fullmatch(tz))):
        raise ValueError("a Datetime's 'tz' must be a time zone name or null")
    if kind == "Enum":
        cats = dtype.get("categories")
        if not isinstance(cats, list) or not all(isinstance(c, str) for c in cats):
            raise ValueError("an Enum needs its 'categories', a list of strings")
    if kind == "List":
        check_dtype(dtype.get("inner"), depth + 1)
    elif kind == "Struct":
        fields = dtype.get("fields")
        if not isinstance(fields, list) or not all(
            isinstance(f, list) and len(f) == 2 and isinstance(f[0], str) for f in fields
        ):
            raise ValueError("a Struct needs 'fields', a list of [name, dtype] pairs")
        for _, inner in fields:
            check_dtype(inner, depth + 1)
    elif kind not in NUMERIC_KINDS and kind not in TEXT_KINDS and kind not in ("Null", "List"):
        raise ValueError(f"unknown polars dtype kind {kind[:30]!r}")
    return kind


def dtype_text(dtype: Any) -> str:
    if not isinstance(dtype, dict):
        return "?"
    kind = str(dtype.get("kind"))
    if kind == "List":
        return f"List({dtype_text(dtype.get('inner'))})"
    if kind in ("Datetime", "Duration"):
        tz = f", {dtype.get('tz')}" if dtype.get("tz") else ""
        return f"{kind}({dtype.get('unit')}{tz})"
    return kind


class PolarsSeriesSchema(NodeSchema):
    name = "polars.Series"
    since = "1.5"  # layout "arrow" (1.5): the column as one `arrow.array` node

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        if not isinstance(node.get("name"), str):
            raise p.error("a polars Series needs a string 'name'")
        try:
            kind = check_dtype(node.get("dtype"))
        except ValueError as e:
            raise p.error(str(e)) from None
        length = node.get("length")
        if type(length) is not int or length < 0:
            raise p.error("a polars column needs a non-negative int 'length'")
        if node.get("layout") == "arrow":
            array = node.get("array")
            if not isinstance(array, dict) or array.get("$type") != "arrow.array" or array.get("length") != length:
                raise p.error(f"an 'arrow' polars column needs 'array', an arrow.array node of {length} values")
            p.visit(array, "array")
            p.inline_bytes(converted_bytes(array))  # polars copies text and lists into its own views
        elif kind in TEXT_KINDS and "$ref" in node:
            plan_utf8(node, p)
        else:
            for key in ("valid", "data", "offsets", "values", "fields"):
                if key in node:
                    p.visit(node[key], key)
            if isinstance(node.get("strings"), list):
                p.inline_bytes(sum(len(s) for s in node["strings"] if isinstance(s, str)))

    def summary(self, node: dict[str, Any]) -> str:
        return f"polars Series {str(node.get('name'))[:40]!r} {dtype_text(node.get('dtype'))} [{node.get('length')}]"


class PolarsFrameSchema(NodeSchema):
    name = "polars.DataFrame"
    since = "1.3"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        shape, keys, data = (node.get(k) for k in ("shape", "column_keys", "data"))
        if not (isinstance(shape, list) and len(shape) == 2 and all(is_int(x) and x >= 0 for x in shape)):
            raise p.error("shape must be [rows, columns]")
        if not (isinstance(keys, list) and isinstance(data, list)):
            raise p.error("a polars DataFrame needs 'column_keys' and 'data' lists")
        if not len(keys) == len(data) == shape[1]:
            raise p.error(f"{len(data)} columns of data, the shape says {shape[1]}")
        for key, col in zip(keys, data):
            p.visit(col, str(key))

    def children(self, node: dict[str, Any]) -> dict[str, Any] | None:
        keys, data = node.get("column_keys"), node.get("data")
        if not (isinstance(keys, list) and isinstance(data, list)):
            return None
        return {k: c for k, c in zip(keys, data) if isinstance(k, str)}

    def summary(self, node: dict[str, Any]) -> str:
        shape, data = node.get("shape"), node.get("data")
        shape = shape if isinstance(shape, list) and len(shape) == 2 else ["?", "?"]
        cols = []
        if isinstance(data, list):
            cols = [f"{c.get('name')}: {dtype_text(c.get('dtype'))}" for c in data if isinstance(c, dict)]
        more = ", ..." if len(cols) > 8 else ""
        return f"polars DataFrame {shape[0]} rows x {shape[1]} columns ({', '.join(cols[:8])}{more})"
