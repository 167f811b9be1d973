"""A whole tensor of a sharded checkpoint, put together from its chunks (imports torch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..errors import FormatError, UnsafeArchiveError, UnsupportedDtypeError, ZArchiveError
from ..handlers.torch_types import DTYPES
from .index import Chunk, TensorEntry


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype an index names (checked against the names zarchive knows by index.parse)."""
    dtype = DTYPES.get(name)
    if dtype is None:
        raise UnsupportedDtypeError(f"this torch ({torch.__version__}) has no dtype {name!r}: upgrade torch")
    return dtype


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def region(offsets: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(o, o + s) for o, s in zip(offsets, sizes, strict=True))


def assemble(
    entry: TensorEntry,
    read_chunk: Callable[[TensorEntry, Chunk], torch.Tensor],
    *,
    map_location: Any = None,
    dtype: Any = None,
) -> torch.Tensor:
    """The tensor `entry` describes: every chunk read (only its bytes) and copied to its place. (The
    caller has checked its size against the read's budget; the allocator failing anyway, under a
    memory limit, is an UnsafeArchiveError, not torch's RuntimeError.)"""
    try:
        out = torch.empty(entry.shape, dtype=torch_dtype(entry.dtype))
        for chunk in entry.chunks:
            if 0 in chunk.sizes:
                continue
            out[region(chunk.offsets, chunk.sizes)] = read_chunk(entry, chunk)
        if dtype is not None and out.is_floating_point():
            out = out.to(dtype)
    except (RuntimeError, MemoryError) as e:
        if isinstance(e, ZArchiveError) or "alloc" not in str(e).lower() and not isinstance(e, MemoryError):
            raise
        raise UnsafeArchiveError(
            f"not enough memory to assemble the tensor {entry.fqn!r} ({list(entry.shape)} {entry.dtype})",
            path=entry.fqn,
        ) from None
    if map_location not in (None, "saved"):
        out = out.to(map_location)
    return out


def checked(entry: TensorEntry, chunk: Chunk, value: Any) -> torch.Tensor:
    """The value a shard stores for a chunk, if it is a tensor of the dtype and size the index says."""
    if (
        not isinstance(value, torch.Tensor)
        or dtype_name(value.dtype) != entry.dtype
        or tuple(value.shape) != chunk.sizes
    ):
        raise FormatError(
            f"the chunk of {entry.fqn!r} at {list(chunk.offsets)} in shard {chunk.shard!r} is not a "
            f"{entry.dtype} tensor of shape {list(chunk.sizes)} as the index says",
            member=chunk.shard,
        )
    return value
