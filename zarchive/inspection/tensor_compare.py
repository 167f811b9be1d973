"""Comparing two tensors (or numpy arrays) of the same shape piece by piece: how far apart they are,
without a copy of either whole.

The values are walked in C order in pieces of at most PIECE_ELEMENTS elements (blocks of the first
dimension, and into one row where a row alone is bigger), each piece of both sides converted to
float64 (complex128 for complex values) on its own, so the memory a comparison adds beside the two
values (views of the mapped file, where the stored form allows it) is a few pieces, whatever their
size. An expanded view (stride 0) is never materialised.

NaN and infinities: positions where both sides hold NaN, or the same infinity, are equal. Positions
where the sides differ and either holds a NaN or an infinity are counted in `nonfinite_mismatch` and
always count as a change, whatever the tolerance; they are left out of the norms and the maximum
difference, which are taken over the positions where both sides are finite.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

PIECE_ELEMENTS = 1 << 20  # elements of each side converted to float64 at a time (8 MiB)
NUMERIC_KINDS = "biufc"  # numpy dtype kinds compared by value: bool, int, uint, float, complex
# torch dtypes compared by value; the rest (sub-byte integer shells, bits, packed float4, quantized)
# are compared by their stored bytes only
TORCH_NUMERIC = frozenset(
    ("float64", "float32", "float16", "bfloat16", "complex128", "complex64", "complex32", "bool")
    + tuple(f"{s}int{n}" for s in ("", "u") for n in (8, 16, 32, 64))
    + ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")
)
_CARRIERS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}  # same-size integers for a raw view


@dataclass(frozen=True)
class Distance:
    """How far apart two values of one shape are (see the module docstring for NaN and infinities)."""

    differing: int  # elements that are not equal (NaN equals NaN)
    nonfinite_mismatch: int  # of those, where either side is NaN or infinite
    norm_a: float  # ||a||, the Euclidean norm over the positions finite on both sides
    norm_b: float
    norm_diff: float  # ||a - b|| over the same positions
    max_abs_diff: float  # max |a - b| over the same positions (0.0 when there are none)
    nan_a: int  # NaNs in a
    nan_b: int

    @property
    def relative_change(self) -> float:
        """||a - b|| / ||a||; where ||a|| is 0: 0.0 when ||b|| is 0 too, else 1.0 (all of b is new)."""
        if self.norm_a > 0:
            return self.norm_diff / self.norm_a
        return 0.0 if self.norm_diff == 0 else 1.0


def is_numeric(value: Any) -> bool:
    """Whether a tensor or array is compared by value (numbers and booleans), not by equality alone."""
    dtype = getattr(value, "dtype", None)
    kind = getattr(dtype, "kind", None)
    if isinstance(kind, str):  # numpy
        return kind in NUMERIC_KINDS
    return hasattr(value, "element_size") and str(dtype).removeprefix("torch.") in TORCH_NUMERIC


def value_nbytes(value: Any) -> int:
    """The bytes of a tensor's or array's values, from its shape (what comparing it reads)."""
    size = getattr(value, "itemsize", None)
    item = int(size) if size is not None else int(value.element_size())
    return math.prod(int(d) for d in value.shape) * item


def block_indices(shape: tuple[int, ...], limit: int = PIECE_ELEMENTS) -> Iterator[tuple[Any, ...]]:
    """Index tuples (integers, then one slice) that cut an array of `shape` into pieces of at most
    `limit` elements (a row bigger than that is cut along its own first dimension), in C order; with
    an explicit stack, never recursion."""
    if not shape:
        yield ()
        return
    if math.prod(shape) == 0:
        return
    stack: list[tuple[int, ...]] = [()]
    while stack:
        prefix = stack.pop()
        level = len(prefix)
        n = shape[level]
        row = math.prod(shape[level + 1 :])
        if row <= limit or level == len(shape) - 1:
            step = max(1, limit // max(row, 1))
            for start in range(0, n, step):
                yield (*prefix, slice(start, min(n, start + step)))
        else:
            stack.extend((*prefix, i) for i in reversed(range(n)))


def _as_numpy(piece: Any, *, raw: bool = False) -> Any:
    """One piece as a numpy array, converted where numpy lacks the dtype (bfloat16 and float8 to
    float32, complex32 to complex64: exactly, so equal values stay equal). raw: a torch piece as
    same-size integers holding its stored bytes (dtypes that are not numbers to numpy or torch)."""
    import numpy as np

    if isinstance(piece, np.ndarray):
        return piece
    if isinstance(piece, np.generic):
        return np.asarray(piece)
    import torch

    t = piece.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if raw:
        if t.is_quantized:
            t = t.int_repr()
        return t.view(getattr(torch, _CARRIERS[t.element_size()])).numpy()
    t = t.resolve_conj().resolve_neg()
    try:
        return t.numpy()
    except (TypeError, RuntimeError):
        return t.to(torch.complex64 if t.is_complex() else torch.float32).numpy()


def distance(a: Any, b: Any, limit: int = PIECE_ELEMENTS) -> Distance:
    """Compare two numeric tensors or arrays of one shape (torch or numpy, either dtype), piece by piece."""
    import numpy as np

    differing = nonfinite = nan_a = nan_b = 0
    sq_a = sq_b = sq_d = 0.0
    max_d = 0.0
    same_dtype = str(a.dtype) == str(b.dtype)
    for index in block_indices(tuple(int(d) for d in a.shape), limit):
        pa, pb = _as_numpy(a[index]), _as_numpy(b[index])
        wide = np.complex128 if (pa.dtype.kind == "c" or pb.dtype.kind == "c") else np.float64
        fa, fb = pa.astype(wide), pb.astype(wide)
        na, nb = np.isnan(fa), np.isnan(fb)
        nan_a += int(na.sum())
        nan_b += int(nb.sum())
        equal = (pa == pb) if same_dtype and pa.dtype == pb.dtype else (fa == fb)
        equal = np.asarray(equal) | (na & nb)
        finite = np.isfinite(fa) & np.isfinite(fb)
        unequal = ~equal
        differing += int(unequal.sum())
        nonfinite += int((unequal & ~finite).sum())
        if finite.all():
            xa, xb = fa, fb
        else:
            xa, xb = fa[finite], fb[finite]
        d = np.abs(xa - xb)
        with np.errstate(over="ignore"):
            sq_d += float(np.sum(d * d))
            sq_a += float(np.sum(np.abs(xa) ** 2))
            sq_b += float(np.sum(np.abs(xb) ** 2))
        if d.size:
            max_d = max(max_d, float(d.max()))
    return Distance(
        differing=differing,
        nonfinite_mismatch=nonfinite,
        norm_a=math.sqrt(sq_a),
        norm_b=math.sqrt(sq_b),
        norm_diff=math.sqrt(sq_d),
        max_abs_diff=max_d,
        nan_a=nan_a,
        nan_b=nan_b,
    )


def equal_values(a: Any, b: Any, limit: int = PIECE_ELEMENTS) -> bool:
    """Whether two arrays of one shape and a dtype compared by equality only (strings, datetimes,
    records; torch's bits, sub-byte and quantized dtypes, by their bytes) hold the same values, piece
    by piece."""
    import numpy as np

    if str(a.dtype) != str(b.dtype) and not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        return False  # stored bytes of two dtypes that are not numbers: not comparable, not equal
    raw = not isinstance(a, np.ndarray)
    for index in block_indices(tuple(int(d) for d in a.shape), limit):
        if not np.array_equal(_as_numpy(a[index], raw=raw), _as_numpy(b[index], raw=raw)):
            return False
    return True


__all__ = ["PIECE_ELEMENTS", "Distance", "block_indices", "distance", "equal_values", "is_numeric", "value_nbytes"]
