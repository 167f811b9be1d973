"""torch tensors read back as numpy arrays, without importing torch (for JAX, MLX and numpy users).

`NumpyTensorHandler` reads the same `torch.Tensor` nodes as the torch handler, with the same checks
and errors: each tensor is found in its member as the torch handler finds it (handlers.tensor_slots),
the manifest's dtype and shape must agree with the member, and tensors that shared storage come back as arrays sharing
memory. It only reads: it accepts no class, so saving still goes through the torch handler.

dtypes: numpy's own types where numpy has one; bfloat16, the float8 types and complex32 through the
`ml_dtypes` package (the types JAX uses); sub-byte integers, bits and float4 have no numpy type and
raise `UnsupportedDtypeError`. Arrays hold host memory: map_location may only be None or "cpu".

Nothing here may import torch, directly or through the modules it imports.
"""

from __future__ import annotations

import importlib
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..container.npy import check_shape
from ..container.safetensors_layout import TensorSlot
from ..errors import DeviceError, FormatError, UnsupportedDtypeError
from ..nodes.arrays import SAFETENSORS_CODES, TensorSchema
from .allocation import cast_array
from .base import Handler
from .tensor_slots import find_slot

if TYPE_CHECKING:
    from ..engine.context import LoadContext, Node, SaveContext

TENSOR_TAG = "torch.Tensor"

# torch dtype name -> the numpy dtype with the same bytes and meaning (little-endian, as stored)
NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(name).newbyteorder("<")
    for name in (
        "float64", "float32", "float16", "int64", "int32", "int16", "int8",
        "uint64", "uint32", "uint16", "uint8", "bool", "complex64", "complex128",
    )
}  # fmt: skip
# torch dtype names whose numpy type comes from ml_dtypes (same names there); complex32 is torch's
# chalf (two float16), which ml_dtypes.complex32 lays out the same way
ML_DTYPES_NAMES = frozenset({
    "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "complex32",
})  # fmt: skip
# torch dtypes numpy cannot hold: sub-byte integers (shell dtypes), packed float4, bits, quantized
NO_NUMPY_EQUIVALENT = frozenset({
    *(f"int{n}" for n in range(1, 8)), *(f"uint{n}" for n in range(1, 8)),
    "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2", "float4_e2m1fn_x2",
    "qint8", "quint8", "qint32", "quint4x2", "quint2x4",
})  # fmt: skip
# what a `dtype=` cast applies to (torch's is_floating_point: complex is not floating)
FLOATING_NAMES = frozenset({
    "float64", "float32", "float16", "bfloat16",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
})  # fmt: skip
_ML_DTYPES_FIX = "pip install ml_dtypes (or upgrade it), or read with tensors='torch'"
_resolved: dict[str, np.dtype[Any]] = dict(NUMPY_DTYPES)  # ml_dtypes types join once resolved


def numpy_dtype(name: Any, *, path: str | None = None) -> np.dtype[Any]:
    """The numpy dtype of torch dtype `name` (a manifest's "dtype"): FormatError for a name torch has
    not got, UnsupportedDtypeError for one numpy cannot hold (or not without ml_dtypes)."""
    if not isinstance(name, str):
        raise FormatError(f"unknown torch dtype {str(name)[:40]!r}", path=path)
    dtype = _resolved.get(name)
    if dtype is not None:
        return dtype
    if name in ML_DTYPES_NAMES:
        try:
            ml_dtypes: Any = importlib.import_module("ml_dtypes")
        except ImportError:
            raise UnsupportedDtypeError(
                f"tensor dtype {name!r} needs the ml_dtypes package to be read as a numpy array: {_ML_DTYPES_FIX}",
                path=path,
            ) from None
        found = getattr(ml_dtypes, name, None)
        if found is None:
            raise UnsupportedDtypeError(
                f"tensor dtype {name!r} is not in this ml_dtypes ({getattr(ml_dtypes, '__version__', '?')}): "
                + _ML_DTYPES_FIX,
                path=path,
            )
        dtype = _resolved[name] = np.dtype(found)
        return dtype
    if name in NO_NUMPY_EQUIVALENT:
        raise UnsupportedDtypeError(
            f"tensor dtype {name!r} has no numpy equivalent: read with tensors='torch'", path=path
        )
    raise FormatError(f"unknown torch dtype {str(name)[:40]!r}", path=path)


def check_map_location(loc: Any) -> None:
    """Arrays are host memory: only None or "cpu" (a string, or a torch.device) make sense."""
    if loc is None:
        return
    if (isinstance(loc, str) or type(loc).__module__ == "torch") and str(loc) == "cpu":
        return
    raise DeviceError(
        f"tensors='numpy' reads tensors into host memory: map_location must be None or 'cpu', not "
        f"{str(loc)[:60]!r} (read with tensors='torch' to place them on a device)"
    )


def cast_target(dtype: Any) -> np.dtype[Any] | None:
    """The numpy dtype a read's `dtype=` asks floating arrays to be cast to: a numpy dtype (or type),
    a dtype name ("float16", "bfloat16", "f4"), or a torch.dtype (by its name; torch is not imported)."""
    if dtype is None:
        return None
    if type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype":
        dtype = str(dtype).removeprefix("torch.")
    if isinstance(dtype, str) and (dtype in _resolved or dtype in ML_DTYPES_NAMES or dtype in NO_NUMPY_EQUIVALENT):
        return numpy_dtype(dtype)  # torch's names first ("bfloat16" is not numpy's)
    try:
        return np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be a numpy dtype or a dtype name, not {str(dtype)[:60]!r}") from None


# --- the handler ---


class NumpyTensorHandler(TensorSchema, Handler):
    """Loads `torch.Tensor` nodes as numpy arrays; saves nothing (put it before the torch handler)."""

    name = TENSOR_TAG

    def accepts(self, cls: type) -> bool:
        return False

    def save(self, obj: Any, ctx: SaveContext) -> Node:
        raise ctx.error("the numpy tensor reader cannot save; tensors are saved by the torch handler")

    def load(self, node: dict[str, Any], ctx: LoadContext) -> np.ndarray[Any, Any]:
        # This runs once per tensor (5,000 times for a 5,000-tensor state dict): keep it lean.
        # (errors raised without a path get it from ctx.load on the way out: no path_str per tensor)
        name: Any = node.get("dtype")
        dtype = numpy_dtype(name)
        shape = check_shape(node.get("shape"))
        view = node.get("view")
        memo: dict[tuple[Any, ...], np.ndarray[Any, Any]] = ctx.state("numpy.memo", dict)
        # dtype and shape belong in the key: views of one storage can share offset and strides
        memo_key = (node.get("$ref"), node.get("key"), name, shape, None if view is None else repr(view))
        arr = memo.get(memo_key)
        if arr is not None:
            return arr
        check_map_location(ctx.map_location)
        arr = self._read(node, name, dtype, shape, view, ctx)
        if ctx.dtype is not None and name in FLOATING_NAMES:
            target = ctx.state("numpy.cast", lambda: cast_target(ctx.dtype))
            if target is not None and target != arr.dtype:
                arr = cast_array(arr, target, ctx, member=node.get("$ref"))
        memo[memo_key] = arr
        return arr

    def _read(
        self,
        node: dict[str, Any],
        name: str,
        dtype: np.dtype[Any],
        shape: tuple[int, ...],
        view: Any,
        ctx: LoadContext,
    ) -> np.ndarray[Any, Any]:
        ref: Any = node.get("$ref")  # checked by find_slot
        key = node.get("key")
        if not isinstance(key, str):
            raise ctx.error("tensor node lacks its 'key' in the member")
        st_code = SAFETENSORS_CODES.get(name)
        nbytes = math.prod(shape) * dtype.itemsize
        stored = ("U8", None) if view is not None else ("U8", (nbytes,)) if st_code is None else (st_code, shape)
        slot = find_slot(ref, key, stored, ctx)
        if view is None:
            if (st_code is None and (slot.dtype != "U8" or slot.shape != (nbytes,))) or (
                st_code is not None and (slot.dtype != st_code or slot.shape != shape)
            ):
                raise FormatError(
                    f"the member stores {key!r} as {slot.dtype}{list(slot.shape)}, the manifest says "
                    f"{name}{list(shape)}",
                    member=ref,
                    path=ctx.path_str,
                )
            return np.frombuffer(self._bytes(ref, slot, ctx), dtype=dtype).reshape(shape)
        if not isinstance(view, dict) or slot.dtype != "U8":
            raise ctx.error("bad tensor view", member=ref)
        offset, stride = view.get("storage_offset"), view.get("stride")
        if (
            type(offset) is not int
            or offset < 0
            or not isinstance(stride, list)
            or len(stride) != len(shape)
            or not all(type(s) is int and s >= 0 for s in stride)
        ):
            raise ctx.error("bad tensor view", member=ref)
        data = self._bytes(ref, slot, ctx)
        if data.nbytes % dtype.itemsize:
            raise ctx.error("shared storage size is not a multiple of the element size", member=ref)
        size = data.nbytes // dtype.itemsize
        if 0 in shape:
            return np.frombuffer(data, dtype=dtype)[:0].reshape(shape)
        last = offset + sum((n - 1) * s for n, s in zip(shape, stride))
        if last >= size:
            raise ctx.error(
                f"tensor view outside its storage: shape {list(shape)}, stride {stride}, offset {offset} "
                f"reach element {last} of {size}",
                member=ref,
            )
        # (numpy's as_strided would do, but its __array_interface__ route fails on some ml_dtypes types)
        strides = tuple(s * dtype.itemsize for s in stride)
        return np.ndarray(shape, dtype=dtype, buffer=data, offset=offset * dtype.itemsize, strides=strides)

    @staticmethod
    def _bytes(ref: str, slot: TensorSlot, ctx: LoadContext) -> memoryview:
        """The slot's bytes, writable and this load's own (the same buffer for the same slot, so
        arrays over one storage share memory)."""
        return ctx.member_range(ref, slot.begin, slot.end, slot.key)
