"""pandas' own arrays: the storage of every column that is not a plain numpy array.

One "pandas.array" node per array, with a `layout` saying how its data is split:

- "strings": str / "string" columns, and object columns of str whose missing items are all None or
  all NaN: the present values in a `.jsonl` member (or inline when short), missing positions in a
  boolean `mask` array;
- "utf8" (format 1.3): the same columns when long, in Arrow's string layout (pandas_text.py);
- "dict" (format 1.4): those of them that repeat values (at most half as many distinct values as
  present ones): the distinct values in the "utf8" layout plus integer codes, -1 where missing;
- "items": object columns of anything else, item by item through the handler chain (NaN, None and
  pd.NA stay distinct);
- "categorical": integer `codes` plus a `categories` Index node, and the `ordered` flag;
- "masked": nullable Int*/UInt*/Float*/boolean: `data` plus `mask` (left out when nothing is missing);
- "datetime": zone-aware datetimes: UTC `data` (datetime64 of the column's unit) plus the zone;
- "period": int64 ordinals plus the frequency;
- "numpy": any other array wrapping a numpy array (NumpyExtensionArray, naive DatetimeArray...);
- "arrow" (format 1.5): pandas' ArrowDtype columns, their Arrow array in `array` (an `arrow.array`
  node, handlers/arrow_.py: Arrow's own buffers), read back as the same ArrowDtype.

Numeric parts are saved as numpy arrays through the chain, so they are inline when small and `.npy`
members (mapped without copying) when large. Unknown extension arrays are refused, never degraded.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.extensions import ExtensionArray

from .._compat import pandas as pandas_compat
from ..container.utf8_column import decode_utf8
from ..engine.context import LoadContext, Node, SaveContext
from ..nodes.tables import PandasArraySchema
from .base import Handler, expect
from .pandas_arrow import (
    arrow_buffers,
    arrow_column,
    arrow_dict_strings,
    arrow_dictionary,
    arrow_dtype_problem,
    arrow_strings,
    load_arrow_values,
    save_arrow_values,
)
from .pandas_scalars import check_freq, check_unit, tz_fields, tz_from
from .pandas_text import (
    DictParts,
    decode_strings,
    dict_parts,
    dictionary_codes,
    encode_strings,
    save_dict,
    save_utf8,
    save_utf8_buffers,
    utf8_parts,
)

NUMPY_KINDS = frozenset("biufcmMO")
_MASKED: dict[str, tuple[type, np.dtype]] = {
    **{f"Int{b}": (pd.arrays.IntegerArray, np.dtype(f"int{b}")) for b in (8, 16, 32, 64)},
    **{f"UInt{b}": (pd.arrays.IntegerArray, np.dtype(f"uint{b}")) for b in (8, 16, 32, 64)},
    **{f"Float{b}": (pd.arrays.FloatingArray, np.dtype(f"float{b}")) for b in (32, 64)},
    "boolean": (pd.arrays.BooleanArray, np.dtype(bool)),
}
_MASKED_CLASSES = (pd.arrays.IntegerArray, pd.arrays.FloatingArray, pd.arrays.BooleanArray)
_CANONICAL_NAN = np.float64("nan").view(np.uint64)
_MASKED_DTYPES = frozenset(type(pd.api.types.pandas_dtype(name)) for name in _MASKED)


def unsupported(dtype: Any) -> str | None:
    """Why values of `dtype` cannot be saved, or None if they can."""
    if isinstance(dtype, np.dtype):
        return None if dtype.kind in NUMPY_KINDS and dtype.fields is None else f"numpy dtype {dtype}"
    if isinstance(dtype, (pd.StringDtype, pd.CategoricalDtype, pd.DatetimeTZDtype, pd.PeriodDtype)):
        return None
    if type(dtype) in _MASKED_DTYPES:
        return None
    if isinstance(dtype, pd.ArrowDtype):
        return arrow_dtype_problem(dtype)
    return f"pandas dtype {dtype} ({type(dtype).__name__}) is not supported (sparse, interval and third-party extension types cannot be saved)"


def column_values(obj: pd.Series | pd.Index) -> Any:
    """What to save for a Series' or an Index's values: a numpy view or a pandas array (no copy)."""
    dtype = obj.dtype
    if isinstance(dtype, np.dtype) and dtype.kind != "O":
        return obj.to_numpy()
    return obj.array


@contextmanager
def at_child(ctx: LoadContext, key: str | None) -> Iterator[None]:
    """Errors raised inside name the child `key` of the current path."""
    if key is not None:
        ctx.path.append(key)
    try:
        yield
    finally:
        if key is not None:
            ctx.path.pop()


def load_values(node: Node, ctx: LoadContext, length: int, key: str | None = None) -> Any:
    """A column's values (1-D ndarray or pandas array of `length` items) from its node."""
    with at_child(ctx, key):
        values = ctx.load(node)
        if isinstance(values, np.ndarray):
            if values.ndim != 1 or values.dtype.kind not in NUMPY_KINDS:
                raise ctx.error(
                    f"column data must be a 1-D array of a supported dtype, not {values.dtype}{list(values.shape)}"
                )
        elif type(values) is pd.arrays.NumpyExtensionArray:  # exact: StringArray subclasses it
            values = values.to_numpy()
        elif not isinstance(values, ExtensionArray):
            raise ctx.error(f"column data must be an array, not {type(values).__name__}")
        if len(values) != length:
            raise ctx.error(f"column data has {len(values)} values, {length} expected")
    return values


def _array(
    node: Node, ctx: LoadContext, key: str | None, length: int, kind: str | None = None, label: str = "data"
) -> np.ndarray:
    with at_child(ctx, key):
        arr = ctx.load(node)
        if not isinstance(arr, np.ndarray) or arr.ndim != 1 or len(arr) != length:
            raise ctx.error(f"{key or label} must be a 1-D numpy array of {length} values")
        if kind is not None and arr.dtype.kind not in kind:
            raise ctx.error(f"{key or label} has dtype {arr.dtype}, expected kind {kind!r}")
    return arr


def _mask(node: dict[str, Any], ctx: LoadContext, length: int) -> np.ndarray | None:
    if "mask" not in node:
        return None
    return _array(node["mask"], ctx, "mask", length, "b")


class PandasArrayHandler(PandasArraySchema, Handler):
    name = "pandas.array"

    def accepts(self, cls: type) -> bool:
        return isinstance(cls, type) and issubclass(cls, ExtensionArray)

    # --- saving ---
    def save(self, arr: ExtensionArray, ctx: SaveContext) -> Node:
        dtype = arr.dtype
        if type(arr) is pd.arrays.NumpyExtensionArray:  # exact: StringArray subclasses it
            dtype = arr.to_numpy().dtype
        head: dict[str, Any] = {"$type": self.name, "dtype": str(dtype), "length": len(arr)}
        problem = unsupported(dtype)
        if problem:
            raise ctx.error(problem)
        if isinstance(dtype, pd.ArrowDtype):
            return save_arrow_values(arr, head, ctx)
        if isinstance(dtype, pd.StringDtype):
            extra = {"storage": dtype.storage, "na_value": "NA" if dtype.na_value is pd.NA else "nan"}
            column = arrow_column(arr) if len(arr) > ctx.settings.external_list_threshold else None
            if column is not None:  # pyarrow storage
                fields = {k: v for k, v in head.items() if k != "$type"} | extra
                coded = arrow_dictionary(column)
                if coded is not None:  # values that repeat: a dictionary made by Arrow
                    return save_dict(self.name, fields, *coded, ctx)
                return save_utf8_buffers(self.name, fields, *arrow_buffers(column), ctx)  # its own buffers
            mask = np.asarray(arr.isna(), dtype=bool)
            values = pandas_compat.string_object_values(arr)  # python storage: the object array itself
            if values is None:
                values = arr.to_numpy(dtype=object, na_value=None)
            return self._save_strings(head, extra, values, mask, ctx)
        if isinstance(dtype, pd.CategoricalDtype):
            head.update(layout="categorical", ordered=bool(dtype.ordered))
            head["categories"] = ctx.save(dtype.categories, "categories")
            head["codes"] = ctx.save(arr.codes)  # type: ignore[attr-defined]
            return head
        if isinstance(dtype, pd.DatetimeTZDtype):
            head.update(layout="datetime", unit=dtype.unit, **tz_fields(dtype.tz, ctx))
            head["data"] = ctx.save(arr.asi8.view(f"M8[{dtype.unit}]"))  # type: ignore[attr-defined]
            return head
        if isinstance(dtype, pd.PeriodDtype):
            head.update(layout="period", freq=arr.freqstr)  # type: ignore[attr-defined]  # 'M', not 'ME'
            head["data"] = ctx.save(arr.asi8)  # type: ignore[attr-defined]
            return head
        if isinstance(arr, _MASKED_CLASSES):
            head["layout"] = "masked"
            parts = pandas_compat.masked_parts(arr)  # the values under the mask are kept as they are
            if parts is None:  # public path: the same missing positions, 0/False under them
                np_dtype = arr.dtype.numpy_dtype  # type: ignore[attr-defined]
                parts = arr.to_numpy(dtype=np_dtype, na_value=np_dtype.type(0)), np.asarray(arr.isna(), dtype=bool)
            data, mask = parts
            head["data"] = ctx.save(data)
            if mask.any():
                head["mask"] = ctx.save(mask, "mask")
            return head
        if isinstance(dtype, np.dtype):
            values = np.asarray(arr)
            if dtype.kind == "O":
                return self._save_objects(head, values, ctx)
            head["layout"] = "numpy"
            head["data"] = ctx.save(values)
            return head
        raise ctx.error(f"pandas array {type(arr).__qualname__} with dtype {dtype} cannot be saved")

    def _save_objects(self, head: dict[str, Any], values: np.ndarray, ctx: SaveContext) -> Node:
        items = values.tolist()
        kinds = set(map(type, items))
        if str in kinds and kinds <= {str, type(None), float}:  # text with None or NaN for missing
            mask = np.asarray(pd.isna(values), dtype=bool)
            missing = _uniform_missing(values[mask].tolist())
            if missing is not None and (float not in kinds or set(map(type, values[~mask].tolist())) == {str}):
                return self._save_strings(head, {"missing": missing}, values, mask, ctx)
        head["layout"] = "items"
        head["items"] = ctx.save(items)
        return head

    def _save_strings(
        self, head: dict[str, Any], extra: dict[str, Any], values: np.ndarray, mask: np.ndarray, ctx: SaveContext
    ) -> Node:
        """`values`: object array of str wherever `mask` is not set."""
        missing = int(np.count_nonzero(mask))
        has_missing = missing > 0
        base = {**{k: v for k, v in head.items() if k != "$type"}, **extra}
        inline = len(values) - missing <= ctx.settings.external_list_threshold
        if not inline:  # repeated values: a dictionary (format 1.4), made by pandas' hash table
            coded = dictionary_codes(values, missing)
            if coded is not None:
                try:
                    return save_dict(self.name, base, *coded, ctx)
                except UnicodeEncodeError:
                    pass
        present = (values[~mask] if has_missing else values).tolist()
        if not inline:
            try:  # Arrow's layout (format 1.3); a lone surrogate needs the escaped .jsonl below
                return save_utf8(self.name, base, present, ~mask if has_missing else None, ctx)
            except UnicodeEncodeError:
                pass
        fields = {**base, "layout": "strings", "count": len(present)}
        if has_missing:
            fields["mask"] = ctx.save(mask, "mask")
        if inline and _utf8_ok(present):
            return {"$type": self.name, **fields, "values": present}
        data = encode_strings(present)
        plan = ctx.add_member("jsonl", lambda: [(None, memoryview(data))], compress="always")
        return ctx.ref_node(plan, self.name, **fields, nbytes=len(data))

    # --- loading ---
    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        length = expect(node, "length", int, ctx)
        if length < 0:
            raise ctx.error("negative length")
        layout = node.get("layout")
        if layout in ("strings", "utf8", "dict"):
            return self._load_strings(node, length, ctx)
        if layout == "arrow":
            return load_arrow_values(node, length, ctx)
        if layout == "items":
            items = ctx.load(node.get("items"), "items")
            if not isinstance(items, list) or len(items) != length:
                raise ctx.error(f"an object column needs {length} items")
            out = np.empty(length, dtype=object)
            for i, item in enumerate(items):  # one by one: numpy must not unpack nested sequences
                out[i] = item
            return pd.arrays.NumpyExtensionArray(out)
        if layout == "categorical":
            categories = ctx.load(node.get("categories"), "categories")
            if not isinstance(categories, pd.Index):
                raise ctx.error("categories must be an Index")
            codes = _array(node.get("codes"), ctx, None, length, "iu", label="codes")
            ordered = expect(node, "ordered", bool, ctx)
            return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(categories, ordered=ordered))
        if layout == "masked":
            spec = _MASKED.get(node.get("dtype"))  # type: ignore[arg-type]
            if spec is None:
                raise ctx.error(f"unknown nullable dtype {str(node.get('dtype'))[:30]!r}")
            cls, np_dtype = spec
            data = _array(node.get("data"), ctx, None, length)
            if data.dtype != np_dtype:
                raise ctx.error(f"{node['dtype']} data must be {np_dtype}, not {data.dtype}")
            mask = _mask(node, ctx, length)
            return cls(data, np.zeros(length, dtype=bool) if mask is None else mask, copy=False)
        if layout == "datetime":
            unit = check_unit(node.get("unit"), ctx)
            data = _array(node.get("data"), ctx, None, length, "M")
            if data.dtype != np.dtype(f"M8[{unit}]"):
                raise ctx.error(f"datetime data must be datetime64[{unit}], not {data.dtype}")
            tz = tz_from(node, ctx)
            if tz is None:
                raise ctx.error("a 'datetime' array needs a time zone")
            return pd.array(data).tz_localize("UTC").tz_convert(tz)
        if layout == "period":
            dtype = pd.PeriodDtype(check_freq(node.get("freq"), ctx))
            return pd.arrays.PeriodArray(_array(node.get("data"), ctx, None, length, "i").astype(np.int64), dtype=dtype)
        if layout == "numpy":
            data = _array(node.get("data"), ctx, None, length)
            if data.dtype.kind in "mM":
                return pd.array(data)
            if data.dtype.kind not in NUMPY_KINDS:
                raise ctx.error(f"dtype {data.dtype} is not allowed")
            return pd.arrays.NumpyExtensionArray(data)
        raise ctx.error(f"unknown pandas array layout {str(layout)[:20]!r}")

    def _load_strings(self, node: dict[str, Any], length: int, ctx: LoadContext) -> Any:
        dtype, na = _string_dtype(node, ctx)
        if node["layout"] == "dict":
            parts = dict_parts(node, ctx, length)
            if dtype is not None and dtype.storage == "pyarrow":
                arrow = self._arrow_dict(node, parts, length, dtype, ctx)
                if arrow is not None:
                    return arrow
                dtype = pd.StringDtype("python", na_value=na)
            out = _dict_values(parts, na, node["$ref"])
        else:
            if node["layout"] == "utf8":
                offsets, data, valid = utf8_parts(node, ctx, length)
                adopted = None if dtype is None else arrow_strings(offsets, data, valid, dtype, member=node["$ref"])
                if adopted is not None:  # pyarrow storage: pandas takes the column's own buffers
                    return adopted
                present = decode_utf8(offsets, data, length, member=node["$ref"])  # missing ones as "", masked below
                mask = None if valid is None else ~valid
            else:
                mask, present = self._strings_present(node, length, ctx)
            out = _place(present, mask, length, na)
        if dtype is None:
            return pd.arrays.NumpyExtensionArray(out)
        if dtype.storage == "python":  # every item is a str the reader made, or the missing value
            return pandas_compat.string_array_unchecked(out, dtype)
        return pd.array(out, dtype=dtype)

    def _arrow_dict(
        self, node: dict[str, Any], parts: DictParts, length: int, dtype: pd.StringDtype, ctx: LoadContext
    ) -> Any:
        """A "dict" column for pyarrow storage, decoded by Arrow; None where the decoded text (every
        row's own copy of its value) would not fit the read's budget: the rows then share one Python
        string per value, in python storage (a recoverable mismatch), as a dictionary costs nothing
        per row there. A few long values repeated over many rows must not cost rows x length."""
        offsets, data, codes = parts
        decoded = int(np.diff(offsets)[codes[codes >= 0]].sum()) + 8 * length
        budget = getattr(ctx.archive, "budget", None)
        if budget is not None and decoded + ctx.plan.nbytes + budget.json_bytes > budget.limit:
            ctx.mismatch(
                f"strings saved with pyarrow storage are loaded with python storage: as Arrow text they "
                f"would take {decoded:,} bytes, over the read's budget (max_read_bytes)"
            )
            return None
        return arrow_dict_strings(offsets, data, codes, dtype, member=node["$ref"])

    def _strings_present(self, node: dict[str, Any], length: int, ctx: LoadContext) -> tuple[Any, list[str]]:
        count = expect(node, "count", int, ctx)
        mask = _mask(node, ctx, length)
        missing = 0 if mask is None else int(np.count_nonzero(mask))
        if count != length - missing:
            raise ctx.error(f"{count} strings do not fill {length} rows with {missing} missing")
        if "$ref" in node:
            member = node["$ref"]
            data = ctx.member_bytes(member, expected_size=expect(node, "nbytes", int, ctx))
            present = decode_strings(data, count, member=member)
        else:
            present = expect(node, "values", list, ctx)
            if len(present) != count or not all(type(v) is str for v in present):
                raise ctx.error(f"'values' must be {count} strings")
        return mask, present


def _dict_values(parts: DictParts, na: Any, member: str) -> np.ndarray:
    """The object array of a "dict" text column (its checked parts): each distinct string made once,
    every row a reference to its value, `na` where the code is -1. pandas' `take` copies the
    references in a typed loop (about twice numpy's speed on object arrays)."""
    offsets, data, codes = parts
    distinct = np.empty(len(offsets) - 1, dtype=object)
    distinct[:] = decode_utf8(offsets, data, len(distinct), member=member)
    out = pd.api.extensions.take(distinct, codes, allow_fill=True, fill_value=np.nan if na is None else na)
    if na is None and len(codes):  # take fills with NaN when asked for None
        out[codes < 0] = None
    return out


def _place(present: list[str], mask: np.ndarray | None, length: int, na: Any) -> np.ndarray:
    """An object array of `length` items: `present` in order where `mask` is false (everywhere when
    None or when `present` has an item per row), `na` where it is true."""
    if mask is None or len(present) == length:
        out = np.array(present, dtype=object) if present else np.empty(0, dtype=object)
        if mask is not None:
            out[mask] = na
        return out
    out = np.empty(length, dtype=object)
    out[~mask] = np.array(present, dtype=object) if present else []
    out[mask] = na
    return out


def _string_dtype(node: dict[str, Any], ctx: LoadContext) -> tuple[Any, Any]:
    """(StringDtype, or None for an object column; the missing value) of a text node."""
    dtype_name = node.get("dtype")
    if dtype_name == "object":
        missing = node.get("missing", "None")
        if missing not in ("None", "NaN"):
            raise ctx.error(f"bad missing-value marker {str(missing)[:20]!r}")
        na: Any = None if missing == "None" else np.nan
        dtype: Any = None
    else:
        storage, na_text = node.get("storage"), node.get("na_value")
        if storage not in ("python", "pyarrow") or na_text not in ("nan", "NA"):
            raise ctx.error("bad string storage or na_value")
        na = pd.NA if na_text == "NA" else np.nan
        if storage == "pyarrow" and not _has_pyarrow():
            ctx.mismatch("strings saved with pyarrow storage are loaded with python storage (pyarrow is missing)")
            storage = "python"
        dtype = pd.StringDtype(storage, na_value=na)
    return dtype, na


def _uniform_missing(items: list[Any]) -> str | None:
    """How an object column's missing items are all written: "None", "NaN" (the canonical NaN), or
    None when they differ (then the items are saved one by one, so each comes back as it was)."""
    if all(x is None for x in items):
        return "None"
    if all(type(x) is float for x in items) and bool(
        (np.array(items, dtype=np.float64).view(np.uint64) == _CANONICAL_NAN).all()
    ):
        return "NaN"
    return None


def _utf8_ok(values: list[str]) -> bool:
    try:
        "".join(values).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True
