"""Constructing a ZANJ file's values (phase two of the read, through zarchive.engine.context.LoadContext).

Each handler is the schema of its node type (zanj.schemas) plus `load`. `.npy` members go through
zarchive's own header parser (never numpy's pickle fallback); classes are the ones the plan found and
checked (`ctx.resolve_class`), never imported; tuples come back as lists, as ZANJ writes them, except
in a dataclass field declared a tuple. torch, pandas and polars are imported only to build a tensor or a table.
"""

from __future__ import annotations

import base64
import binascii
import math
import sys
from typing import Any

import numpy as np

from ...container import npy
from ...container.depth import MAX_DEPTH, too_deep
from ...engine.context import LoadContext, Node, SaveContext
from ...engine.generic import GenericObject
from ...errors import FieldMismatchError, UnknownTypeError
from ...handlers.base import Handler
from ...handlers.dataclass_ import build_dataclass
from .format_loaders import find_format_loader
from .nodes import (
    FORMAT_KEY,
    REF_KEY,
    SDC_SUFFIX,
    array_layout,
    dataclass_for,
    fields_of,
    jsonl_member,
    npy_member,
    parse_jsonl,
)
from .schemas import (
    ZanjArraySchema,
    ZanjDataclassSchema,
    ZanjExternalListSchema,
    ZanjFrameSchema,
    ZanjModelSchema,
    ZanjPolarsFrameSchema,
    ZanjSetSchema,
    ZanjTensorSchema,
    ZanjUnknownSchema,
)


class ZanjReading:
    """A handler that only reads (ZANJ files are read, never written)."""

    name: str

    def accepts(self, cls: type) -> bool:
        return False

    def save(self, obj: Any, ctx: SaveContext) -> Node:
        raise ctx.error(f"{self.name!r} nodes are read from ZANJ files; zarchive writes .zarc")


# --- arrays and tensors ---
def load_array(node: dict[str, Any], ctx: LoadContext) -> np.ndarray:
    """The array an array or tensor node holds (checked against its dtype and shape again)."""
    mode, dtype, shape = array_layout(node, ctx.path_str)
    if mode == "external":
        name = npy_member(node.get(REF_KEY), ctx.path_str)
        arrays: dict[str, np.ndarray] = ctx.state("zanj.npy", dict)  # a member read twice is one array
        arr = arrays.get(name)
        if arr is None:
            arr = arrays[name] = npy.parse(ctx.member_bytes(name), member=name)
        if arr.dtype != dtype or arr.shape != shape:
            raise ctx.error(
                f"the .npy header says {arr.dtype.str}{list(arr.shape)}, the node {dtype.str}{list(shape)}",
                member=name,
            )
        return arr
    if mode in ("array_list_meta", "zero_dim"):
        check_nesting(node.get("data"), shape, ctx)  # numpy then allocates what the plan counted, no more
        arr = np.array(node["data"], dtype=dtype)
        if arr.size == 0:  # [] for shape [0, 4]: the dimensions after an empty one are not in the lists
            arr = arr.reshape(shape)
    else:
        text = node["data"]
        try:
            raw = bytes.fromhex(text) if mode == "array_hex_meta" else base64.b64decode(text, validate=True)
        except (ValueError, binascii.Error) as e:
            raise ctx.error(f"bad encoded array data: {e}") from None
        if len(raw) != math.prod(shape) * dtype.itemsize:
            raise ctx.error("encoded array bytes do not match its shape and dtype")
        arr = np.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)
    if arr.shape != shape:
        raise ctx.error(f"array data has shape {list(arr.shape)}, the node says {list(shape)}")
    return arr


def check_nesting(data: Any, shape: tuple[int, ...], ctx: LoadContext) -> None:
    """Refuse inline array data that is not nested lists of exactly `shape` with scalars at the
    bottom, level by level without recursion, before numpy sees it: numpy would allocate for the data
    it is given (longer lists, or each item `itemsize` bytes of a wide string dtype), not for the
    shape the plan counted."""
    level = [data]
    for i, n in enumerate(shape):
        below: list[Any] = []
        for item in level:
            if not isinstance(item, list) or len(item) != n:
                raise ctx.error(f"array data does not nest as its shape {list(shape)} says (dimension {i})")
            below.extend(item)
        level = below
    if any(isinstance(item, (list, dict)) for item in level):
        raise ctx.error(f"array data nests deeper than its shape {list(shape)} says")


def charge_build(ctx: LoadContext, nbytes: int, what: str, *, member: str | None = None) -> None:
    """Count `nbytes` that building a value from file data allocates to this read, refused
    (UnsafeArchiveError naming the member and object path) before anything is built where they do not
    fit the read's budget beside what it holds already (the JSON parsed, what its plan reads)."""
    budget = ctx.reader.budget
    if budget is None:
        return
    planned = ctx.plan.nbytes
    held = f" (with the {planned:,} bytes this read planned before it)" if planned else ""
    budget.fits(planned + nbytes, f"{what}{held}", member=member, path=ctx.path_str)
    ctx.plan.inline_bytes += nbytes


class ZanjArrayHandler(ZanjReading, ZanjArraySchema, Handler):
    def load(self, node: dict[str, Any], ctx: LoadContext) -> np.ndarray:
        return load_array(node, ctx)


class ZanjTensorHandler(ZanjReading, ZanjTensorSchema, Handler):
    """A tensor (ZANJ saved them all from the CPU), placed by the read's map_location and dtype;
    with tensors="numpy", the array."""

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        arr = load_array(node, ctx)
        if not arr.dtype.isnative:
            charge_build(ctx, arr.nbytes, "putting the tensor's bytes in native order")
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if ctx.tensors == "numpy":
            return arr
        import torch

        from ...handlers.torch_types import place

        try:
            t = torch.from_numpy(arr)
        except TypeError as e:
            raise ctx.error(f"an array of dtype {arr.dtype} cannot be a torch tensor: {e}") from None
        device = place("cpu", ctx)
        if device is not None:
            t = torch.empty(t.shape, dtype=t.dtype, device="meta") if device.type == "meta" else t.to(device)
        if ctx.dtype is not None and t.is_floating_point() and t.dtype != ctx.dtype and t.device.type == "cpu":
            itemsize = torch.empty((), dtype=ctx.dtype).element_size()
            charge_build(ctx, t.numel() * itemsize, f"casting the tensor to {ctx.dtype}")
        if ctx.dtype is not None and t.is_floating_point():
            t = t.to(ctx.dtype)
        return t


# --- tables, lists, sets ---
def _json_key(col: Any) -> str:
    """The key json.dumps gave a DataFrame column in each row record."""
    if isinstance(col, str):
        return col
    if col is None or isinstance(col, bool):
        return {None: "null", True: "true", False: "false"}[col]
    return repr(col) if isinstance(col, float) else str(col)


# What building a table from JSON rows allocates (CPython 3.11, pandas 2-3, 64-bit; measured with
# tracemalloc at 1,000 x 1,000, 200,000 x 5 and 5 x 200,000 cells of None, numbers and strings: at most
# 25 bytes a cell, 146 a row, 470 a column): per cell the table's pointer to it and the row lists and
# object arrays pandas builds on the way; per row its list; per column its label, index entry and
# block. The cells' values themselves are the JSON's, counted when it was parsed (a missing cell is
# None, which costs nothing more).
TABLE_CELL_BYTES = 32
TABLE_ROW_BYTES = 160
TABLE_COLUMN_BYTES = 512


def table_nbytes(rows: int, columns: int) -> int:
    """An upper estimate of the memory building a table of `rows` x `columns` cells allocates."""
    return rows * columns * TABLE_CELL_BYTES + rows * TABLE_ROW_BYTES + columns * TABLE_COLUMN_BYTES


def _records(node: dict[str, Any], ctx: LoadContext) -> tuple[list[dict[str, Any]], list[Any]]:
    """A ZANJ table's rows (JSON objects) and its column labels, its size counted to the read's
    budget before anything is built from them."""
    records: Any = node.get("data")
    member = None
    if REF_KEY in node:
        member = jsonl_member(node[REF_KEY], ctx.path_str)
        records = parse_jsonl(ctx.member_bytes(member, shared=True), member)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ctx.error("a DataFrame's rows must be a list of JSON objects")
    columns = node.get("columns")
    if columns is None:
        columns = list(dict.fromkeys(k for r in records for k in r))
    if not isinstance(columns, list) or not all(isinstance(c, (str, int, float, bool)) or c is None for c in columns):
        raise ctx.error("a DataFrame's columns must be a list of JSON scalars")
    what = f"building a table of {len(records):,} rows x {len(columns):,} columns"
    charge_build(ctx, table_nbytes(len(records), len(columns)), what, member=member)
    return records, columns


class ZanjFrameHandler(ZanjReading, ZanjFrameSchema, Handler):
    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        import pandas as pd

        records, columns = _records(node, ctx)
        keys = [_json_key(c) for c in columns]
        rows = [[r.get(k) for k in keys] for r in records]
        return pd.DataFrame.from_records(rows, columns=columns) if rows else pd.DataFrame(columns=columns)


class ZanjPolarsFrameHandler(ZanjReading, ZanjPolarsFrameSchema, Handler):
    """A polars DataFrame as ZANJ 0.6 writes it: its rows as JSON objects. Built as ZANJ builds it
    (polars infers the dtypes from the values; a frame without rows has String columns)."""

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        from ...handlers.polars_ import polars_module

        pl = polars_module()
        records, columns = _records(node, ctx)
        if not all(isinstance(c, str) for c in columns) or len(set(columns)) != len(columns):
            raise ctx.error("a polars DataFrame's columns must be unique strings")
        try:
            if not records:
                return pl.DataFrame(schema=dict.fromkeys(columns, pl.String))
            return pl.DataFrame({c: [r.get(c) for r in records] for c in columns})
        except (pl.exceptions.PolarsError, TypeError, ValueError, OverflowError) as e:
            raise ctx.error(f"polars cannot build the table: {type(e).__name__}: {str(e)[:200]}") from None


class ZanjExternalListHandler(ZanjReading, ZanjExternalListSchema, Handler):
    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        member = jsonl_member(node.get(REF_KEY), ctx.path_str)
        items = [ctx.load(v, i) for i, v in enumerate(parse_jsonl(ctx.member_bytes(member, shared=True), member))]
        return tuple(items) if node[FORMAT_KEY].startswith("tuple") else items


def _hashable(value: Any, depth: int = 0) -> Any:
    """Lists inside set items were tuples before ZANJ wrote them (as deep as the nodes they were read
    from, which the read bounds; checked again here, since this recurses)."""
    if isinstance(value, list):
        if depth >= MAX_DEPTH:
            raise too_deep(what="set items")
        return tuple(_hashable(v, depth + 1) for v in value)
    return value


class ZanjSetHandler(ZanjReading, ZanjSetSchema, Handler):
    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        data = node.get("data")
        if not isinstance(data, list):
            raise ctx.error("a set's items must be a list")
        items = [_hashable(ctx.load(v, i)) for i, v in enumerate(data)]
        try:
            return frozenset(items) if node[FORMAT_KEY] == "frozenset" else set(items)
        except TypeError as e:
            ctx.mismatch(f"a set holds unhashable items ({e}); it is read as a list")
            return items


# --- classes ---
def build_zanj_dataclass(cls: type, tag: str, node: dict[str, Any], ctx: LoadContext) -> Any:
    """An instance of `cls` from a ZANJ dataclass node (its properties ZANJ also wrote are not
    fields: they are left out without a mismatch)."""
    from ..._compat.muutils import serialized_properties  # a SerializableDataclass: muutils is imported

    extras = serialized_properties(cls) if "muutils.json_serialize" in sys.modules else set()
    return build_dataclass(cls, tag, fields_of(node), ctx, ignored=extras, lists_as_tuples=True)


class ZanjDataclassHandler(ZanjReading, ZanjDataclassSchema, Handler):
    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        tag, _ = dataclass_for(node, ctx.policy.given, ctx.path_str)
        cls = ctx.resolve_class(tag, "dataclass")
        if cls is None:  # not here, and the read asked for unresolved="generic" (or unknown="dict")
            if self.unknown == "dict":
                return {k: ctx.load(v, k) for k, v in node.items()}
            fields = {k: ctx.load(v, k) for k, v in fields_of(node).items()}
            return GenericObject(tag, fields, "dataclass")
        return build_zanj_dataclass(cls, tag, node, ctx)


def generic_model(tag: str, node: dict[str, Any], ctx: LoadContext) -> GenericObject:
    """A model node as a GenericObject: its config, its state dict and its training records."""
    fields = {k: ctx.load(node.get(k), k) for k in ("zanj_model_config", "state_dict", "training_records")}
    return GenericObject(tag, fields, "ConfiguredModel")


class ZanjModelAsGeneric(ZanjReading, ZanjModelSchema, Handler):
    """A model read with tensors="numpy": its config and numpy weights; nothing is built (and torch
    is not imported)."""

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        return generic_model(node[FORMAT_KEY], node, ctx)


class ZanjUnknownHandler(ZanjReading, ZanjUnknownSchema, Handler):
    """A format a loader was registered for (zanj.format_loaders), or with unknown="dict" a dict (the
    plan refuses other unknown formats)."""

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        fmt = str(node.get(FORMAT_KEY))
        loader = find_format_loader(fmt, node, allowed=ctx.planned_code)  # among the loaders the plan listed
        if loader is None and self.unknown != "dict":
            raise ctx.error(
                f"the ZANJ format {fmt[:100]!r} is not one this reader knows (no registered loader accepts it: "
                "register its loader with zarchive.compat.zanj.register_loader_handler before reading)",
                cls=UnknownTypeError,
            )
        loaded = {k: ctx.load(v, k) for k, v in node.items()}
        if loader is None:
            return loaded
        try:
            return loader.load(loaded, tuple(ctx.path))
        except Exception as e:
            raise FieldMismatchError(
                f"the loader registered for the ZANJ format {loader.uid[:100]!r} failed: {type(e).__name__}: "
                f"{str(e)[:300]}",
                path=ctx.path_str,
            ) from e


HANDLERS: tuple[type[Handler], ...] = (
    ZanjArrayHandler,
    ZanjTensorHandler,
    ZanjFrameHandler,
    ZanjPolarsFrameHandler,
    ZanjExternalListHandler,
    ZanjSetHandler,
    ZanjDataclassHandler,
    ZanjUnknownHandler,
)

__all__ = [
    "HANDLERS",
    "SDC_SUFFIX",
    "ZanjModelAsGeneric",
    "ZanjReading",
    "build_zanj_dataclass",
    "generic_model",
    "load_array",
]
