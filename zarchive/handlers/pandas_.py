"""pandas DataFrame, Series and Index, stored column by column.

A DataFrame node states what a person needs to read it without pandas: its `shape`, the column labels
(`columns`, an Index node kept exactly, and `column_keys`, the path component of each column),
the `dtypes`, the row `index`, then `data`: one node per column, saved through the handler chain
at the column's key. Numeric columns are numpy arrays (inline when small, `.npy` members mapped
without copying when large); strings, categoricals, nullable and zone-aware columns are
"pandas.array" nodes (see pandas_arrays.py). A frame saved at `metrics` therefore has members such
as `metrics/loss.npy` and `metrics/name.jsonl.zst`.

Lazy access: `children()` of a frame lists its columns by key, each as a Series node (the column
plus the frame's index node), so `zarchive.open(p).keys("df")` lists the columns and `arc["df/x"]`
reads only column `x` and the index, returning the same Series as `df.iloc[:, i]`. Keys are the
labels as text (tuples joined with ","); a key that is empty or already taken gets "#<position>"
appended, so duplicate labels stay reachable ("a", "a#3"). A "/" in a key is written "~1" in a path.

Index kinds: RangeIndex (start/stop/step), MultiIndex (levels, codes, names), and every other Index
by its values and class (DatetimeIndex and TimedeltaIndex keep their `freq`). IntervalIndex, sparse
and third-party extension columns are refused with a SaveError naming the column.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..engine.context import LoadContext, Node, SaveContext
from ..engine.objpath import join_path
from ..errors import SaveError
from ..nodes.tables import PandasFrameSchema, PandasIndexSchema, PandasSeriesSchema, python_built
from .base import Handler, expect
from .pandas_arrays import column_values, unsupported
from .pandas_parts import at_child, load_values
from .pandas_scalars import check_freq

_INDEX_CLASSES: dict[str, type] = {
    "Index": pd.Index,
    "DatetimeIndex": pd.DatetimeIndex,
    "TimedeltaIndex": pd.TimedeltaIndex,
    "CategoricalIndex": pd.CategoricalIndex,
    "PeriodIndex": pd.PeriodIndex,
}
MAX_KEY_CHARS = 200


def label_key(label: Any) -> str:
    """A column label as an object-path component."""
    if isinstance(label, str):
        return label[:MAX_KEY_CHARS]
    if isinstance(label, tuple):
        return ",".join(label_key(x) for x in label)[:MAX_KEY_CHARS]
    return str(label)[:MAX_KEY_CHARS]


def column_keys(labels: pd.Index) -> list[str]:
    """Unique, non-empty keys for the columns, in order."""
    keys: list[str] = []
    taken: set[str] = set()
    for i, label in enumerate(labels):
        key = label_key(label)
        if not key or key in taken:
            key = f"{key}#{i}"
            while key in taken:
                key += "#"
        taken.add(key)
        keys.append(key)
    return keys


def save_values(obj: pd.Series | pd.Index, ctx: SaveContext, key: str | None, what: str) -> Node:
    """The node of a Series' or Index's values, saved at `key`; a SaveError naming `what` if refused."""
    problem = unsupported(obj.dtype)
    if problem:
        path = join_path([*ctx.path, key]) if key is not None else ctx.path_str
        raise SaveError(f"{what} cannot be saved: {problem}", path=path)
    return ctx.save(column_values(obj), key)


def _save_extras(obj: pd.DataFrame | pd.Series, node: dict[str, Any], ctx: SaveContext) -> None:
    if obj.attrs:
        node["attrs"] = ctx.save(dict(obj.attrs), "(attrs)")
    if not obj.flags.allows_duplicate_labels:
        node["allows_duplicate_labels"] = False


def _load_extras(obj: pd.DataFrame | pd.Series, node: dict[str, Any], ctx: LoadContext) -> None:
    if "attrs" in node:
        attrs = ctx.load(node["attrs"], "(attrs)")
        if not isinstance(attrs, dict):
            raise ctx.error("attrs must be a dict")
        obj.attrs = attrs
    if node.get("allows_duplicate_labels") is False:
        obj.flags.allows_duplicate_labels = False


def _load_index(node: Node, ctx: LoadContext, key: str, length: int) -> pd.Index:
    with at_child(ctx, key):
        index = ctx.load(node)
        if not isinstance(index, pd.Index) or len(index) != length:
            size = f"[{len(index)}]" if isinstance(index, pd.Index) else ""
            raise ctx.error(f"must be an Index of {length} labels, not {type(index).__name__}{size}")
    return index


def _series(values: Any, index: pd.Index, name: Any) -> pd.Series:
    if isinstance(values, np.ndarray) and values.dtype == object:  # else pandas infers 'str'
        return pd.Series(values, index=index, name=name, dtype=object, copy=False)
    return pd.Series(values, index=index, name=name, copy=False)


class PandasIndexHandler(PandasIndexSchema, Handler):
    name = "pandas.Index"

    def accepts(self, cls: type) -> bool:
        return isinstance(cls, type) and issubclass(cls, pd.Index)

    def save(self, idx: pd.Index, ctx: SaveContext) -> Node:
        cls = type(idx)
        if cls is pd.RangeIndex:
            return {
                "$type": self.name, "kind": "range", "start": idx.start, "stop": idx.stop, "step": idx.step,
                "name": ctx.save(idx.name, "name"),
            }  # fmt: skip
        if cls is pd.MultiIndex:
            return {
                "$type": self.name,
                "kind": "multi",
                "length": len(idx),
                "names": [ctx.save(n, f"name {i}") for i, n in enumerate(idx.names)],
                "levels": [ctx.save(level, f"level {i}") for i, level in enumerate(idx.levels)],
                "codes": [ctx.save(codes, f"codes {i}") for i, codes in enumerate(idx.codes)],
            }
        if _INDEX_CLASSES.get(cls.__name__) is not cls:
            raise ctx.error(f"{cls.__module__}.{cls.__qualname__} cannot be saved")
        node: dict[str, Any] = {
            "$type": self.name, "kind": "values", "class": cls.__name__, "dtype": str(idx.dtype),
            "length": len(idx), "name": ctx.save(idx.name, "name"),
        }  # fmt: skip
        if isinstance(idx, (pd.DatetimeIndex, pd.TimedeltaIndex)) and idx.freq is not None:
            node["freq"] = idx.freqstr
        node["values"] = save_values(idx, ctx, None, f"index of dtype {idx.dtype}")
        return node

    def load(self, node: dict[str, Any], ctx: LoadContext) -> pd.Index:
        kind = node.get("kind")
        if kind == "range":
            start, stop, step = (expect(node, k, int, ctx) for k in ("start", "stop", "step"))
            if step == 0:
                raise ctx.error("RangeIndex step must not be 0")
            return pd.RangeIndex(start, stop, step, name=ctx.load(node.get("name"), "name"))
        if kind == "multi":
            length = expect(node, "length", int, ctx)
            levels, codes, names = (expect(node, k, list, ctx) for k in ("levels", "codes", "names"))
            if not (len(levels) == len(codes) == len(names)) or not levels:
                raise ctx.error("a MultiIndex needs as many codes and names as levels")
            level_objs = [ctx.load(level, f"level {i}") for i, level in enumerate(levels)]
            if not all(isinstance(level, pd.Index) for level in level_objs):
                raise ctx.error("MultiIndex levels must be Index nodes")
            code_arrays = [load_values(c, ctx, length, f"codes {i}") for i, c in enumerate(codes)]
            if not all(isinstance(c, np.ndarray) and c.dtype.kind in "iu" for c in code_arrays):
                raise ctx.error("MultiIndex codes must be integer arrays")
            return pd.MultiIndex(
                levels=level_objs,
                codes=code_arrays,
                names=[ctx.load(n, f"name {i}") for i, n in enumerate(names)],
                verify_integrity=True,
            )
        if kind != "values":
            raise ctx.error(f"unknown Index kind {str(kind)[:20]!r}")
        cls_name = node.get("class")
        if cls_name not in _INDEX_CLASSES:
            raise ctx.error(f"unknown Index class {str(cls_name)[:40]!r}")
        values = load_values(node.get("values"), ctx, expect(node, "length", int, ctx))
        name = ctx.load(node.get("name"), "name")
        freq = check_freq(node["freq"], ctx) if "freq" in node else None
        idx: pd.Index
        if cls_name == "DatetimeIndex":
            idx = pd.DatetimeIndex(values, freq=freq, name=name)
        elif cls_name == "TimedeltaIndex":
            idx = pd.TimedeltaIndex(values, freq=freq, name=name)
        elif isinstance(values, np.ndarray) and values.dtype == object:
            idx = pd.Index(values, dtype=object, name=name, copy=False)
        else:
            idx = pd.Index(values, name=name, copy=False)
        if type(idx).__name__ != cls_name:
            raise ctx.error(f"the values make a {type(idx).__name__}, the node says {cls_name}")
        return idx


class PandasSeriesHandler(PandasSeriesSchema, Handler):
    name = "pandas.Series"

    def accepts(self, cls: type) -> bool:
        return cls is pd.Series

    def save(self, s: pd.Series, ctx: SaveContext) -> Node:
        node: dict[str, Any] = {
            "$type": self.name,
            "dtype": str(s.dtype),
            "length": len(s),
            "name": ctx.save(s.name, "(name)"),
            "index": ctx.save(s.index, "(index)"),
        }
        _save_extras(s, node, ctx)
        node["values"] = save_values(s, ctx, None, f"Series of dtype {s.dtype}")
        return node

    def load(self, node: dict[str, Any], ctx: LoadContext) -> pd.Series:
        length = expect(node, "length", int, ctx)
        index = _load_index(node.get("index"), ctx, "(index)", length)
        if "name_at" in node:  # a frame's column, reached lazily: its label is in the frame's columns
            ref = expect(node, "name_at", dict, ctx)
            labels = ctx.load(ref.get("labels"), "(columns)")
            position = ref.get("position")
            if not isinstance(labels, pd.Index) or type(position) is not int or not 0 <= position < len(labels):
                raise ctx.error("bad column reference")
            name = labels[position]
        else:
            name = ctx.load(node.get("name"), "(name)")
        s = _series(load_values(node.get("values"), ctx, length), index, name)
        _load_extras(s, node, ctx)
        return s


def _built_in_python(dtype: Any) -> bool:
    """Whether a column's stored form is built one Python object at a time (object columns, text held
    as Python strings). Such columns are saved after the others: the members planned before them are
    then compressed on the other cores while this thread works through the objects (compress_early).
    The manifest keeps the columns' order; only the members' order in the file follows the saving."""
    return dtype == object or (isinstance(dtype, pd.StringDtype) and dtype.storage == "python")


class PandasFrameHandler(PandasFrameSchema, Handler):
    name = "pandas.DataFrame"

    def accepts(self, cls: type) -> bool:
        return cls is pd.DataFrame

    def save(self, df: pd.DataFrame, ctx: SaveContext) -> Node:
        keys = column_keys(df.columns)
        node: dict[str, Any] = {
            "$type": self.name,
            "shape": list(df.shape),
            "column_keys": keys,
            "dtypes": [str(t) for t in df.dtypes],
            "columns": ctx.save(df.columns, "(columns)"),
            "index": ctx.save(df.index, "(index)"),
        }
        _save_extras(df, node, ctx)
        data: list[Node] = [None] * len(keys)
        for i in sorted(range(len(keys)), key=lambda i: _built_in_python(df.dtypes.iloc[i])):
            data[i] = save_values(df.iloc[:, i], ctx, keys[i], f"column {df.columns[i]!r} (dtype {df.dtypes.iloc[i]})")
        node["data"] = data
        return node

    def load(self, node: dict[str, Any], ctx: LoadContext) -> pd.DataFrame:
        shape = expect(node, "shape", list, ctx)
        if len(shape) != 2 or not all(type(x) is int and x >= 0 for x in shape):
            raise ctx.error("shape must be [rows, columns]")
        nrows, ncols = shape
        index = _load_index(node.get("index"), ctx, "(index)", nrows)
        columns = _load_index(node.get("columns"), ctx, "(columns)", ncols)
        data = expect(node, "data", list, ctx)
        keys = node.get("column_keys")
        if len(data) != ncols:
            raise ctx.error(f"{len(data)} columns of data, the shape says {ncols}")
        if not isinstance(keys, list) or len(keys) != ncols or not all(isinstance(k, str) for k in keys):
            keys = [str(i) for i in range(ncols)]
        arrays: dict[int, Any] = {}
        # columns built one Python object at a time first (see python_built)
        for i in sorted(range(ncols), key=lambda i: not python_built(data[i])):
            values = load_values(data[i], ctx, nrows, keys[i])
            if isinstance(values, np.ndarray) and values.dtype == object:
                values = _series(values, index, None)
            arrays[i] = values
        df = pd.DataFrame({i: arrays[i] for i in range(ncols)}, index=index, copy=False)
        df.columns = columns
        _load_extras(df, node, ctx)
        return df
