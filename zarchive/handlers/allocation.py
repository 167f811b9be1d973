"""What phase two of a read builds beyond its plan, charged to the open file's budget before it is
built: dtype casts (`read(dtype=...)`), views made dense, inline values whose size comes from a
declared item size.

The plan (plan.Plan.nbytes) counts what a read decodes and reads from the file. What a load then
makes from those bytes is counted here, against the same budget (container.budget.ReadBudget): a
1.5 KB `.pt` whose tensor views four bytes with a zero stride over 2**28 elements is read as that
view (four bytes), but cast to float64 it would be 2 GiB. Casts keep a view's strides where that is
cheaper: only the elements of its storage it can reach are cast (four bytes, then viewed again).

torch is imported only by the torch functions (tensor_numpy reads without torch).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..container.budget import ReadBudget

if TYPE_CHECKING:
    from ..engine.context import LoadContext

__all__ = ["affordable", "allocating", "cast_array", "cast_tensor", "reach"]


def _budget(ctx: LoadContext) -> ReadBudget:
    budget = getattr(ctx.reader, "budget", None)
    if isinstance(budget, ReadBudget):
        return budget
    return ctx.state(  # type: ignore[no-any-return]
        "read.budget", lambda: ReadBudget(ctx.policy.max_read_bytes, ctx.reader.source.size)
    )


def allocating(ctx: LoadContext, cost: int, what: str, *, member: str | None = None) -> None:
    """Refuse, before it is allocated, `cost` bytes that this load builds beyond its plan (an
    UnsafeArchiveError naming the member and object path), else count them: they must fit beside
    what the read planned, what it built before, and the JSON the open file parsed."""
    budget = _budget(ctx)
    built: list[int] = ctx.state("read.built", lambda: [ctx.plan.nbytes])  # (the plan, summed once a load)
    held = built[0] + budget.json_bytes
    if held + cost > budget.limit:
        raise budget.refusal(
            f"{what} allocates {cost:,} bytes ({held + cost:,} with what the read holds)",
            member=member,
            path=ctx.path_str,
        )
    built[0] += cost


def affordable(ctx: LoadContext, cost: int) -> bool:
    """Whether `cost` bytes more than this load holds would pass `allocating` (nothing is charged): for a
    load that can build the same value two ways, the faster one taking more memory."""
    built: list[int] = ctx.state("read.built", lambda: [ctx.plan.nbytes])
    return built[0] + _budget(ctx).json_bytes + cost <= _budget(ctx).limit


def reach(shape: tuple[int, ...] | list[int], stride: tuple[int, ...] | list[int]) -> int:
    """How many elements of its storage (from its first one) a view with non-negative strides can
    reach: 0 when it is empty, 1 for any shape with all-zero strides."""
    if math.prod(shape) == 0:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, stride))


def cast_tensor(t: Any, dtype: Any, ctx: LoadContext, *, member: str | None = None) -> Any:
    """`t.to(dtype)`, charged first; a view that repeats elements of its storage (zero or overlapping
    strides) is cast over the storage elements it reaches, then viewed with its own strides again,
    so a broadcast tensor stays as small as it was in the file."""
    import torch

    dtype = _torch_dtype(dtype)
    if t.dtype == dtype:
        return t
    itemsize = torch.empty((), dtype=dtype).element_size()
    shape, stride = tuple(t.shape), t.stride()
    span = reach(shape, stride) if all(s >= 0 for s in stride) else t.numel()
    if span >= t.numel():
        allocating(ctx, t.numel() * itemsize, f"casting a tensor of shape {list(shape)[:8]} to {dtype}", member=member)
        return t.to(dtype)
    allocating(ctx, span * itemsize, f"casting the {span:,} stored elements of a view to {dtype}", member=member)
    region = t.as_strided((span,), (1,), t.storage_offset()).to(dtype)
    return region.as_strided(shape, stride, 0)


def _torch_dtype(dtype: Any) -> Any:
    """A read's `dtype=` as a torch.dtype: a torch.dtype, or the name of one ("float16",
    "torch.bfloat16") or a numpy dtype of the same name; a TypeError for anything else."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    name = dtype if isinstance(dtype, str) else getattr(np.dtype(dtype), "name", "") if dtype is not None else ""
    found = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(found, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype or a dtype name, not {str(dtype)[:60]!r}")
    return found


def cast_array(arr: np.ndarray, target: np.dtype[Any], ctx: LoadContext, *, member: str | None = None) -> np.ndarray:
    """`arr.astype(target)`, charged first; a view that repeats elements (zero or overlapping
    strides) is cast over the elements it reaches and viewed again with its strides (see cast_tensor)."""
    itemsize = arr.dtype.itemsize
    elems = [s // itemsize for s in arr.strides] if itemsize else []
    regular = bool(itemsize) and all(s >= 0 and s % itemsize == 0 for s in arr.strides)
    span = reach(arr.shape, elems) if regular else arr.size
    if span >= arr.size:
        allocating(ctx, arr.size * target.itemsize, f"casting an array of shape {list(arr.shape)[:8]} to {target}",
                   member=member)  # fmt: skip
        return arr.astype(target)
    allocating(
        ctx, span * target.itemsize, f"casting the {span:,} stored elements of a view to {target}", member=member
    )
    region = np.lib.stride_tricks.as_strided(arr, shape=(span,), strides=(itemsize,)).astype(target)
    strides = tuple(e * target.itemsize for e in elems)
    return np.lib.stride_tricks.as_strided(region, shape=arr.shape, strides=strides, writeable=False)
