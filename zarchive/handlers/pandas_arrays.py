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
The text layouts ("strings", "utf8", "dict") are written and read by pandas_strings.py; a node's
parts are loaded and checked by pandas_parts.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pandas.api.extensions import ExtensionArray

from .._compat import pandas as pandas_compat
from ..engine.context import LoadContext, Node, SaveContext
from ..nodes.tables import PandasArraySchema
from .base import Handler, expect
from .pandas_arrow import arrow_dtype_problem, load_arrow_values, save_arrow_values
from .pandas_parts import NUMPY_KINDS, array_part, mask_part
from .pandas_scalars import check_freq, check_unit, tz_fields, tz_from
from .pandas_strings import load_strings, object_text, save_string_array, save_strings

_MASKED: dict[str, tuple[type, np.dtype]] = {
    **{f"Int{b}": (pd.arrays.IntegerArray, np.dtype(f"int{b}")) for b in (8, 16, 32, 64)},
    **{f"UInt{b}": (pd.arrays.IntegerArray, np.dtype(f"uint{b}")) for b in (8, 16, 32, 64)},
    **{f"Float{b}": (pd.arrays.FloatingArray, np.dtype(f"float{b}")) for b in (32, 64)},
    "boolean": (pd.arrays.BooleanArray, np.dtype(bool)),
}
_MASKED_CLASSES = (pd.arrays.IntegerArray, pd.arrays.FloatingArray, pd.arrays.BooleanArray)
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
            return save_string_array(arr, head, ctx)
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
        text = object_text(values, items)
        if text is not None:
            missing, mask = text
            return save_strings(head, {"missing": missing}, values, mask, ctx)
        head["layout"] = "items"
        head["items"] = ctx.save(items)
        return head

    # --- loading ---
    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        length = expect(node, "length", int, ctx)
        if length < 0:
            raise ctx.error("negative length")
        layout = node.get("layout")
        if layout in ("strings", "utf8", "dict"):
            return load_strings(node, length, ctx)
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
            codes = array_part(node.get("codes"), ctx, None, length, "iu", label="codes")
            ordered = expect(node, "ordered", bool, ctx)
            return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(categories, ordered=ordered))
        if layout == "masked":
            spec = _MASKED.get(node.get("dtype"))  # type: ignore[arg-type]
            if spec is None:
                raise ctx.error(f"unknown nullable dtype {str(node.get('dtype'))[:30]!r}")
            cls, np_dtype = spec
            data = array_part(node.get("data"), ctx, None, length)
            if data.dtype != np_dtype:
                raise ctx.error(f"{node['dtype']} data must be {np_dtype}, not {data.dtype}")
            mask = mask_part(node, ctx, length)
            return cls(data, np.zeros(length, dtype=bool) if mask is None else mask, copy=False)
        if layout == "datetime":
            unit = check_unit(node.get("unit"), ctx)
            data = array_part(node.get("data"), ctx, None, length, "M")
            if data.dtype != np.dtype(f"M8[{unit}]"):
                raise ctx.error(f"datetime data must be datetime64[{unit}], not {data.dtype}")
            tz = tz_from(node, ctx)
            if tz is None:
                raise ctx.error("a 'datetime' array needs a time zone")
            return pd.array(data).tz_localize("UTC").tz_convert(tz)
        if layout == "period":
            dtype = pd.PeriodDtype(check_freq(node.get("freq"), ctx))
            return pd.arrays.PeriodArray(
                array_part(node.get("data"), ctx, None, length, "i").astype(np.int64), dtype=dtype
            )
        if layout == "numpy":
            data = array_part(node.get("data"), ctx, None, length)
            if data.dtype.kind in "mM":
                return pd.array(data)
            if data.dtype.kind not in NUMPY_KINDS:
                raise ctx.error(f"dtype {data.dtype} is not allowed")
            return pd.arrays.NumpyExtensionArray(data)
        raise ctx.error(f"unknown pandas array layout {str(layout)[:20]!r}")
