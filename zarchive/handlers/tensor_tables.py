"""Saving a dict of many plain tensors as a tensor table (see nodes/tensor_rows.py for the table's
shape and how it is read): once every tensor has its member and key, the dict's nodes become rows."""

from __future__ import annotations

from typing import Any

from ..engine.context import SaveContext
from ..nodes.tensor_rows import MIN_ROWS, ROW_FIELDS, TENSOR_TAG


def tabulate_when_laid_out(ctx: SaveContext, node: dict[str, Any], data: dict[str, Any]) -> None:
    """Once every tensor has its member and key (at ctx.finalize), turn the dict `node` (whose values
    are `data`) into a tensor table if every value is a plain tensor."""
    if len(data) >= MIN_ROWS:
        ctx.on_finalize(lambda: _tabulate(ctx, node, data))


def _tabulate(ctx: SaveContext, node: dict[str, Any], data: dict[str, Any]) -> None:
    for v in data.values():
        if type(v) is not dict or v.get("$type") != TENSOR_TAG or not v.keys() <= ROW_FIELDS:
            return
    plans = {m.base_name: m for m in ctx.members}
    tables: list[dict[str, Any]] = []  # one per run of rows in the same member on the same device
    for k, v in data.items():
        ref, device = v.get("$ref"), v.get("device")
        if ref not in plans or not isinstance(device, str):
            return
        if not tables or tables[-1]["$ref"] != ref or tables[-1]["device"] != device:
            tables.append({"$ref": ref, "device": device, "rows": []})
        tables[-1]["rows"].append(
            [k, v["dtype"], v["shape"]] if v["key"] == k else [k, v["dtype"], v["shape"], v["key"]]
        )
    for table in tables:
        plans[table["$ref"]].nodes.append(table)  # the codec choice renames "$ref" (e.g. adds .zst) here too
    rest = {k: v for k, v in node.items() if k not in ("$type", "data")} if node is not data else {}
    node.clear()
    node["$type"] = "dict"
    node.update((k, v) for k, v in rest.items() if k == "class")
    node["tensors"] = tables[0] if len(tables) == 1 else tables  # one object: as format 1.1 wrote it
    node.update((k, v) for k, v in rest.items() if k != "class")
