"""torch tensors and parameters, stored in `.safetensors` members: the handler's nodes, and reading
them back (whole, as views of a shared storage, onto a device, or into a tensor the caller has).
How a save lays its tensors out into members is torch_members'. Reading maps uncompressed data from
the file without copying where the read asks for it (mmap=True).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..container.npy import check_shape
from ..container.safetensors_layout import TensorSlot
from ..container.shapes import shape_problem
from ..engine.context import LoadContext, Node, SaveContext
from ..errors import DeviceError, FormatError
from ..nodes.arrays import TensorSchema
from .allocation import cast_tensor
from .base import Handler
from .tensor_slots import Stored, find_slot
from .torch_device import fill_on_device, uses_pinned_path
from .torch_members import TensorTable
from .torch_types import ST_CODE, ST_TORCH, dtype_from_name, dtype_name, place


class TensorHandler(TensorSchema, Handler):
    name = "torch.Tensor"

    def accepts(self, cls: type) -> bool:
        return issubclass(cls, torch.Tensor)

    def save(self, t: torch.Tensor, ctx: SaveContext) -> Node:
        if t.layout != torch.strided:
            raise ctx.error(f"{t.layout} tensors cannot be saved; convert with .to_dense()")
        if t.is_quantized or t.is_nested:
            raise ctx.error("quantized and nested tensors cannot be saved")
        device = t.device  # (this runs once per tensor: each attribute read here costs a torch call)
        if device.type == "meta":
            raise ctx.error("meta tensors have no data to save")
        shape = t.shape
        if len(shape) > 8 or t.numel() > 1 << 40:  # (the exact test only where it could fail)
            problem = shape_problem(tuple(shape))
            if problem is not None:
                text = str(list(shape))
                raise ctx.error(
                    f"a tensor of shape {text[:77] + '...' if len(text) > 80 else text} cannot be saved: {problem}"
                )
        node: dict[str, Any] = {
            "$type": self.name,
            "$ref": None,
            "key": None,
            "dtype": dtype_name(t.dtype),
            "shape": list(shape),
            "device": str(device),
        }
        if type(t) is not torch.Tensor and isinstance(t, torch.nn.Parameter):  # (a slow isinstance)
            node["parameter"] = True
        if t.requires_grad:
            node["requires_grad"] = True
        if t.is_conj() or t.is_neg():  # lazy conjugate/negative views: store the values they show
            t = t.resolve_conj().resolve_neg()
        ctx.state("torch.tensors", lambda: TensorTable(ctx)).add(t, node)
        return node

    def load(self, node: dict[str, Any], ctx: LoadContext) -> torch.Tensor:
        # This runs once per tensor (5,000 times for a 5,000-tensor state dict): keep it lean.
        dtype = dtype_from_name(node.get("dtype"), ctx)
        shape = check_shape(node.get("shape"))
        view = node.get("view")
        parameter, requires_grad = node.get("parameter") is True, node.get("requires_grad") is True
        memo: dict[tuple[Any, ...], torch.Tensor] = ctx.state("torch.memo", dict)
        memo_key = (
            node.get("$ref"),
            node.get("key"),
            None if view is None else repr(view),
            dtype,
            shape,
            parameter,
            requires_grad,
        )
        t = memo.get(memo_key)
        if t is not None:
            return t
        saved_device = node.get("device", "cpu")
        device = None if ctx.map_location is None else place(saved_device, ctx)
        if device is not None and device.type == "meta":
            t = torch.empty(shape, dtype=dtype, device="meta")
        else:
            t = self._read(node, dtype, shape, view, ctx, device)
            if device is not None and t.device != device:
                t = _to_device(t, device, node, ctx)
        if ctx.dtype is not None and t.is_floating_point():
            t = cast_tensor(t, ctx.dtype, ctx, member=node.get("$ref"))
        if parameter:
            t = torch.nn.Parameter(t, requires_grad=requires_grad)
        elif requires_grad and (t.is_floating_point() or t.is_complex()):
            t.requires_grad_(True)
        memo[memo_key] = t
        return t

    def load_into(self, node: dict[str, Any], ctx: LoadContext, out: Any) -> bool:
        """Read the stored bytes straight into `out` where it is a contiguous CPU tensor of the
        node's dtype and shape (on a CUDA device: through pinned host memory, torch_device), and the
        node is a whole stored tensor (not a view of a shared storage) read without map_location or
        dtype."""
        on_gpu = isinstance(out, torch.Tensor) and uses_pinned_path(out.device)
        if (
            not isinstance(out, torch.Tensor)
            or (out.device.type != "cpu" and not on_gpu)
            or not out.is_contiguous()
            or "view" in node
            or ctx.map_location is not None
            or ctx.dtype is not None
        ):
            return False
        dtype = dtype_from_name(node.get("dtype"), ctx)
        shape = check_shape(node.get("shape"))
        if out.dtype != dtype or tuple(out.shape) != shape:
            return False
        name, key = node.get("$ref"), node.get("key")
        if not isinstance(key, str) or not isinstance(name, str):
            return False  # (load() names what is wrong)
        slot = find_slot(name, key, _stored(dtype, shape), ctx)
        _check_slot(slot, dtype, shape, name, key, ctx)
        if slot.end - slot.begin != out.numel() * out.element_size():
            raise FormatError(f"the member's slot of {key!r} has the wrong size", member=name, path=ctx.path_str)
        flat = out.detach().view(-1).view(torch.uint8)
        if on_gpu:
            fill_on_device(flat, lambda buf: ctx.member_range_into(name, slot.begin, slot.key, buf))
        elif out.numel():
            ctx.member_range_into(name, slot.begin, slot.key, flat.numpy().data)
        return True

    def _read(
        self,
        node: dict[str, Any],
        dtype: torch.dtype,
        shape: tuple[int, ...],
        view: Any,
        ctx: LoadContext,
        device: torch.device | None = None,
    ) -> torch.Tensor:
        name, key = node.get("$ref"), node.get("key")
        if not isinstance(key, str):
            raise ctx.error("tensor node lacks its 'key' in the member")
        if not isinstance(name, str):
            raise ctx.error("'$ref' must be a member name")
        slot = find_slot(name, key, _stored(dtype, shape) if view is None else ("U8", None), ctx)
        base = _slot_tensor(name, slot, ctx)
        if device is not None and base.device != device:
            # move the stored bytes once, then view them there, so that views still share memory
            moved: dict[tuple[str, str, str], torch.Tensor] = ctx.state("torch.moved", dict)
            where = (name, key, str(device))
            if where not in moved:
                moved[where] = _to_device(base, device, node, ctx)
            base = moved[where]
        if view is None:
            raw = _check_slot(slot, dtype, shape, name, key, ctx)
            return base.view(dtype).view(shape) if raw else base  # (base already has the slot's shape)
        if not isinstance(view, dict) or slot.dtype != "U8":
            raise ctx.error("bad tensor view")
        offset, stride = view.get("storage_offset"), view.get("stride")
        if type(offset) is not int or not isinstance(stride, list) or len(stride) != len(shape):
            raise ctx.error("bad tensor view")
        if base.numel() % dtype.itemsize:
            raise ctx.error("shared storage size is not a multiple of the element size")
        try:
            return base.view(dtype).as_strided(shape, stride, offset)
        except RuntimeError as e:
            raise ctx.error(f"tensor view outside its storage: {e}") from None


def _stored(dtype: torch.dtype, shape: tuple[int, ...]) -> Stored:
    """What the member stores for a whole tensor of this dtype and shape: its safetensors code and
    shape, or U8 bytes for dtypes safetensors has no code for."""
    st_code, raw = ST_CODE.get(dtype, ("U8", True))
    return (st_code, (math.prod(shape) * dtype.itemsize,) if raw else shape)


def _check_slot(
    slot: TensorSlot, dtype: torch.dtype, shape: tuple[int, ...], name: str, key: str, ctx: LoadContext
) -> bool:
    """Check that the member's slot holds the manifest's whole tensor; whether it is stored as raw
    bytes (U8: dtypes safetensors has no code for) rather than in its own dtype."""
    st_code, raw = ST_CODE.get(dtype, ("U8", True))
    nbytes = math.prod(shape) * dtype.itemsize
    if slot.dtype != st_code or (not raw and slot.shape != shape) or (raw and slot.shape != (nbytes,)):
        raise FormatError(
            f"the member stores {key!r} as {slot.dtype}{list(slot.shape)}, the manifest says "
            f"{dtype_name(dtype)}{list(shape)}",
            member=name,
            path=ctx.path_str,
        )
    return raw


def _to_device(t: torch.Tensor, device: torch.device, node: dict[str, Any], ctx: LoadContext) -> torch.Tensor:
    try:
        return t.to(device)
    except (RuntimeError, AssertionError) as e:  # AssertionError: "Torch not compiled with CUDA enabled"
        raise DeviceError(
            f"cannot place a tensor saved on {node.get('device', 'cpu')!r} on {device}: {e}; pass map_location "
            "(e.g. 'cpu' or {'cuda:0': 'cpu'})",
            path=ctx.path_str,
        ) from None


def _slot_tensor(name: str, slot: TensorSlot, ctx: LoadContext) -> torch.Tensor:
    """The slot's bytes as a flat tensor of its stored dtype, over the mapped file where possible."""
    data = ctx.member_range(name, slot.begin, slot.end, slot.key)
    st_dtype = ST_TORCH[slot.dtype]
    if data.nbytes == 0:
        return torch.empty(slot.shape, dtype=st_dtype)
    flat = torch.frombuffer(data, dtype=st_dtype)  # ctx.member_range gives writable bytes: no warning
    return flat if len(slot.shape) == 1 else flat.view(slot.shape)
