"""The node types of a foreign file's object tree, and their handlers.

A foreign file's values become a manifest in zarchive's own vocabulary (dicts, tuples, sets, big ints,
`torch.dtype` / `torch.device` / `torch.Size` nodes, written by the built-in handlers) plus two node
types of this package, each pointing at a member of foreign.reader:

- "foreign.tensor": {"$ref", "dtype" (torch name), "shape", "stride", "offset" (elements), "begin",
  "end" (the bytes of the member it reads), "shared" (its storage has other tensors: read the whole
  storage once per load so they share memory), "device", optional "parameter", "requires_grad"}.
- "foreign.ndarray": {"$ref", "dtype" (numpy text), "shape", "fortran"}, an .npy array.

`ForeignValues` saves the placeholders (foreign.torch_pickle, foreign.formats) into those nodes; it
exists only to translate a file's tree, never for a user's save. Planning checks every node against
its member (a tensor's bytes must lie inside it), so a read is refused before anything is built.
torch is imported only to build a tensor, and not at all with tensors="numpy".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ...container import npy
from ...container.shapes import check_shape
from ...errors import FormatError
from ...handlers.base import Handler
from ...nodes.arrays import TORCH_ITEMSIZE
from ...nodes.base import PlanSink
from .formats import ArrayRef
from .reader import ForeignReader
from .torch_pickle import DeviceRef, DtypeRef, SizeRef, TensorRef

if TYPE_CHECKING:
    from ...engine.context import LoadContext, Node, SaveContext

TENSOR_TAG = "foreign.tensor"
ARRAY_TAG = "foreign.ndarray"


def _reader(ctx: LoadContext) -> ForeignReader:
    reader = ctx.reader
    if not isinstance(reader, ForeignReader):
        raise ctx.error(f"a {TENSOR_TAG!r} node in a {type(reader).__name__} file")
    return reader


def _range(ctx: LoadContext, name: str, begin: int, end: int) -> memoryview:
    """Bytes of a member for this load: zero-copy from a copy-on-write mapping of its own where the
    file is mapped, else read into new memory."""
    reader = _reader(ctx)
    source: Any = reader.source
    mapping = None
    if source.mapped and hasattr(source, "private_copy") and reader.regions[name].offset is not None:
        mapping = ctx.state("foreign.mapping", source.private_copy)
    return reader.read_range(name, begin, end, path=ctx.path_str, mapping=mapping)


def extent(shape: list[int], stride: list[int], offset: int, itemsize: int) -> tuple[int, int]:
    """The bytes [begin, end) of its storage that a strided view reads ((0, 0) when empty)."""
    if math.prod(shape) == 0:
        return (0, 0)
    last = offset + sum((n - 1) * s for n, s in zip(shape, stride))
    return (offset * itemsize, (last + 1) * itemsize)


class ForeignTensorHandler(Handler):
    name = TENSOR_TAG
    tensor = True  # reads as one tensor: the weights hash and tools that collect weights fetch it

    def accepts(self, cls: type) -> bool:
        return False

    def save(self, obj: Any, ctx: SaveContext) -> Node:
        raise ctx.error(f"{self.name!r} nodes are read from foreign files, never written")

    # --- planning ---
    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        shape = list(check_shape(node.get("shape"), path=p.path_str))
        stride, offset, dtype = node.get("stride"), node.get("offset"), node.get("dtype")
        if dtype not in TORCH_ITEMSIZE:
            raise p.error(f"unknown torch dtype {str(dtype)[:40]!r}")
        if not (
            isinstance(stride, list) and len(stride) == len(shape) and all(type(s) is int and s >= 0 for s in stride)
        ):
            raise p.error("a tensor's 'stride' must be one int >= 0 per dimension")
        if type(offset) is not int or offset < 0 or not isinstance(node.get("device", "cpu"), str):
            raise p.error("a tensor's 'offset' must be an int >= 0, its 'device' a string")
        span = extent(shape, stride, offset, TORCH_ITEMSIZE[dtype])
        if (node.get("begin"), node.get("end")) != span:
            raise p.error(f"the tensor reads bytes {list(span)}, its node says {[node.get('begin'), node.get('end')]}")
        entry = p.member(node.get("$ref"))
        if span[1] > entry["size"]:
            raise p.error(f"the tensor reads bytes up to {span[1]:,} of a member of {entry['size']:,}")

    def summary(self, node: dict[str, Any]) -> str:
        kind = "parameter" if node.get("parameter") else "tensor"
        return f"{kind} {node.get('dtype')} {node.get('shape')} -> {node.get('$ref')}"

    # --- loading ---
    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        memo: dict[str, Any] = ctx.state("foreign.tensors", dict)
        key = repr(sorted(node.items()))  # the same tensor named twice in the file is one value
        found = memo.get(key)
        if found is None:
            found = memo[key] = self._numpy(node, ctx) if ctx.tensors == "numpy" else self._torch(node, ctx)
        return found

    def _bytes(self, node: dict[str, Any], ctx: LoadContext) -> tuple[memoryview, int]:
        """The bytes to view and the storage offset (in elements) within them."""
        name = node["$ref"]
        if node.get("shared") is True:
            storages: dict[str, memoryview] = ctx.state("foreign.storages", dict)
            data = storages.get(name)
            if data is None:
                size = _reader(ctx).member_entry(name, path=ctx.path_str)["size"]
                data = storages[name] = _range(ctx, name, 0, size)
            return data, node["offset"]
        return _range(ctx, name, node["begin"], node["end"]), 0

    def _numpy(self, node: dict[str, Any], ctx: LoadContext) -> np.ndarray:
        from ...handlers.allocation import cast_array
        from ...handlers.tensor_numpy import FLOATING_NAMES, cast_target, check_map_location, numpy_dtype

        check_map_location(ctx.map_location)
        dtype = numpy_dtype(node["dtype"], path=ctx.path_str)
        shape = tuple(node["shape"])
        if math.prod(shape) == 0:
            return np.empty(shape, dtype=dtype)
        data, offset = self._bytes(node, ctx)
        flat = np.frombuffer(data, dtype=np.uint8)
        flat = flat[: flat.size - flat.size % dtype.itemsize].view(dtype)
        strides = tuple(s * dtype.itemsize for s in node["stride"])
        arr = np.lib.stride_tricks.as_strided(flat[offset:], shape=shape, strides=strides)
        target = cast_target(ctx.dtype)
        if target is None or node["dtype"] not in FLOATING_NAMES or target == arr.dtype:
            return arr
        return cast_array(arr, target, ctx, member=node["$ref"])  # (a broadcast view stays one)

    def _torch(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        import torch

        from ...handlers.allocation import cast_tensor
        from ...handlers.torch_types import dtype_from_name, place

        dtype = dtype_from_name(node["dtype"], ctx)
        shape = tuple(node["shape"])
        device = place(node.get("device", "cpu"), ctx)
        if device is not None and device.type == "meta":
            t = torch.empty_strided(shape, tuple(node["stride"]), dtype=dtype, device="meta")
        elif math.prod(shape) == 0:
            t = torch.empty_strided(shape, tuple(node["stride"]), dtype=dtype)
        else:
            data, offset = self._bytes(node, ctx)
            base = torch.frombuffer(data, dtype=torch.uint8)
            itemsize = dtype.itemsize
            base = base[: base.numel() - base.numel() % itemsize]
            if base.data_ptr() % itemsize:  # a file offset not aligned to the element size
                base = base.clone()
            t = base.view(dtype).as_strided(shape, tuple(node["stride"]), offset)
        if device is not None and t.device != device:
            try:  # the storage elements the view reaches, moved, then viewed again (a broadcast stays one)
                t = _moved(t, device)
            except (RuntimeError, AssertionError) as e:
                from ...errors import DeviceError

                raise DeviceError(
                    f"cannot place a tensor saved on {node.get('device')!r} on {device}: {e}; pass map_location",
                    path=ctx.path_str,
                ) from None
        if ctx.dtype is not None and t.is_floating_point():
            t = cast_tensor(t, ctx.dtype, ctx, member=node["$ref"])
        if node.get("parameter") is True:
            return torch.nn.Parameter(t, requires_grad=node.get("requires_grad") is True)
        if node.get("requires_grad") is True and (t.is_floating_point() or t.is_complex()):
            t.requires_grad_(True)
        return t


def _moved(t: Any, device: Any) -> Any:
    """`t` on `device`: the storage elements its view reaches (from its offset), moved, and viewed
    with its strides again, so that a view repeating a few elements moves those few."""
    from ...handlers.allocation import reach

    shape, stride = tuple(t.shape), t.stride()
    span = reach(shape, stride)
    if span >= t.numel():
        return t.to(device)
    return t.as_strided((span,), (1,), t.storage_offset()).to(device).as_strided(shape, stride, 0)


class ForeignArrayHandler(Handler):
    name = ARRAY_TAG

    def accepts(self, cls: type) -> bool:
        return False

    def save(self, obj: Any, ctx: SaveContext) -> Node:
        raise ctx.error(f"{self.name!r} nodes are read from foreign files, never written")

    def _layout(self, node: dict[str, Any], path: str, member: str | None) -> tuple[np.dtype[Any], tuple[int, ...]]:
        shape = check_shape(node.get("shape"), path=path)
        text = node.get("dtype")
        if not isinstance(text, str) or not isinstance(node.get("fortran"), bool):
            raise FormatError("an array node needs its 'dtype' text and 'fortran' flag", path=path, member=member)
        dtype = npy.dtype_from_text(text, member=member, path=path)
        if dtype.kind not in npy.ALLOWED_KINDS or dtype.hasobject or dtype.fields is not None or not dtype.itemsize:
            raise FormatError(f"dtype {text[:40]!r} is not allowed", path=path, member=member)
        return dtype, tuple(shape)

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        ref = node.get("$ref")
        dtype, shape = self._layout(node, p.path_str, ref if isinstance(ref, str) else None)
        entry = p.member(ref)
        if math.prod(shape) * dtype.itemsize != entry["size"]:
            raise p.error("the array's shape and dtype do not match its member's size", member=ref)

    def summary(self, node: dict[str, Any]) -> str:
        return f"ndarray {node.get('dtype')} {node.get('shape')} -> {node.get('$ref')}"

    def load(self, node: dict[str, Any], ctx: LoadContext) -> np.ndarray:
        name = node["$ref"]
        dtype, shape = self._layout(node, ctx.path_str, name)
        size = _reader(ctx).member_entry(name, path=ctx.path_str)["size"]
        flat = np.frombuffer(_range(ctx, name, 0, size), dtype=dtype, count=math.prod(shape))
        return flat.reshape(shape[::-1]).T if node["fortran"] else flat.reshape(shape)


class ForeignValues(Handler):
    """Translates a foreign file's placeholders into nodes (the tree's only 'save')."""

    name = "foreign.values"
    _TYPES = (TensorRef, ArrayRef, DtypeRef, SizeRef, DeviceRef)

    def __init__(self, member_of: Callable[[TensorRef], str], shared: Callable[[TensorRef], bool]) -> None:
        self.member_of = member_of
        self.shared = shared

    def accepts(self, cls: type) -> bool:
        return cls in self._TYPES

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        raise ctx.error("'foreign.values' is not a node type")

    def save(self, obj: Any, ctx: SaveContext) -> Node:
        if isinstance(obj, DtypeRef):
            return {"$type": "torch.dtype", "value": obj.name}
        if isinstance(obj, SizeRef):
            return {"$type": "torch.Size", "items": list(obj.items)}
        if isinstance(obj, DeviceRef):
            return {"$type": "torch.device", "value": obj.text}
        if isinstance(obj, ArrayRef):
            return {"$type": ARRAY_TAG, "$ref": obj.member, "dtype": obj.descr, "shape": list(obj.shape),
                    "fortran": obj.fortran}  # fmt: skip
        t: TensorRef = obj
        node: dict[str, Any] = {
            "$type": TENSOR_TAG,
            "$ref": self.member_of(t),
            "dtype": t.dtype,
            "shape": list(t.shape),
            "stride": list(t.stride),
            "offset": t.offset,
            "begin": t.extent[0],
            "end": t.extent[1],
            "shared": self.shared(t),
            "device": t.storage.location,
        }
        if t.parameter:
            node["parameter"] = True
        if t.requires_grad:
            node["requires_grad"] = True
        return node
