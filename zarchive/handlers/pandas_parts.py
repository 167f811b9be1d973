"""The parts of a pandas node, loaded and checked on reading: a column's values, and an array's data,
codes or mask as a 1-D numpy array of the expected length and kind, with errors that name the part
(its child key in the object path).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.extensions import ExtensionArray

from ..engine.context import LoadContext, Node

NUMPY_KINDS = frozenset("biufcmMO")


@contextmanager
def at_child(ctx: LoadContext, key: str | None) -> Iterator[None]:
    """Errors raised inside name the child `key` of the current path."""
    if key is not None:
        ctx.path.append(key)
    try:
        yield
    finally:
        if key is not None:
            ctx.path.pop()


def load_values(node: Node, ctx: LoadContext, length: int, key: str | None = None) -> Any:
    """A column's values (1-D ndarray or pandas array of `length` items) from its node."""
    with at_child(ctx, key):
        values = ctx.load(node)
        if isinstance(values, np.ndarray):
            if values.ndim != 1 or values.dtype.kind not in NUMPY_KINDS:
                raise ctx.error(
                    f"column data must be a 1-D array of a supported dtype, not {values.dtype}{list(values.shape)}"
                )
        elif type(values) is pd.arrays.NumpyExtensionArray:  # exact: StringArray subclasses it
            values = values.to_numpy()
        elif not isinstance(values, ExtensionArray):
            raise ctx.error(f"column data must be an array, not {type(values).__name__}")
        if len(values) != length:
            raise ctx.error(f"column data has {len(values)} values, {length} expected")
    return values


def array_part(
    node: Node, ctx: LoadContext, key: str | None, length: int, kind: str | None = None, label: str = "data"
) -> np.ndarray:
    """The 1-D numpy array of `length` items that `node` (the child `key`, or unnamed: `label` in
    messages) holds, of a dtype kind in `kind` when given."""
    with at_child(ctx, key):
        arr = ctx.load(node)
        if not isinstance(arr, np.ndarray) or arr.ndim != 1 or len(arr) != length:
            raise ctx.error(f"{key or label} must be a 1-D numpy array of {length} values")
        if kind is not None and arr.dtype.kind not in kind:
            raise ctx.error(f"{key or label} has dtype {arr.dtype}, expected kind {kind!r}")
    return arr


def mask_part(node: dict[str, Any], ctx: LoadContext, length: int) -> np.ndarray | None:
    """The node's boolean "mask" of missing positions, or None where it has none."""
    if "mask" not in node:
        return None
    return array_part(node["mask"], ctx, "mask", length, "b")
