"""pandas internals: the numpy arrays inside nullable (masked) arrays and python-storage StringArrays.

Probes (see the package docstring for the rule):

- "pandas.masked_parts": an IntegerArray / FloatingArray / BooleanArray keeps its values in `_data`
  and its missing positions in `_mask` (1-D numpy arrays of the array's numpy dtype and bool). The
  values under the mask are kept as they are, without a copy. Fallback: None, and the caller uses
  `isna()` and `to_numpy(na_value=...)` (public; the values under the mask then read as 0/False).
- "pandas.string_ndarray": a StringArray with python storage keeps its items in `_ndarray`, an
  object array. Fallback: None, and the caller uses `to_numpy(dtype=object)` (a copy).
- "pandas.string_simple_new": `StringArray._simple_new(values, dtype)` wraps an object array of str
  and missing values without checking each item (the public constructor checks every item: a third
  of the time a text column takes to read). Used only for arrays whose items the caller made itself
  (str, and the dtype's missing value). Fallback: None, and the caller uses the public constructor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from . import Probe


def _parts(arr: Any) -> tuple[np.ndarray, np.ndarray] | None:
    data, mask = getattr(arr, "_data", None), getattr(arr, "_mask", None)
    if not (isinstance(data, np.ndarray) and isinstance(mask, np.ndarray)):
        return None
    n = len(arr)
    if data.shape != (n,) or mask.shape != (n,) or mask.dtype != np.bool_ or data.dtype != arr.dtype.numpy_dtype:
        return None
    return data, mask


def _check_masked_parts() -> bool | None:
    for values, dtype in (([7, None, 9], "Int16"), ([0.5, None], "Float32"), ([True, None, False], "boolean")):
        arr = pd.array(values, dtype=dtype)
        parts = _parts(arr)
        if parts is None:
            return None
        data, mask = parts
        if mask.tolist() != [v is None for v in values] or mask.tolist() != arr.isna().tolist():
            return None
        if [x for x, m in zip(data.tolist(), mask.tolist()) if not m] != [v for v in values if v is not None]:
            return None
    return True


_MASKED_PARTS = Probe("pandas.masked_parts", _check_masked_parts)


def masked_parts(arr: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """(values, mask) of a pandas masked array, both the array's own numpy arrays (no copy; the
    values under the mask as they are), or None when pandas does not keep them as expected."""
    if _MASKED_PARTS.get() is None:
        return None
    return _parts(arr)


def _ndarray(arr: Any) -> np.ndarray | None:
    values = getattr(arr, "_ndarray", None)
    if isinstance(values, np.ndarray) and values.dtype == object and values.shape == (len(arr),):
        return values
    return None


def _check_string_ndarray() -> bool | None:
    arr = pd.array(["a", None, "c"], dtype=pd.StringDtype("python"))
    values = _ndarray(arr)
    if values is None or values[0] != "a" or values[2] != "c" or arr.isna().tolist() != [False, True, False]:
        return None
    return True


_STRING_NDARRAY = Probe("pandas.string_ndarray", _check_string_ndarray)


def string_object_values(arr: Any) -> np.ndarray | None:
    """The object array inside a python-storage StringArray (no copy; read-only use; str where the
    array is not missing), or None: another storage, or pandas does not keep it as expected."""
    if _STRING_NDARRAY.get() is None:
        return None
    return _ndarray(arr)


def _check_string_simple_new() -> Any:
    new = pd.arrays.StringArray._simple_new  # type: ignore[attr-defined]
    for na in (np.nan, pd.NA):
        dtype = pd.StringDtype("python", na_value=na)
        values = np.array(["a", na, "é"], dtype=object)
        arr = new(values, dtype)
        public = pd.arrays.StringArray(values.copy(), dtype=dtype)
        if type(arr) is not pd.arrays.StringArray or arr.dtype != dtype or _ndarray(arr) is not values:
            return None
        if not arr.equals(public) or arr.isna().tolist() != [False, True, False]:
            return None
    return new


_STRING_SIMPLE_NEW = Probe("pandas.string_simple_new", _check_string_simple_new)


def string_array_unchecked(values: np.ndarray, dtype: Any) -> Any:
    """A python-storage StringArray around `values` (an object array the caller filled with str and
    `dtype`'s missing value only), without a check per item where pandas allows it."""
    new = _STRING_SIMPLE_NEW.get()
    if new is None:
        return pd.arrays.StringArray(values, dtype=dtype)
    return new(values, dtype)


__all__ = ["masked_parts", "string_array_unchecked", "string_object_values"]
