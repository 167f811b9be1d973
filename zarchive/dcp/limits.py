"""The gates a sharded checkpoint's reads pass (no torch): one budget for the whole directory, the
files it opens checked to be regular files, and each stored chunk used by one region of one tensor.

- `directory_budget`: the ReadBudget of the checkpoint (`max_read_bytes`, by default from the size of
  the index and every shard together); the JSON parsed to open the index and each shard is charged
  to it, and each shard is opened with what is left as its own limit, so nothing read from any file
  of the directory goes past it.
- `read_bytes`: what assembling the tensors under a node allocates, from the index's declared shapes
  (overflow-safe), checked against the budget before anything is allocated.
- `StorageClaims`: the stored bytes each chunk's node names (its shard, member and entry), claimed
  by one chunk only: an index, or a shard, that names one stored chunk for several regions would
  assemble a tensor of any size from a few bytes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ..container.budget import ReadBudget, shape_nbytes
from ..container.open_gate import NotARegularFileError, regular_file
from ..errors import FormatError, MemberNotFoundError
from ..nodes.arrays import TORCH_ITEMSIZE
from .index import INDEX_NAME, Chunk, Index, TensorEntry

__all__ = ["StorageClaims", "check_file", "directory_budget", "read_bytes"]


def check_file(directory: str, name: str, *, what: str) -> str:
    """The path of file `name` in the checkpoint, if it is a regular file (a stat, which never blocks:
    a FIFO named like a shard is refused, not opened); MemberNotFoundError if there is none."""
    path = os.path.join(directory, name)
    if not os.path.lexists(path):
        raise MemberNotFoundError(
            f"{what} {name!r} is missing from {directory!r}: the checkpoint is incomplete", member=name
        )
    if not regular_file(path):
        raise NotARegularFileError(
            f"{what} {name!r} in {directory!r} is not a regular file (a FIFO, a socket, a device or a "
            "directory): zarchive reads regular files only"
        )
    return path


def directory_budget(max_read_bytes: int | None, index: Index, index_size: int) -> ReadBudget:
    """The budget of every read from the checkpoint (the shards' sizes as the index records them,
    each checked against the file before it is opened)."""
    return ReadBudget(max_read_bytes, index_size + sum(info["size"] for info in index.shards.values()))


def tensor_bytes(entry: TensorEntry, dtype: Any = None) -> int:
    """What assembling `entry` allocates: the tensor of its declared shape, plus its cast to `dtype`
    (a floating-point torch dtype, or None)."""
    n = shape_nbytes(entry.shape, TORCH_ITEMSIZE[entry.dtype], what="the tensor's shape", member=INDEX_NAME,
                     path=entry.fqn)  # fmt: skip
    itemsize = getattr(dtype, "itemsize", None)
    if isinstance(itemsize, int) and entry.dtype.startswith(("float", "bfloat")):  # (assemble casts these only)
        n += n // TORCH_ITEMSIZE[entry.dtype] * itemsize
    return n


def chunk_bytes(entry: TensorEntry, chunk: Chunk) -> int:
    return shape_nbytes(chunk.sizes, TORCH_ITEMSIZE[entry.dtype], what="a chunk's sizes", member=INDEX_NAME,
                        path=entry.fqn)  # fmt: skip


def read_bytes(entries: Iterable[TensorEntry], dtype: Any = None) -> int:
    """What assembling these tensors allocates at most at once: all of them, and the biggest chunk read
    from a shard on its way into its place."""
    total, biggest = 0, 0
    for e in entries:
        total += tensor_bytes(e, dtype)
        biggest = max([biggest, *(chunk_bytes(e, c) for c in e.chunks)])
    return total + biggest


class StorageClaims:
    """Which chunk uses which stored bytes: a chunk's node in its shard names its stored bytes by the
    shard, its member (`$ref`) and its entry in that member (`key`); two chunks naming the same are
    refused (FormatError naming the shard and both chunks)."""

    def __init__(self) -> None:
        self._owner: dict[tuple[str, str, str], tuple[str, tuple[int, ...]]] = {}

    def claim(self, shard: str, node: Any, entry: TensorEntry, chunk: Chunk) -> None:
        if not isinstance(node, dict) or "$ref" not in node:
            return  # data inline in the node: its own
        stored = (shard, str(node["$ref"])[:4096], str(node.get("key"))[:4096])
        me = (entry.fqn, chunk.offsets)
        first = self._owner.setdefault(stored, me)
        if first != me:
            raise FormatError(
                f"shard {shard!r} stores the chunk of {first[0][:200]!r} at {list(first[1])} and that of "
                f"{entry.fqn[:200]!r} at {list(chunk.offsets)} in the same bytes ({stored[1][:200]!r}, "
                f"{stored[2][:200]!r}): each stored chunk is one region of one tensor; the checkpoint is damaged "
                "or was not written by zarchive",
                member=shard,
            )
