"""Text columns in Arrow's layout adopted by pandas' pyarrow-backed strings without a copy or a parse.

Where pyarrow is installed, pandas 3's default `str` dtype keeps its text in an Arrow `large_string`
array: exactly the offsets, data and validity of a "utf8" column (spec/pandas.md 5.2). The reader
hands those buffers to pyarrow (`LargeStringArray.from_buffers`), which checks them in full (offsets
in order and in range, every value valid UTF-8) before pandas wraps the array; the writer takes the
buffers of such a column the same way, through pyarrow's public `pa.array(...)`. Without pyarrow
(an optional package, never required) these return None and the callers make Python strings.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..errors import FormatError


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        return None
    return pyarrow


def arrow_strings(
    offsets: np.ndarray, data: memoryview, valid: np.ndarray | None, dtype: pd.StringDtype, *, member: str
) -> Any:
    """A pyarrow-storage string array over the column's own buffers, or None without pyarrow."""
    if dtype.storage != "pyarrow":
        return None
    pa = _pyarrow()
    if pa is None:
        return None
    length = len(offsets) - 1
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    nulls = 0 if valid is None else int(length - np.count_nonzero(valid))
    off = np.ascontiguousarray(offsets, dtype=np.int64)
    arr = pa.LargeStringArray.from_buffers(length, pa.py_buffer(off), pa.py_buffer(data), bitmap, nulls)
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid as e:
        raise FormatError(f"not a valid Arrow string column: {e}", member=member) from None
    return pd.arrays.ArrowStringArray(arr, dtype=dtype)


def arrow_buffers(arr: Any) -> tuple[np.ndarray, bytes, np.ndarray | None] | None:
    """(int64 offsets from 0, data, validity or None) of a pyarrow-storage string array; None when the
    array is not one or pyarrow is missing."""
    if not isinstance(getattr(arr, "dtype", None), pd.StringDtype) or arr.dtype.storage != "pyarrow":
        return None
    pa = _pyarrow()
    if pa is None:
        return None
    whole = pa.array(arr)
    if isinstance(whole, pa.ChunkedArray):
        whole = whole.combine_chunks()
    whole = whole.cast(pa.large_string())
    _, off_buf, data_buf = whole.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64)[whole.offset : whole.offset + len(whole) + 1]
    start, end = int(offsets[0]), int(offsets[-1])
    valid = None if whole.null_count == 0 else np.asarray(whole.is_valid())
    data = b"" if data_buf is None else memoryview(data_buf)[start:end].tobytes()
    return offsets - start, data, valid
