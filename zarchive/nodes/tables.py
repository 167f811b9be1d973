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


class PandasFrameSchema(NodeSchema):
    name = "pandas.DataFrame"

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
