"""A dict of many plain tensors written as one table of rows instead of one manifest node per tensor.

A 5,000-tensor state dict as 5,000 `torch.Tensor` nodes is ~750 KB of JSON objects that every open
must parse (about 10 ms in Python) before a single tensor can be fetched. As rows of
`[name, dtype, shape]` (plus the member key where it is not the name) the same facts take a quarter
of the bytes and parse six times faster, and stay readable by hand. Each row stands for exactly the
`torch.Tensor` node it replaces, so loading and browsing go through the tensor handler as before.
Tensors of one dict can fill several members (256 to a member): the table is then a list of tables,
one per run of rows in the same member.

This module knows the tensor node's fields but not torch: the dict handler uses it without importing
torch.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any, Protocol

from .base import PlanSink


class _Errors(Protocol):
    def error(self, message: str) -> Exception: ...


_FIRST = operator.itemgetter(0)
TENSOR_TAG = "torch.Tensor"
MIN_ROWS = 64  # smaller dicts keep one readable node per tensor
ROW_FIELDS = frozenset({"$type", "$ref", "key", "dtype", "shape", "device"})  # what a row stands for


def tensor_nodes(tensors: Any, ctx: _Errors | None) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, the `torch.Tensor` node a row stands for) for every row of a dict's `tensors` (one
    table, or a list of them). Without a load context (browsing), a malformed table raises ValueError."""
    seen: set[str] = set()
    for table in _tables(tensors, ctx):
        rows, ref, device = _table_parts(table, ctx)
        for row in rows:
            name, node = _row_node(row, ref, device, ctx)
            if name in seen:
                raise _bad(ctx, f"tensor row {name[:80]!r} is listed twice")
            seen.add(name)
            yield name, node


def tensor_node(tensors: Any, name: str) -> dict[str, Any] | None:
    """The node of row `name` alone, without building the others (fetching one tensor of 5,000)."""
    found: list[tuple[list[Any], str, str]] = []
    for table in _tables(tensors, None):
        rows, ref, device = _table_parts(table, None)
        try:  # every row's first item, listed at C speed (a row that has none: the loop below)
            firsts = list(map(_FIRST, rows))
        except (TypeError, KeyError, IndexError):
            found += [(row, ref, device) for row in rows if type(row) is list and row and row[0] == name]
            continue
        at = -1
        for _ in range(firsts.count(name)):  # (also counts a text row starting with a one-letter name)
            at = firsts.index(name, at + 1)
            if type(rows[at]) is list:
                found.append((rows[at], ref, device))
    if len(found) > 1:
        raise ValueError(f"tensor row {name[:80]!r} is listed twice")
    return _row_node(*found[0], None)[1] if found else None


def _tables(tensors: Any, ctx: _Errors | None) -> list[Any]:
    """A dict's `tensors`: one table (format 1.1) or a non-empty list of tables (1.2)."""
    if isinstance(tensors, list):
        if not tensors:
            raise _bad(ctx, "a dict's 'tensors' list is empty")
        return tensors
    return [tensors]


def _bad(ctx: _Errors | None, message: str) -> Exception:
    return ctx.error(message) if ctx is not None else ValueError(message)


def _table_parts(table: Any, ctx: _Errors | None) -> tuple[list[Any], str, str]:
    if not isinstance(table, dict) or not isinstance(table.get("rows"), list):
        raise _bad(ctx, "a dict's 'tensors' must be an object with 'rows', or a list of them")
    ref, device = table.get("$ref"), table.get("device", "cpu")
    if not isinstance(ref, str) or not isinstance(device, str):
        raise _bad(ctx, "a tensor table needs a '$ref' member name and a 'device' string")
    return table["rows"], ref, device


def _row_node(row: Any, ref: str, device: str, ctx: _Errors | None) -> tuple[str, dict[str, Any]]:
    if not isinstance(row, list) or len(row) not in (3, 4) or not isinstance(row[0], str):
        raise _bad(ctx, "a tensor table row must be [name, dtype, shape] or [name, dtype, shape, key]")
    name = row[0]
    key = row[3] if len(row) == 4 else name
    if not isinstance(key, str):
        raise _bad(ctx, f"the key of tensor row {name[:80]!r} must be a string")
    return name, {"$type": TENSOR_TAG, "$ref": ref, "key": key, "dtype": row[1], "shape": row[2], "device": device}


def plan_tables(tensors: Any, p: PlanSink) -> None:
    """Phase one for a dict's tensor table: every row checked, every member recorded; rows count as
    nodes. Lean: a state dict of 5,000 tensors is planned on every full read."""
    seen: set[str] = set()
    for table in _tables(tensors, None):
        rows, ref, _ = _table_parts(table, None)
        p.member(ref)
        p.count_nodes(len(rows))
        for row in rows:
            if type(row) is not list or len(row) not in (3, 4) or type(row[0]) is not str:
                raise p.error("a tensor table row must be [name, dtype, shape] or [name, dtype, shape, key]")
            if row[0] in seen:
                raise p.error(f"tensor row {row[0][:80]!r} is listed twice")
            seen.add(row[0])
            if len(row) == 4 and type(row[3]) is not str:
                raise p.error(f"the key of tensor row {row[0][:80]!r} must be a string")
            if type(row[1]) is not str or type(row[2]) is not list:
                raise p.error(f"tensor row {row[0][:80]!r} needs a dtype string and a shape list")
