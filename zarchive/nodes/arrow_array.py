"""The schema of an `arrow.array` node (format 1.5): one Arrow array in Arrow's buffer layout.

    {"$type": "arrow.array", "type": TYPE, "length": n, "null_count": k,
     "buffers": [BUFFER or null, ...], "children": [arrow.array, ...], "dictionary": arrow.array}

`type` is the JSON of nodes/arrow_types.py; `buffers` are `numpy.ndarray` nodes (1-D, inline when
short, `.npy` members compressed one by one otherwise) in the order and of the dtypes and lengths
`buffer_specs` gives, `null` for a validity bitmap when no value is missing; `children` are the child
arrays of a list (one, its values) or a struct (one per field, each `length` long), each of its
field's type; `dictionary` (dictionary types only) holds the distinct values. Planning checks all of
that from the manifest alone; the values (offsets, bitmaps, indices, text) are checked when read
(handlers/arrow_checks.py). See spec/pandas.md 5.4.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from ..container.depth import MAX_DEPTH
from .arrays import numpy_itemsize
from .arrow_types import buffer_specs, check_type, children_types, type_text
from .base import NodeSchema, PlanSink

ARRAY_OBJECT_BYTES = 512  # what pyarrow allocates to describe one array (its buffers are the members')


def _is_count(x: Any) -> TypeGuard[int]:
    return type(x) is int and x >= 0


def converted_bytes(node: Any, depth: int = 0) -> int:
    """What a library that copies an (already planned) `arrow.array` node into its own layout allocates,
    at most: the bytes of every buffer, plus 16 per value (polars' string and list views)."""
    if not isinstance(node, dict) or depth > MAX_DEPTH:
        return 0
    total = 16 * node["length"] if _is_count(node.get("length")) else 0
    for buf in node.get("buffers") or []:
        if isinstance(buf, dict) and isinstance(buf.get("shape"), list) and buf["shape"] and _is_count(buf["shape"][0]):
            total += buf["shape"][0] * (numpy_itemsize(buf.get("dtype")) or 1)
    for child in [*(node.get("children") or []), node.get("dictionary")]:
        total += converted_bytes(child, depth + 1)
    return total


class ArrowArraySchema(NodeSchema):
    name = "arrow.array"
    since = "1.5"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        try:
            tid = check_type(node.get("type"))
        except ValueError as e:
            raise p.error(str(e)) from None
        t: dict[str, Any] = node["type"]
        length, nulls = node.get("length"), node.get("null_count")
        if not (_is_count(length) and _is_count(nulls)) or nulls > length:
            raise p.error("an Arrow array needs int 'length' and 'null_count' (0 to length)")
        if tid == "null" and nulls != length:
            raise p.error("every value of a null array is missing")
        specs = buffer_specs(t, length)
        buffers = node.get("buffers")
        if not isinstance(buffers, list) or len(buffers) != len(specs):
            raise p.error(f"an Arrow {tid} array needs {len(specs)} buffers")
        for i, (spec, buf) in enumerate(zip(specs, buffers)):
            if buf is None:
                if not spec.optional or (spec.role == "validity" and nulls):
                    raise p.error(f"buffer {i} ({spec.role}) is missing")
                continue
            if not isinstance(buf, dict) or buf.get("$type") != "numpy.ndarray" or buf.get("dtype") != spec.dtype:
                raise p.error(f"buffer {i} ({spec.role}) must be a numpy.ndarray node of dtype {spec.dtype}")
            shape = buf.get("shape")
            if not (isinstance(shape, list) and len(shape) == 1 and _is_count(shape[0])):
                raise p.error(f"buffer {i} ({spec.role}) must be 1-D")
            if spec.count is not None and shape[0] != spec.count:
                raise p.error(f"buffer {i} ({spec.role}) holds {shape[0]} items, {spec.count} expected")
            p.visit(buf, spec.role)
        self._plan_children(node, t, length, p)
        p.inline_bytes(ARRAY_OBJECT_BYTES)

    def _plan_children(self, node: dict[str, Any], t: dict[str, Any], length: int, p: PlanSink) -> None:
        want = children_types(t)
        children = node.get("children", [])
        if not isinstance(children, list) or len(children) != len(want):
            raise p.error(f"an Arrow {t['id']} array needs {len(want)} child arrays")
        for i, (child, ct) in enumerate(zip(children, want)):
            if not isinstance(child, dict) or child.get("$type") != self.name or child.get("type") != ct:
                raise p.error(f"child {i} must be an arrow.array node of its field's type")
            if t["id"] == "struct" and child.get("length") != length:
                raise p.error(f"child {i} of a struct must hold {length} values")
            p.visit(child, f"child{i}")
        dictionary = node.get("dictionary")
        if t["id"] == "dictionary":
            if not isinstance(dictionary, dict) or dictionary.get("$type") != self.name:
                raise p.error("a dictionary array needs its 'dictionary', an arrow.array node")
            if dictionary.get("type") != t["value"]:
                raise p.error("the dictionary's type is not the value type")
            p.visit(dictionary, "dictionary")
        elif dictionary is not None:
            raise p.error("only a dictionary array has a 'dictionary'")
        for k in node:
            if k not in ("$type", "type", "length", "null_count", "buffers", "children", "dictionary"):
                raise p.error(f"unexpected field {k[:40]!r} in an arrow.array node")

    def summary(self, node: dict[str, Any]) -> str:
        return f"Arrow array {type_text(node.get('type'))} [{node.get('length')}]"
