"""torch dtypes and devices: their names in the manifest, their safetensors codes, device mapping."""

from __future__ import annotations

from typing import Any

import torch

from ..engine.context import LoadContext, Node, SaveContext
from ..errors import FormatError
from ..nodes.arrays import SAFETENSORS_CODES, TorchDeviceSchema, TorchDtypeSchema, TorchSizeSchema, size_problem
from .base import Handler, expect

# every dtype this torch has, by its name ("float32", "bfloat16", ...)
DTYPES: dict[str, torch.dtype] = {
    str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.dtype)
}

# torch dtype -> (safetensors code, stored as raw bytes?). Dtypes safetensors has no code for are
# stored as U8 bytes; the manifest's "dtype" says how to view them.
ST_CODE: dict[torch.dtype, tuple[str, bool]] = {
    DTYPES[n]: (code, False) for n, code in SAFETENSORS_CODES.items() if n in DTYPES
}
ST_TORCH: dict[str, torch.dtype] = {code: DTYPES[n] for n, code in SAFETENSORS_CODES.items() if n in DTYPES}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: Any, ctx: LoadContext) -> torch.dtype:
    dtype = DTYPES.get(name) if isinstance(name, str) else None
    if dtype is None:
        raise ctx.error(f"unknown torch dtype {str(name)[:40]!r}")
    return dtype


def _as_device(value: Any, ctx: LoadContext) -> torch.device:
    try:
        return torch.device(value)
    except (RuntimeError, TypeError) as e:
        raise FormatError(f"bad device {str(value)[:40]!r}: {e}", path=ctx.path_str) from None


def place(saved: Any, ctx: LoadContext) -> torch.device | None:
    """Where a tensor saved on device `saved` goes, per the read's map_location.

    None (the default): CPU. "saved": the recorded device. A device or string: that device.
    A dict: the recorded device mapped by it (unmapped ones stay where they were recorded).
    """
    loc = ctx.map_location
    if loc is None:
        return None
    if isinstance(loc, dict):
        mapped = loc.get(saved, loc.get(str(saved).split(":")[0], saved))
        return _as_device(mapped, ctx)
    if loc == "saved":
        return _as_device(saved, ctx)
    return _as_device(loc, ctx)


class TorchDeviceHandler(TorchDeviceSchema, Handler):
    name = "torch.device"

    def accepts(self, cls: type) -> bool:
        return cls is torch.device

    def save(self, obj: torch.device, ctx: SaveContext) -> Node:
        return {"$type": self.name, "value": str(obj)}

    def load(self, node: dict[str, Any], ctx: LoadContext) -> torch.device:
        return _as_device(expect(node, "value", str, ctx)[:64], ctx)


class TorchDtypeHandler(TorchDtypeSchema, Handler):
    name = "torch.dtype"

    def accepts(self, cls: type) -> bool:
        return cls is torch.dtype

    def save(self, obj: torch.dtype, ctx: SaveContext) -> Node:
        return {"$type": self.name, "value": dtype_name(obj)}

    def load(self, node: dict[str, Any], ctx: LoadContext) -> torch.dtype:
        return dtype_from_name(node.get("value"), ctx)


class TorchSizeHandler(TorchSizeSchema, Handler):
    name = "torch.Size"

    def accepts(self, cls: type) -> bool:
        return cls is torch.Size

    def save(self, obj: torch.Size, ctx: SaveContext) -> Node:
        return {"$type": self.name, "items": list(obj)}

    def load(self, node: dict[str, Any], ctx: LoadContext) -> torch.Size:
        items = expect(node, "items", list, ctx)
        if not all(type(i) is int for i in items):
            raise ctx.error("torch.Size items must be ints")
        problem = size_problem(items)
        if problem:
            raise ctx.error(problem)
        return torch.Size(items)
