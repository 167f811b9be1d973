"""Reading a tensor node into memory the caller already has (LazyArchive.load_into), as the hostile
tests and the fuzzer do for every tensor node they meet: only ZArchiveErrors may come out."""

from __future__ import annotations

import math
from typing import Any

import torch

import zarchive
from zarchive.handlers.torch_types import DTYPES

MAX_ELEMENTS = 1 << 24  # (a node may declare any shape: what it declares is not allocated past this)


def fill_declared(arc: Any, path: str) -> None:
    """If the node at `path` is a tensor node declaring a dtype and shape torch can allocate, read it
    into a new tensor of that dtype and shape, and into a non-contiguous one (the copying path)."""
    node = arc.node(path)
    if not (isinstance(node, dict) and node.get("$type") == "torch.Tensor"):
        return
    dtype, shape = DTYPES.get(str(node.get("dtype"))), node.get("shape")
    if dtype is None or not isinstance(shape, list) or not all(type(s) is int and 0 <= s < 1 << 31 for s in shape):
        return
    if math.prod(shape) > MAX_ELEMENTS:
        return
    for out in (torch.empty(shape, dtype=dtype), torch.empty([*shape, 2], dtype=dtype)[..., 0]):
        try:
            arc.load_into(path, out)
        except zarchive.ZArchiveError:
            pass
