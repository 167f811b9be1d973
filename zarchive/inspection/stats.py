"""Statistics of one tensor or array, for the viewer's tensor page: shape, dtype, strides, min, max,
mean, std, NaN/Inf/zero counts, a histogram, and a small 2-D slice for a heat map.

Values are converted to float64 a block at a time (`BLOCK` elements), so the memory used stays small
however big the tensor is; bfloat16, float16 and the float8 types are widened by torch block by block.
A view that broadcasts (zero strides) is summarised from its distinct values, each counted as often
as it repeats, so a 20000 x 16384 view of 16 stored bytes costs what the 16 bytes cost; a view whose
strides overlap otherwise gets no statistics (they would cost more than the storage holds).
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..handlers.allocation import reach

BLOCK = 1 << 20  # elements converted to float64 at a time
BINS = 40  # histogram bins
HEAT_SIDE = 64  # a heat map has at most this many rows and columns


@dataclass
class Histogram:
    edges: list[float]  # BINS + 1 bin edges over [min, max] of the finite values
    counts: list[int]


@dataclass
class TensorStats:
    """What the tensor page shows (JSON-ready through `as_json`)."""

    library: str  # "torch" or "numpy"
    dtype: str
    shape: list[int]
    strides: list[int] | None  # in elements; None where the library has none to give
    storage_offset: int | None
    numel: int
    contiguous: bool
    computed: bool = True  # False: no statistics (see `note`)
    note: str = ""
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    zeros: int = 0
    true: int | None = None  # booleans: how many are true
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None
    histogram: Histogram | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("min", "max", "mean", "std"):
            out[key] = _finite_or_none(out[key])
        return out


@dataclass
class HeatMap:
    """A 2-D slice of a tensor, sampled down to at most HEAT_SIDE x HEAT_SIDE (None for NaN/Inf)."""

    index: list[int]  # the leading indices fixed to get a 2-D slice (all 0)
    rows: int  # the slice's full size
    cols: int
    row_step: int  # every row_step-th row and col_step-th column is shown
    col_step: int
    values: list[list[float | None]]


def is_array(value: Any) -> bool:
    """A torch tensor or a numpy array (what `tensor_stats` takes)."""
    if isinstance(value, (np.ndarray, np.generic)):
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _finite_or_none(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _as_numpy_view(value: Any) -> tuple[Any, str, list[int] | None, int | None, bool]:
    """(the array to summarise: numpy, or a torch tensor for dtypes numpy lacks), library name,
    strides in elements, storage offset, contiguous."""
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        item = value.dtype.itemsize or 1
        strides = [s // item for s in value.strides] if all(s % item == 0 for s in value.strides) else None
        return value, "numpy", strides, None, bool(value.flags.c_contiguous)
    t = value.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return t, "torch", list(t.stride()), int(t.storage_offset()), bool(t.is_contiguous())


def _distinct(a: Any) -> tuple[Any, int] | None:
    """`a` without its broadcast dimensions (zero strides, kept at length 1) and how often each
    remaining value repeats; None when the rest still overlaps in memory."""
    shape = list(a.shape)
    strides = _element_strides(a)
    if strides is None or a.ndim == 0:
        return a, 1
    index = tuple(slice(0, 1) if st == 0 and n > 1 else slice(None) for n, st in zip(shape, strides))
    small = a[index]
    small_strides = _element_strides(small) or []
    if small.ndim and any(s < 0 for s in small_strides):
        return small, math.prod(shape) // max(1, _numel(small))
    if _numel(small) and reach(list(small.shape), small_strides) < _numel(small):
        return None
    return small, math.prod(shape) // max(1, _numel(small))


def _element_strides(a: Any) -> list[int] | None:
    if isinstance(a, np.ndarray):
        item = a.dtype.itemsize or 1
        if any(s % item for s in a.strides):
            return None
        return [s // item for s in a.strides]
    return list(a.stride())


def _numel(a: Any) -> int:
    return int(a.size) if isinstance(a, np.ndarray) else int(a.numel())


def _blocks(a: Any) -> Iterator[Any]:
    """`a` in views of about BLOCK elements (nothing copied)."""
    n = _numel(a)
    if n <= BLOCK or a.ndim == 0:
        yield a
    elif a.ndim == 1:
        for i in range(0, a.shape[0], BLOCK):
            yield a[i : i + BLOCK]
    elif a.shape[0] == 1:  # one row bigger than a block: its own rows are the blocks
        yield from _blocks(a[0])
    else:
        step = max(1, BLOCK // max(1, n // a.shape[0]))
        for i in range(0, a.shape[0], step):
            yield from _blocks(a[i : i + step])


def _floats(block: Any) -> np.ndarray:
    """A block as a flat float64 numpy array (a copy of one block only)."""
    if isinstance(block, np.ndarray):
        return np.asarray(block, dtype=np.float64).reshape(-1)
    import torch

    try:
        x = block.numpy()  # (a view: float32, float16, ints, bool)
    except TypeError:  # bfloat16, float8: numpy has no such dtype; float32 holds each value exactly
        if block.dtype == torch.bfloat16:  # the top half of a float32's bits (faster than torch's cast)
            bits = block.view(torch.int16).numpy().astype(np.uint16).astype(np.uint32) << 16
            x = bits.view(np.float32)
        else:
            x = block.to(torch.float32).numpy()
    return np.asarray(x, dtype=np.float64).reshape(-1)


def _dtype_name(a: Any, library: str) -> str:
    return str(a.dtype) if library == "numpy" else str(a.dtype).removeprefix("torch.")


def _kind(a: Any) -> str:
    """'b' bool, 'i' integer, 'f' floating, 'c' complex, '?' anything else."""
    if isinstance(a, np.ndarray):
        k = a.dtype.kind
        return {"u": "i"}.get(k, k) if k in "biufc" else "?"
    import torch

    if a.dtype == torch.bool:
        return "b"
    if a.dtype.is_complex:
        return "c"
    if a.dtype.is_floating_point:
        return "f" if _widens(a.dtype) else "?"  # (packed float4 has no arithmetic, no cast)
    try:
        torch.iinfo(a.dtype)
    except TypeError:
        return "?"
    return "i"


@functools.cache
def _widens(dtype: Any) -> bool:
    """Whether torch can cast this floating dtype to float32."""
    import torch

    try:
        torch.zeros(1, dtype=dtype).to(torch.float32)
    except (RuntimeError, NotImplementedError, TypeError):
        return False
    return True


def tensor_stats(value: Any, *, bins: int = BINS) -> TensorStats:
    """Statistics of a torch tensor or numpy array (two passes over its values, a block at a time)."""
    a, library, strides, offset, contiguous = _as_numpy_view(value)
    numel = _numel(a)
    out = TensorStats(library, _dtype_name(a, library), [int(s) for s in a.shape], strides, offset, numel, contiguous)
    kind = _kind(a)
    if library == "torch" and a.device.type == "meta":
        out.computed, out.note = False, "a tensor on the meta device has no values"
        return out
    if kind in "c?":
        out.computed, out.note = False, f"no statistics for {out.dtype} values"
        return out
    if numel == 0:
        out.computed, out.note = False, "the tensor is empty"
        return out
    found = _distinct(a)
    if found is None:
        out.computed, out.note = False, "a view that repeats its storage's values (overlapping strides)"
        return out
    small, repeat = found
    if repeat > 1:
        out.note = f"a broadcast view: each stored value repeats {repeat:,} times"
    if kind == "b":
        true = sum(int(_floats(b).sum()) for b in _blocks(small)) * repeat
        out.true, out.zeros = true, numel - true
        out.min, out.max = (0.0 if true < numel else 1.0), (1.0 if true else 0.0)
        out.mean = true / numel
        out.histogram = Histogram([0.0, 0.5, 1.0], [numel - true, true])
        return out
    _summarise(out, small, repeat, bins)
    return out


def _summarise(out: TensorStats, small: Any, repeat: int, bins: int) -> None:
    """Two passes: counts, sum, min and max; then squares around the mean and the histogram (uniform
    bins over [min, max], numpy's fast path). A block without NaN or Inf is not copied to filter it."""
    count, total = 0, 0.0
    low, high = math.inf, -math.inf
    nan = posinf = neginf = zeros = 0
    for b in _blocks(small):
        x = _floats(b)
        finite = np.isfinite(x)
        n = int(np.count_nonzero(finite))
        if n < x.size:
            nan += int(np.count_nonzero(np.isnan(x)))
            posinf += int(np.count_nonzero(np.isposinf(x)))
            f = x[finite]
        else:
            f = x
        zeros += int(np.count_nonzero(f == 0))
        if n:
            count += n
            total += float(f.sum())
            low, high = min(low, float(f.min())), max(high, float(f.max()))
        neginf += x.size - n
    neginf -= nan + posinf
    out.nan, out.posinf, out.neginf, out.zeros = nan * repeat, posinf * repeat, neginf * repeat, zeros * repeat
    if not count:
        out.note = (out.note + "; " if out.note else "") + "no finite values"
        return
    mean = total / count
    squares = 0.0
    span = (low, high) if high > low else (low - 0.5, low + 0.5)
    nbins = (bins if high > low else 1) if bins else 0  # (bins=0: no histogram)
    counts = np.zeros(nbins, dtype=np.int64)
    for b in _blocks(small):
        f = _floats(b)
        if not np.isfinite(f).all():
            f = f[np.isfinite(f)]
        d = f - mean
        squares += float(np.dot(d, d))
        if nbins:
            counts += np.histogram(f, bins=nbins, range=span)[0]
    out.min, out.max, out.mean = low, high, mean
    out.std = math.sqrt(squares / count)
    if nbins:
        edges = np.linspace(span[0], span[1], nbins + 1)
        out.histogram = Histogram([float(e) for e in edges], [int(c) * repeat for c in counts])


def heat_map(value: Any, *, side: int = HEAT_SIDE) -> HeatMap | None:
    """The first 2-D slice (leading indices 0) of a tensor with 2 or more dimensions, every k-th row
    and column so at most `side` of each remain; None for fewer dimensions or values without numbers."""
    a, library, _, _, _ = _as_numpy_view(value)
    if a.ndim < 2 or _kind(a) in "c?" or _numel(a) == 0 or (library == "torch" and a.device.type == "meta"):
        return None
    lead = [0] * (a.ndim - 2)
    plane = a[tuple(lead)] if lead else a
    rows, cols = int(plane.shape[0]), int(plane.shape[1])
    rs, cs = max(1, math.ceil(rows / side)), max(1, math.ceil(cols / side))
    sample = _floats(plane[::rs, ::cs]).reshape(len(range(0, rows, rs)), len(range(0, cols, cs)))
    values = [[float(v) if math.isfinite(v) else None for v in row] for row in sample]
    return HeatMap(lead, rows, cols, rs, cs, values)


__all__ = ["BINS", "HEAT_SIDE", "HeatMap", "Histogram", "TensorStats", "heat_map", "is_array", "tensor_stats"]
