"""Schemas of pandas nodes: frames, series, indexes, arrays, scalars.

Their fields are checked when the table is built (pandas, not user code, builds it); planning walks
every nested node, so the classes and members inside a table (an object column's items) are known
before anything is constructed. A frame lists its columns as Series for browsing.
"""

from __future__ import annotations

from typing import Any

from .base import NodeSchema, PlanSink
from .columns import plan_dict, plan_utf8


class PandasIndexSchema(NodeSchema):
    name = "pandas.Index"

    def summary(self, node: dict[str, Any]) -> str:
        kind = node.get("kind")
        if kind == "range":
            return f"RangeIndex({node.get('start')}, {node.get('stop')}, {node.get('step')})"
        if kind == "multi":
            levels = node.get("levels")
            return f"MultiIndex[{node.get('length')}] with {len(levels) if isinstance(levels, list) else '?'} levels"
        return f"{node.get('class')}[{node.get('length')}] {node.get('dtype')}"


class PandasSeriesSchema(NodeSchema):
    name = "pandas.Series"

    def summary(self, node: dict[str, Any]) -> str:
        return f"Series[{node.get('length')}] {node.get('dtype')}"


def python_built(column: Any) -> bool:
    """Whether a frame's column node is read one Python object at a time (text in python storage,
    object columns). A frame reads these first: the members of its other columns are meanwhile
    decompressed on the other cores, in the order the plan met them (so the plan meets them last)."""
    return isinstance(column, dict) and (column.get("storage") == "python" or column.get("dtype") == "object")


class PandasFrameSchema(NodeSchema):
    name = "pandas.DataFrame"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        data = node.get("data")
        if not isinstance(data, list):
            p.walk_fields(node)
            return
        p.walk_fields({k: v for k, v in node.items() if k != "data"})
        p.count_nodes(1)  # (the list itself, as a walk of the field counts it)
        for i in sorted(range(len(data)), key=lambda i: not python_built(data[i])):
            p.visit(data[i], ("data", i))

    def children(self, node: dict[str, Any]) -> dict[str, Any] | None:
        keys, data, shape, dtypes = (node.get(k) for k in ("column_keys", "data", "shape", "dtypes"))
        if not (isinstance(keys, list) and isinstance(data, list) and len(keys) == len(data)):
            return None
        if not isinstance(shape, list) or len(shape) != 2:
            return None
        out: dict[str, Any] = {}
        for i, (key, col) in enumerate(zip(keys, data)):
            if isinstance(key, str) and key not in out:
                out[key] = {
                    "$type": PandasSeriesSchema.name,
                    "dtype": dtypes[i] if isinstance(dtypes, list) and i < len(dtypes) else None,
                    "length": shape[0],
                    "name_at": {"labels": node.get("columns"), "position": i},
                    "index": node.get("index"),
                    "values": col,
                }
                for extra in ("attrs", "allows_duplicate_labels"):  # what df.iloc[:, i] inherits
                    if extra in node:
                        out[key][extra] = node[extra]
        return out

    def summary(self, node: dict[str, Any]) -> str:
        keys, dtypes, shape = (node.get(k) for k in ("column_keys", "dtypes", "shape"))
        keys = keys if isinstance(keys, list) else []  # a listing of a malformed node must not fail
        dtypes = dtypes if isinstance(dtypes, list) else []
        shape = shape if isinstance(shape, list) and len(shape) == 2 else ["?", "?"]
        cols = ", ".join(f"{k}: {t}" for k, t in list(zip(keys, dtypes))[:8])
        more = ", ..." if len(keys) > 8 else ""
        return f"DataFrame {shape[0]} rows x {shape[1]} columns ({cols}{more})"


class PandasArraySchema(NodeSchema):
    name = "pandas.array"
    since = "1.5"  # layouts "utf8" (1.3): text in Arrow's string layout; "dict" (1.4): with a dictionary;
    # "arrow" (1.5): an ArrowDtype column, its `array` an `arrow.array` node (nodes/arrow_array.py)

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        layout = node.get("layout")
        if layout in ("utf8", "dict"):
            if layout == "utf8":
                plan_utf8(node, p)
                nested: tuple[str, ...] = ("$ref", "offsets", "valid")
            else:
                plan_dict(node, p)
                nested = ("$ref", "offsets", "codes")
            for k, v in node.items():  # nothing else in the node names members or nodes
                if k not in nested and isinstance(v, (dict, list)):
                    raise p.error(f"unexpected field {k!r} in a {layout!r} pandas array")
            return
        if layout == "arrow":
            array = node.get("array")
            if not isinstance(array, dict) or array.get("$type") != "arrow.array":
                raise p.error("an 'arrow' pandas array needs 'array', an arrow.array node")
            if array.get("length") != node.get("length"):
                raise p.error("the Arrow array's length is not the column's")
        p.walk_fields(node)

    def summary(self, node: dict[str, Any]) -> str:
        where = f" -> {node['$ref']}" if "$ref" in node else ""
        return f"pandas array {node.get('dtype')} [{node.get('length')}] ({node.get('layout')}){where}"


class PandasScalarSchema(NodeSchema):
    name = "pandas.scalar"

    def summary(self, node: dict[str, Any]) -> str:
        return f"pandas {node.get('kind')} {node.get('iso', '')}".rstrip()
