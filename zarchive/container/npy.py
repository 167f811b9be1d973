"""The `.npy` member format, written and parsed here so no untrusted header reaches numpy.

`numpy.load` would fall back to pickle on non-npy bytes and allocate a declared shape before reading;
this parser checks the header (size, keys, dtype kind) and that the declared shape fits the bytes that
are actually there, then builds the array over those bytes without copying.
"""

from __future__ import annotations

import ast
import math
import re
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import FormatError, SaveError, UnsafeArchiveError
from .shapes import check_shape

MAGIC = b"\x93NUMPY"
MAX_HEADER_BYTES = 10 * 1024
ALLOWED_KINDS = frozenset("biufcmMSU")


def header_bytes(dtype: np.dtype, shape: tuple[int, ...], fortran_order: bool) -> bytes:
    """A version 1.0 npy header padded so the data starts at a multiple of 64 bytes."""
    descr = np.lib.format.dtype_to_descr(dtype)
    text = f"{{'descr': {descr!r}, 'fortran_order': {fortran_order}, 'shape': {tuple(shape)!r}, }}"
    base = len(MAGIC) + 2 + 2
    total = base + len(text) + 1
    text += " " * ((-total) % 64) + "\n"
    if len(text) > MAX_HEADER_BYTES:  # (at most 64 dimensions and no structured dtypes: never, in practice)
        raise SaveError(f".npy header of {len(text)} bytes, over the {MAX_HEADER_BYTES} a reader accepts")
    return MAGIC + b"\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1")


def array_parts(arr: np.ndarray) -> Iterator[memoryview]:
    """The member's bytes: header, then the data (zero-copy when the array is contiguous)."""
    fortran = bool(arr.flags.f_contiguous and not arr.flags.c_contiguous and arr.ndim > 1)
    yield memoryview(header_bytes(arr.dtype, arr.shape, fortran))
    if arr.size == 0:
        return
    data = arr.T if fortran else np.ascontiguousarray(arr)
    yield data.reshape(-1).view(np.uint8).data  # ndarray.data: the array's own memoryview


def array_nbytes(arr: np.ndarray) -> int:
    return len(header_bytes(arr.dtype, arr.shape, False)) + arr.size * arr.dtype.itemsize


def parse(buf: memoryview, *, member: str) -> np.ndarray:
    """An array over `buf`'s bytes (no copy), after checking the header against the bytes."""
    dtype, shape, fortran, data_start = parse_header(buf, len(buf), member=member)
    count = math.prod(shape)
    flat = np.frombuffer(buf, dtype=dtype, count=count, offset=data_start)
    if fortran:
        return flat.reshape(shape[::-1]).T
    return flat.reshape(shape)


def parse_header(
    buf: memoryview | bytes, total_size: int, *, member: str
) -> tuple[np.dtype[Any], tuple[int, ...], bool, int]:
    """(dtype, shape, fortran_order, where the data starts) of an .npy of `total_size` bytes whose
    first bytes (at least the header) are `buf`; the declared data must fill the rest exactly."""
    if len(buf) < 10 or bytes(buf[:6]) != MAGIC:
        raise FormatError("not an .npy member (bad magic)", member=member)
    major = buf[6]
    if major == 1:
        hlen = struct.unpack("<H", bytes(buf[8:10]))[0]
        start = 10
    elif major in (2, 3):
        if len(buf) < 12:
            raise FormatError("truncated .npy header", member=member)
        hlen = struct.unpack("<I", bytes(buf[8:12]))[0]
        start = 12
    else:
        raise FormatError(f"unsupported .npy version {major}", member=member)
    if hlen > MAX_HEADER_BYTES:
        raise UnsafeArchiveError(f".npy header of {hlen} bytes (limit {MAX_HEADER_BYTES})", member=member)
    if start + hlen > len(buf):
        raise FormatError("truncated .npy header", member=member)
    try:
        text = bytes(buf[start : start + hlen]).decode("utf-8" if major == 3 else "latin1")
        header = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as e:
        raise FormatError(f"unreadable .npy header: {e}", member=member) from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise FormatError(".npy header must have exactly descr, fortran_order and shape", member=member)
    descr, fortran, shape = header["descr"], header["fortran_order"], header["shape"]
    if not isinstance(descr, str):
        raise UnsafeArchiveError("structured .npy dtypes are not allowed", member=member)
    dtype = dtype_from_text(descr, member=member)
    if dtype.kind not in ALLOWED_KINDS or dtype.hasobject or dtype.fields is not None:
        raise UnsafeArchiveError(
            f".npy dtype {descr!r} is not allowed (object, void and structured dtypes never load)",
            member=member,
        )
    if dtype.itemsize == 0:  # 'S0', 'U0', 'V0': numpy cannot view bytes as elements of no size
        raise FormatError(f".npy dtype {descr!r} has elements of zero bytes", member=member)
    if not isinstance(fortran, bool):
        raise FormatError("fortran_order must be a bool", member=member)
    check_shape(shape, member=member)
    count = math.prod(shape)
    data_start = start + hlen
    if count * dtype.itemsize != total_size - data_start:
        raise FormatError(
            f".npy header declares {count * dtype.itemsize} data bytes, the member holds {total_size - data_start}",
            member=member,
        )
    return dtype, tuple(shape), fortran, data_start


MAX_DTYPE_TEXT = 64
_DEPRECATED_ALIAS = re.compile(r"[<>|=]?a[0-9]*")


def dtype_from_text(text: str, *, member: str | None = None, path: str | None = None) -> np.dtype[Any]:
    """numpy's dtype for a dtype string read from a file. numpy parses such text with several parsers
    (comma-separated strings go through `ast.literal_eval`) that raise TypeError, ValueError,
    SyntaxError and more on junk: every failure is a FormatError."""
    if len(text) > MAX_DTYPE_TEXT:
        raise FormatError(f"dtype text of {len(text)} characters is too long", member=member, path=path)
    if _DEPRECATED_ALIAS.fullmatch(text):  # numpy 2 warns on it (and will refuse it); numpy.save writes 'S'
        raise FormatError(f"bad dtype {text!r}: the deprecated alias of 'S'", member=member, path=path)
    try:
        return np.dtype(text)
    except Exception as e:  # noqa: BLE001 - whatever numpy's parsers raise on text from a file
        raise FormatError(f"bad dtype {text[:40]!r}: {type(e).__name__}", member=member, path=path) from None
