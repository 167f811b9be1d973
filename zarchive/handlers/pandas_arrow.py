"""Text columns in Arrow's layout adopted by pandas' pyarrow-backed strings without a copy or a parse.

Where pyarrow is installed, pandas 3's default `str` dtype keeps its text in an Arrow `large_string`
array: exactly the offsets, data and validity of a "utf8" column (spec/pandas.md 5.2). The reader
hands those buffers to pyarrow (`LargeStringArray.from_buffers`) once they are checked in full
(offsets in order and in range, every value valid UTF-8: see _checked_strings) and pandas wraps the
array; the writer takes the buffers of such a column the same way, through pyarrow's public
`pa.array(...)`. Without pyarrow (an optional package, never required) these return None and the
callers make Python strings.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..container.utf8_column import check_char_boundaries
from ..engine.context import LoadContext, Node, SaveContext
from ..errors import FormatError
from .pandas_text import sample_repeats, sample_rows, smallest_codes


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        return None
    return pyarrow


def _pyarrow_for(dtype: pd.StringDtype) -> Any:
    """pyarrow, where `dtype` is pyarrow storage and pyarrow is installed; else None."""
    return _pyarrow() if dtype.storage == "pyarrow" else None


def _checked_strings(pa: Any, offsets: np.ndarray, data: memoryview, valid: np.ndarray | None, member: str) -> Any:
    """An Arrow `large_string` array over the given buffers, its offsets already checked
    (utf8_column.check_offsets: from 0 to the data's end, never decreasing). Arrow checks the array's
    structure and the data as one UTF-8 value (one pass over the bytes, where `validate(full=True)`
    checks each row on its own); every row then is valid UTF-8 when each starts on a character's
    first byte (check_char_boundaries, free for ASCII data)."""
    length = len(offsets) - 1
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    nulls = 0 if valid is None else int(length - np.count_nonzero(valid))
    off = np.ascontiguousarray(offsets, dtype=np.int64)
    whole = np.array([0, len(data)], dtype=np.int64)
    try:
        pa.LargeStringArray.from_buffers(1, pa.py_buffer(whole), pa.py_buffer(data)).validate(full=True)
    except pa.ArrowInvalid as e:
        raise FormatError(f"string data is not valid UTF-8 ({e})", member=member) from None
    try:
        arr = pa.LargeStringArray.from_buffers(length, pa.py_buffer(off), pa.py_buffer(data), bitmap, nulls)
        arr.validate()
    except pa.ArrowInvalid as e:
        raise FormatError(f"not a valid Arrow string column: {e}", member=member) from None
    check_char_boundaries(np.frombuffer(data, dtype=np.uint8), off, member)
    return arr


def arrow_strings(
    offsets: np.ndarray, data: memoryview, valid: np.ndarray | None, dtype: pd.StringDtype, *, member: str
) -> Any:
    """A pyarrow-storage string array over the column's own buffers, or None without pyarrow."""
    pa = _pyarrow_for(dtype)
    if pa is None:
        return None
    return pd.arrays.ArrowStringArray(_checked_strings(pa, offsets, data, valid, member), dtype=dtype)


def arrow_column(arr: Any) -> Any:
    """A pyarrow-storage string array as one Arrow array (chunks combined), through pyarrow's public
    `pa.array(...)`; None when the array is not one or pyarrow is missing."""
    if not isinstance(getattr(arr, "dtype", None), pd.StringDtype) or arr.dtype.storage != "pyarrow":
        return None
    pa = _pyarrow()
    if pa is None:
        return None
    whole = pa.array(arr)
    return whole.combine_chunks() if isinstance(whole, pa.ChunkedArray) else whole


def arrow_buffers(column: Any) -> tuple[np.ndarray, bytes, np.ndarray | None]:
    """(int64 offsets from 0, data, validity or None) of an `arrow_column`."""
    pa = _pyarrow()
    whole = column.cast(pa.large_string())
    _, off_buf, data_buf = whole.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64)[whole.offset : whole.offset + len(whole) + 1]
    start, end = int(offsets[0]), int(offsets[-1])
    valid = None if whole.null_count == 0 else np.asarray(whole.is_valid())
    data = b"" if data_buf is None else memoryview(data_buf)[start:end].tobytes()
    return offsets - start, data, valid


ARROW_DICT_SHARE = 16


def arrow_dictionary(column: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """(codes, distinct values) of an `arrow_column` whose values repeat, as
    `pandas_text.dictionary_codes` gives them for python storage (codes of the smallest integer
    type, -1 where missing; the values in order of first appearance); None when a dictionary does
    not pay. Arrow's own hash table does the work.

    Arrow text gives every row its own bytes, so reading a dictionary back costs a copy of every row's
    value, where the `utf8` layout hands pyarrow the column's buffers as they are (format 1.5 writers):
    a dictionary pays only where values repeat much more than for python storage (at most one
    distinct value in ARROW_DICT_SHARE present ones: a smaller file, and a few long values repeated
    over many rows can still be read within a budget, in python storage)."""
    pa = _pyarrow()
    present = len(column) - column.null_count
    if present < 2:
        return None
    rows = sample_rows(len(column))
    share = present * 2 // ARROW_DICT_SHARE  # sample_repeats asks for at most share // 2 distinct values
    if rows is not None:
        sample = column.take(pa.array(rows)).dictionary_encode()
        if not sample_repeats(sample.indices.fill_null(-1).to_numpy(zero_copy_only=False), share):
            return None
    encoded = column.dictionary_encode()
    if ARROW_DICT_SHARE * len(encoded.dictionary) > present:
        return None
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    distinct = np.empty(len(encoded.dictionary), dtype=object)
    distinct[:] = encoded.dictionary.to_pylist()
    return smallest_codes(codes, len(distinct)), distinct


def arrow_dict_strings(
    offsets: np.ndarray, data: memoryview, codes: np.ndarray, dtype: pd.StringDtype, *, member: str
) -> Any:
    """A pyarrow-storage string array of a "dict" column (its dictionary's checked offsets and data,
    and codes already checked to lie in -1..count-1), decoded by pyarrow; None without pyarrow or for
    python storage."""
    pa = _pyarrow_for(dtype)
    if pa is None:
        return None
    dictionary = _checked_strings(pa, offsets, data, None, member)
    indices = pa.array(codes.astype(np.int64, copy=False), mask=codes < 0)
    decoded = pa.DictionaryArray.from_arrays(indices, dictionary).cast(pa.large_string())
    return pd.arrays.ArrowStringArray(decoded, dtype=dtype)


def arrow_objects(offsets: np.ndarray, data: memoryview, valid: np.ndarray | None, *, member: str) -> np.ndarray | None:
    """The object array of a "utf8" column's rows (checked offsets, data, validity), every row its own
    str made by pyarrow in row order, None where missing; None without pyarrow. (Arrow fills the array
    in C: 65% of the time of utf8_column.decode_utf8 plus the array, 2026-11-28.)"""
    pa = _pyarrow()
    if pa is None:
        return None
    out: np.ndarray = _checked_strings(pa, offsets, data, valid, member).to_numpy(zero_copy_only=False)
    return out


def arrow_dict_objects(offsets: np.ndarray, data: memoryview, codes: np.ndarray, *, member: str) -> np.ndarray | None:
    """The object array of a "dict" column's rows (its dictionary's checked offsets and data, codes
    already checked to lie in -1..count-1), every row its own str made by pyarrow in row order, None
    where the code is -1; None without pyarrow. (Arrow's take and its conversion to Python objects
    fill the array in C: about 60% of the time of utf8_column.dict_rows, 2026-11-28.)"""
    pa = _pyarrow()
    if pa is None:
        return None
    dictionary = _checked_strings(pa, offsets, data, None, member)
    missing = codes < 0 if len(codes) and int(codes.min()) < 0 else None
    indices = pa.array(codes, mask=missing)
    out: np.ndarray = dictionary.take(indices).to_numpy(zero_copy_only=False)
    return out


# --- ArrowDtype columns (format 1.5): the "arrow" layout, an `arrow.array` node (handlers/arrow_.py) ---


def arrow_dtype_problem(dtype: pd.ArrowDtype) -> str | None:
    """Why an ArrowDtype column cannot be saved, or None if it can."""
    from .arrow_ import type_json

    try:
        type_json(dtype.pyarrow_dtype)
    except ValueError as e:
        return f"pandas dtype {dtype} (ArrowDtype): {e}"
    return None


def save_arrow_values(arr: Any, head: dict[str, Any], ctx: SaveContext) -> Node:
    """An ArrowDtype array: its Arrow array (chunks combined) under `array`, in Arrow's layout."""
    pa = _pyarrow()
    whole = pa.array(arr)  # pandas' public __arrow_array__: the array it holds, no copy
    if isinstance(whole, pa.ChunkedArray):
        whole = whole.combine_chunks()
    return {**head, "layout": "arrow", "array": ctx.save(whole, "array")}


def load_arrow_values(node: dict[str, Any], length: int, ctx: LoadContext) -> Any:
    """The ArrowDtype array of an "arrow" node, over the buffers read (no copy)."""
    from .arrow_ import pyarrow_module

    pa = pyarrow_module()
    arr = ctx.load(node.get("array"), "array")
    if not isinstance(arr, pa.Array) or len(arr) != length:
        raise ctx.error(f"an 'arrow' pandas array needs an Arrow array of {length} values")
    return pd.arrays.ArrowExtensionArray(arr)
