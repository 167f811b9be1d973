"""Arrow data types as JSON (format 1.5), and the buffers Arrow's layout gives each (spec/pandas.md 5.4).

A type is an object with an `id` and, by id, its parameters: `{"id": "int64"}`,
`{"id": "timestamp", "unit": "us", "tz": "Europe/Paris"}`, `{"id": "decimal128", "precision": 10,
"scale": 2}`, `{"id": "large_list", "item": FIELD}`, `{"id": "struct", "fields": [FIELD, ...]}`,
`{"id": "dictionary", "index": "int32", "value": TYPE, "ordered": false}`, where a FIELD is
`{"name": str, "type": TYPE, "nullable": bool}`. The reader parses this grammar itself (never an
evaluated text) and refuses anything else; nesting is bounded by container/depth.py's MAX_DEPTH.

`buffer_specs` says which buffers an array of a type holds, in Arrow's order, and how long each
is for `length` values: the validity bitmap first (bit `i` of byte `i // 8`, least significant bit
first, set where value `i` is present), then offsets (int32, or int64 for the `large_` types: one
more than the values), then the values (bit-packed the same way for `bool`). Imports no pyarrow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..container.depth import MAX_DEPTH

FIXED_WIDTH: dict[str, str] = {
    "int8": "|i1", "int16": "<i2", "int32": "<i4", "int64": "<i8",
    "uint8": "|u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8",
    "float16": "<f2", "float32": "<f4", "float64": "<f8",
    "date32": "<i4", "date64": "<i8", "time32": "<i4", "time64": "<i8",
    "timestamp": "<i8", "duration": "<i8",
}  # fmt: skip
INDEX_IDS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
BINARY_IDS = {"utf8": "<i4", "binary": "<i4", "large_utf8": "<i8", "large_binary": "<i8"}
LIST_IDS = {"list": "<i4", "large_list": "<i8"}
UNITS = {"time32": ("s", "ms"), "time64": ("us", "ns"), "timestamp": ("s", "ms", "us", "ns")}
UNITS["duration"] = UNITS["timestamp"]
TZ_TEXT = re.compile(r"[A-Za-z0-9_+\-:]{1,40}(/[A-Za-z0-9_+\-:]{1,40}){0,3}")
MAX_NAME_CHARS = 1000
MAX_FIELDS = 10_000


def _ok(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


def check_type(t: Any, depth: int = 0) -> str:
    """The `id` of an Arrow type's JSON after checking its whole shape; ValueError if malformed."""
    _ok(depth <= MAX_DEPTH, f"Arrow type nested more than {MAX_DEPTH} levels deep")
    _ok(isinstance(t, dict) and isinstance(t.get("id"), str), "an Arrow type must be an object with an 'id'")
    tid: str = t["id"]
    if tid in UNITS:
        _ok(t.get("unit") in UNITS[tid], f"a {tid} needs a 'unit' of {', '.join(UNITS[tid])}")
    if tid == "timestamp":
        tz = t.get("tz")
        _ok(tz is None or (isinstance(tz, str) and TZ_TEXT.fullmatch(tz) is not None), "bad timestamp 'tz'")
    elif tid == "decimal128":
        p, s = t.get("precision"), t.get("scale")
        _ok(type(p) is int and 1 <= p <= 38 and type(s) is int and -p <= s <= p, "bad decimal128 precision/scale")
    elif tid in LIST_IDS:
        check_field(t.get("item"), depth + 1)
    elif tid == "struct":
        fields = t.get("fields")
        _ok(isinstance(fields, list) and len(fields) <= MAX_FIELDS, "a struct needs 'fields', a list of fields")
        for f in fields:
            check_field(f, depth + 1)
    elif tid == "dictionary":
        _ok(t.get("index") in INDEX_IDS, "a dictionary's 'index' must be an integer type id")
        _ok(type(t.get("ordered")) is bool, "a dictionary needs 'ordered' (true or false)")
        _ok(check_type(t.get("value"), depth + 1) != "dictionary", "a dictionary of dictionaries")
    else:
        _ok(tid in FIXED_WIDTH or tid in BINARY_IDS or tid in ("bool", "null"), f"unknown Arrow type {tid[:30]!r}")
    return tid


def check_field(f: Any, depth: int) -> None:
    _ok(isinstance(f, dict), "an Arrow field must be an object")
    name = f.get("name")
    _ok(isinstance(name, str) and len(name) <= MAX_NAME_CHARS, "an Arrow field needs a string 'name'")
    _ok(type(f.get("nullable")) is bool, "an Arrow field needs 'nullable' (true or false)")
    check_type(f.get("type"), depth)


def children_types(t: dict[str, Any]) -> list[dict[str, Any]]:
    """The types of the child arrays of an array of (checked) type `t`, in order."""
    if t["id"] in LIST_IDS:
        return [t["item"]["type"]]
    if t["id"] == "struct":
        return [f["type"] for f in t["fields"]]
    return []


@dataclass(frozen=True)
class BufferSpec:
    """One buffer of an array: what it holds, its numpy dtype, its element count (None: given by the
    last offset) and whether it may be absent (`null` in the node)."""

    role: str  # "validity" | "offsets" | "values" | "indices"
    dtype: str
    count: int | None
    optional: bool = False


def bitmap_bytes(length: int) -> int:
    return (length + 7) // 8


def buffer_specs(t: dict[str, Any], length: int) -> list[BufferSpec]:
    """The buffers of an array of (checked) type `t` and `length` values, in Arrow's order."""
    tid = t["id"]
    if tid == "null":
        return []
    validity = BufferSpec("validity", "|u1", bitmap_bytes(length), optional=True)
    if tid == "bool":
        return [validity, BufferSpec("values", "|u1", bitmap_bytes(length))]
    if tid in FIXED_WIDTH:
        return [validity, BufferSpec("values", FIXED_WIDTH[tid], length)]
    if tid == "decimal128":
        return [validity, BufferSpec("values", "<u8", 2 * length)]
    if tid in BINARY_IDS:
        return [validity, BufferSpec("offsets", BINARY_IDS[tid], length + 1), BufferSpec("values", "|u1", None)]
    if tid in LIST_IDS:
        return [validity, BufferSpec("offsets", LIST_IDS[tid], length + 1)]
    if tid == "struct":
        return [validity]
    if tid == "dictionary":
        return [validity, BufferSpec("indices", FIXED_WIDTH[t["index"]], length)]
    raise ValueError(f"unknown Arrow type {tid[:30]!r}")


def type_text(t: Any) -> str:
    """A short human reading of a type's JSON, for listings (never parsed)."""
    if not isinstance(t, dict):
        return "?"
    tid = str(t.get("id"))[:30]
    if tid in LIST_IDS and isinstance(t.get("item"), dict):
        return f"{tid}<{type_text(t['item'].get('type'))}>"
    if tid == "timestamp":
        tz = f", tz={t.get('tz')}" if t.get("tz") else ""
        return f"timestamp[{t.get('unit')}{tz}]"
    if tid == "dictionary":
        return f"dictionary<{type_text(t.get('value'))}>"
    return tid
