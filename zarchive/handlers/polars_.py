"""polars DataFrame and Series, column by column (the optional `polars` extra; format 1.3).

Node shapes are in nodes/polars_nodes.py. Numbers, booleans and temporal values are numpy arrays of
their physical type saved through the handler chain (inline when small, `.npy` members when large);
text is stored in Arrow's string layout, the same as pandas' "utf8" text columns (handlers/pandas_text.py),
so one column of either library reads the same way. Categorical and Enum columns are stored as their
text and cast back; List columns as offsets plus a child column; Struct columns as one child per field.

polars is imported only by the functions here, which run only for a polars object or a file with a
polars node: without polars, such a file fails with an error naming the `polars` extra.
Refused (SaveError naming the column): Object, Decimal, Binary, Array, Int128/UInt128 and extension dtypes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..container.utf8_column import separated, sliced
from ..engine.context import LoadContext, Node, SaveContext
from ..errors import UnknownTypeError
from ..nodes.polars_nodes import (
    NUMERIC_KINDS,
    TEXT_KINDS,
    PolarsFrameSchema,
    PolarsSeriesSchema,
    check_dtype,
)
from .base import Handler, expect
from .pandas_text import save_utf8, utf8_parts

MAX_KEY_CHARS = 200


def polars_module() -> Any:
    """The polars module; an error naming the extra when it is not installed."""
    try:
        import polars
    except ImportError:
        raise UnknownTypeError(
            "this file holds polars objects, and polars is not installed: pip install 'zarchive[polars]'"
        ) from None
    return polars


def _is_polars(cls: type, name: str) -> bool:
    return isinstance(cls, type) and cls.__module__.split(".")[0] == "polars" and cls.__name__ == name


# --- dtypes as JSON ---
def dtype_json(dtype: Any) -> dict[str, Any]:
    """A polars dtype as the JSON of spec/polars.md; ValueError for a dtype that has no layout."""
    pl = polars_module()
    kind = dtype.base_type().__name__
    if kind == "Utf8":
        kind = "String"
    if kind in ("Datetime", "Duration"):
        node: dict[str, Any] = {"kind": kind, "unit": dtype.time_unit}
        if kind == "Datetime":
            node["tz"] = dtype.time_zone
        return node
    if kind == "Enum":
        return {"kind": kind, "categories": dtype.categories.to_list()}
    if kind == "Categorical" and dtype != pl.Categorical():
        raise ValueError(f"polars dtype {dtype!r} (categories of its own) cannot be saved: cast it to pl.Categorical")
    if kind == "List":
        return {"kind": kind, "inner": dtype_json(dtype.inner)}
    if kind == "Struct":
        return {"kind": kind, "fields": [[f.name, dtype_json(f.dtype)] for f in dtype.fields]}
    if kind in NUMERIC_KINDS or kind in TEXT_KINDS or kind == "Null":
        return {"kind": kind}
    raise ValueError(
        f"polars dtype {dtype} cannot be saved (Object, Decimal, Binary, Array and 128-bit ints are not supported)"
    )


def dtype_node(dtype: Any, ctx: SaveContext) -> dict[str, Any]:
    try:
        return dtype_json(dtype)
    except ValueError as e:
        raise ctx.error(str(e)) from None


def dtype_from(node: Any, ctx: LoadContext) -> Any:
    pl = polars_module()
    try:
        kind = check_dtype(node)
    except ValueError as e:
        raise ctx.error(str(e)) from None
    if kind == "Datetime":
        return pl.Datetime(node["unit"], node.get("tz"))  # an unknown zone fails in the cast (load_column)
    if kind == "Duration":
        return pl.Duration(node["unit"])
    if kind == "Enum":
        cats = node["categories"]
        if len(set(cats)) != len(cats):
            raise ctx.error("an Enum's categories must be unique")
        return pl.Enum(cats)
    if kind == "List":
        return pl.List(dtype_from(node["inner"], ctx))
    if kind == "Struct":
        return pl.Struct([pl.Field(name, dtype_from(inner, ctx)) for name, inner in node["fields"]])
    return {"Categorical": pl.Categorical(), "String": pl.String, "Null": pl.Null}.get(kind) or getattr(pl, kind)


# --- columns ---
def _at(ctx: SaveContext | LoadContext, key: str | None) -> Any:
    class _Path:
        def __enter__(self) -> None:
            if key is not None:
                ctx.path.append(key)

        def __exit__(self, *exc: object) -> None:
            if key is not None:
                ctx.path.pop()

    return _Path()


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        return None
    return pyarrow


def save_column(s: Any, ctx: SaveContext, key: str | None, *, arrow: bool = True) -> Node:
    """The `polars.Series` node of a Series, saved at child `key`: where pyarrow is installed, the column
    as one Arrow array in Arrow's own layout (format 1.5, layout "arrow"), else column by column."""
    with _at(ctx, key):
        dtype = dtype_node(s.dtype, ctx)
        kind = dtype["kind"]
        node: dict[str, Any] = {"$type": PolarsSeriesSchema.name, "name": s.name, "dtype": dtype, "length": len(s)}
        pa = _pyarrow() if arrow else None
        if pa is not None:
            array = s.to_arrow()  # polars' buffers, as Arrow holds them (no copy for most types)
            if isinstance(array, pa.ChunkedArray):
                array = array.combine_chunks()
            node.update(layout="arrow", array=ctx.save(array, "array"))
            return node
        nulls = s.null_count() if kind != "Null" else 0
        valid = None if nulls == 0 else ~s.is_null().to_numpy()
        if kind == "Enum":  # its codes, as the physical unsigned ints polars keeps
            if valid is not None:
                node["valid"] = ctx.save(valid, "valid")
            codes = s.to_physical()
            node["data"] = ctx.save((codes.fill_null(0) if nulls else codes).to_numpy(), "data")
            return node
        if kind in TEXT_KINDS:
            text = s.cast(polars_module().String) if kind != "String" else s
            present = text.drop_nulls().to_list()
            if len(present) > ctx.settings.external_list_threshold:
                try:
                    return save_utf8(
                        node["$type"], {k: v for k, v in node.items() if k != "$type"}, present, valid, ctx
                    )
                except UnicodeEncodeError:
                    raise ctx.error("a string UTF-8 cannot encode (a lone surrogate)") from None
            if valid is not None:
                node["valid"] = ctx.save(valid, "valid")
            node["strings"] = text.fill_null("").to_list()
            return node
        if valid is not None:
            node["valid"] = ctx.save(valid, "valid")
        if kind in NUMERIC_KINDS:
            physical = s.to_physical()
            filled = physical.fill_null(False if kind == "Boolean" else 0) if nulls else physical
            data = filled.to_numpy()
            node["data"] = ctx.save(np.ascontiguousarray(data, dtype=np.dtype(NUMERIC_KINDS[kind])), "data")
        elif kind == "List":
            lengths = s.list.len().fill_null(0).to_numpy().astype(np.int64)
            offsets = np.zeros(len(s) + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            node["offsets"] = ctx.save(offsets, "offsets")
            rows = s.drop_nulls()
            node["values"] = save_column(rows.filter(rows.list.len() > 0).explode(), ctx, "values")
        elif kind == "Struct":
            fields = s.struct.unnest()
            node["fields"] = [save_column(fields.to_series(i), ctx, name) for i, name in enumerate(fields.columns)]
        return node


def _with_nulls(s: Any, valid: np.ndarray | None) -> Any:
    if valid is None or bool(valid.all()):
        return s
    pl = polars_module()
    return pl.select(pl.when(pl.Series(valid)).then(s).otherwise(None)).to_series()


def load_column(node: Any, ctx: LoadContext) -> Any:
    """The polars Series of a `polars.Series` node; polars' own refusals (an unknown time zone, a value
    outside an Enum's categories) as FormatErrors."""
    pl = polars_module()
    if not isinstance(node, dict) or node.get("$type") != PolarsSeriesSchema.name:
        raise ctx.error("expected a 'polars.Series' node")
    name = expect(node, "name", str, ctx)
    try:
        return _load_values(node, ctx).alias(name)
    except pl.exceptions.PolarsError as e:
        raise ctx.error(f"polars refused the column: {type(e).__name__}: {str(e)[:200]}") from None


def _load_values(node: dict[str, Any], ctx: LoadContext) -> Any:
    pl = polars_module()
    dtype = dtype_from(node.get("dtype"), ctx)
    kind = node["dtype"]["kind"]
    length = expect(node, "length", int, ctx)
    if node.get("layout") == "arrow":
        return _from_arrow(node, ctx, dtype, length)
    if kind in TEXT_KINDS and "$ref" in node:
        offsets, data, valid = utf8_parts(node, ctx, length)
        return _with_nulls(_text_series(offsets, data, length, node["$ref"]), valid).cast(dtype)
    valid = _bool_array(node, "valid", ctx, length) if "valid" in node else None
    if kind == "Enum" and "data" in node:
        codes = ctx.load(node["data"], "data")
        if not isinstance(codes, np.ndarray) or codes.shape != (length,) or codes.dtype.kind != "u":
            raise ctx.error(f"an Enum column's codes must be {length} unsigned ints")
        ncats = len(node["dtype"]["categories"])
        present = codes if valid is None else codes[valid]
        if present.size and int(present.max()) >= ncats:
            raise ctx.error(f"an Enum code is not below its {ncats} categories")
        filled = codes if valid is None else np.where(valid, codes, 0)
        return _with_nulls(pl.Series("", node["dtype"]["categories"], dtype=dtype).gather(filled), valid)
    if kind in TEXT_KINDS:
        strings = expect(node, "strings", list, ctx)
        if len(strings) != length or not all(type(x) is str for x in strings):
            raise ctx.error(f"'strings' must be {length} strings")
        return _with_nulls(pl.Series("", strings, dtype=pl.String), valid).cast(dtype)
    if kind == "Null":
        return pl.Series("", [None] * length, dtype=pl.Null)
    if kind in NUMERIC_KINDS:
        data = ctx.load(node.get("data"), "data")
        want = np.dtype(NUMERIC_KINDS[kind])
        if not isinstance(data, np.ndarray) or data.shape != (length,) or data.dtype != want:
            raise ctx.error(f"a {kind} column's data must be a 1-D {want} array of {length} values")
        physical = pl.Series("", data)
        s = physical if kind in ("Boolean",) or kind.startswith(("Int", "UInt", "Float")) else physical.cast(dtype)
        return _with_nulls(s, valid)
    if kind == "List":
        return _load_list(node, ctx, dtype, length, valid)
    if kind == "Struct":
        fields = expect(node, "fields", list, ctx)
        if len(fields) != len(node["dtype"]["fields"]):
            raise ctx.error("a Struct column needs one child column per field")
        children = []
        for (name, _), child in zip(node["dtype"]["fields"], fields):
            ctx.path.append(name)
            try:
                col = load_column(child, ctx)
            finally:
                ctx.path.pop()
            if len(col) != length:
                raise ctx.error(f"field {name[:40]!r} has {len(col)} values, {length} expected")
            children.append(col.alias(name))
        s = pl.DataFrame(children).to_struct("") if children else pl.Series("", [{}] * length, dtype=dtype)
        return _with_nulls(s, valid).cast(dtype)
    raise ctx.error(f"polars dtype {kind!r} has no column layout")


def _from_arrow(node: dict[str, Any], ctx: LoadContext, dtype: Any, length: int) -> Any:
    """The Series of a column in the "arrow" layout: polars takes the Arrow array's buffers (no per-row
    work for numbers, text, lists and structs), then casts to the stored dtype where Arrow's type
    does not say it all (Enum, Categorical)."""
    pl = polars_module()
    from .arrow_ import pyarrow_module

    pa = pyarrow_module()
    arr = ctx.load(node.get("array"), "array")
    if not isinstance(arr, pa.Array) or len(arr) != length:
        raise ctx.error(f"an 'arrow' polars column needs an Arrow array of {length} values")
    s = pl.Series("", arr) if not isinstance(arr, pa.NullArray) else pl.Series("", [None] * length, dtype=pl.Null)
    return s if s.dtype == dtype else s.cast(dtype)


def _text_series(offsets: np.ndarray, data: memoryview, length: int, member: str) -> Any:
    """A String Series of a column in Arrow's layout: the text with separators split by polars."""
    pl = polars_module()
    if length == 0:
        return pl.Series("", [], dtype=pl.String)
    joined = separated(offsets, data, length, member=member)
    if joined is None:
        return pl.Series("", sliced(offsets, data, length, member=member), dtype=pl.String)
    text, sep = joined
    return pl.Series("", [text], dtype=pl.String).str.split(sep).explode().head(length)


def _bool_array(node: dict[str, Any], key: str, ctx: LoadContext, length: int) -> np.ndarray:
    arr = ctx.load(node[key], key)
    if not isinstance(arr, np.ndarray) or arr.dtype != np.bool_ or arr.shape != (length,):
        raise ctx.error(f"{key!r} must be a bool array of {length} values")
    return arr


def _load_list(node: dict[str, Any], ctx: LoadContext, dtype: Any, length: int, valid: np.ndarray | None) -> Any:
    pl = polars_module()
    offsets = ctx.load(node.get("offsets"), "offsets")
    if not isinstance(offsets, np.ndarray) or offsets.dtype != np.int64 or offsets.shape != (length + 1,):
        raise ctx.error(f"a List column's offsets must be {length + 1} int64 values")
    ctx.path.append("values")
    try:
        child = load_column(node.get("values"), ctx)
    finally:
        ctx.path.pop()
    lengths = np.diff(offsets)
    if offsets[0] != 0 or offsets[-1] != len(child) or bool((lengths < 0).any()):
        raise ctx.error(f"List offsets must run from 0 to {len(child)} without decreasing")
    if valid is not None and bool(lengths[~valid].any()):
        raise ctx.error("a missing list holds values (its offsets must be equal)")
    rows = np.repeat(np.arange(length, dtype=np.int64), lengths)
    grouped = (
        pl.DataFrame({"row": rows, "v": child})
        .group_by("row", maintain_order=True)
        .agg(pl.col("v"))
    )  # fmt: skip
    full = pl.DataFrame({"row": np.arange(length, dtype=np.int64)}).join(
        grouped, on="row", how="left", maintain_order="left"
    )
    present = np.ones(length, dtype=bool) if valid is None else valid
    out = full.select(
        pl.when(pl.Series(present) & pl.col("v").is_null())
        .then(pl.lit([], dtype=pl.List(child.dtype)))
        .otherwise(pl.col("v"))
        .alias("v")
    ).to_series()
    return _with_nulls(out, valid).cast(dtype)


def _keys(names: list[str]) -> list[str]:
    keys: list[str] = []
    taken: set[str] = set()
    for i, name in enumerate(names):
        key = name[:MAX_KEY_CHARS]
        if not key or key in taken:
            key = f"{key}#{i}"
        taken.add(key)
        keys.append(key)
    return keys


class PolarsSeriesHandler(PolarsSeriesSchema, Handler):
    def accepts(self, cls: type) -> bool:
        return _is_polars(cls, "Series")

    def save(self, s: Any, ctx: SaveContext) -> Node:
        return save_column(s, ctx, None)

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        return load_column(node, ctx)


class PolarsFrameHandler(PolarsFrameSchema, Handler):
    def accepts(self, cls: type) -> bool:
        return _is_polars(cls, "DataFrame")

    def save(self, df: Any, ctx: SaveContext) -> Node:
        keys = _keys(df.columns)
        return {
            "$type": self.name,
            "shape": list(df.shape),
            "column_keys": keys,
            "dtypes": [str(t) for t in df.dtypes],
            "data": [save_column(df.to_series(i), ctx, key) for i, key in enumerate(keys)],
        }

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        pl = polars_module()
        shape, keys, data = (expect(node, k, list, ctx) for k in ("shape", "column_keys", "data"))
        if len(shape) != 2 or not len(keys) == len(data) == shape[1]:
            raise ctx.error("shape, column_keys and data disagree")
        columns = []
        for key, col in zip(keys, data):
            ctx.path.append(str(key))
            try:
                s = load_column(col, ctx)
                if len(s) != shape[0]:
                    raise ctx.error(f"the column has {len(s)} values, the shape says {shape[0]}")
            finally:
                ctx.path.pop()
            columns.append(s)
        if len({s.name for s in columns}) != len(columns):
            raise ctx.error("column names must be unique")
        return pl.DataFrame(columns) if columns else pl.DataFrame()
