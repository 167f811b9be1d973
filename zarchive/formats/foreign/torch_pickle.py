"""What a torch.save file's `data.pkl` may hold, for the restricted pickle reader.

The allow-list is the weights part of what `torch.load(weights_only=True)` accepts: tensors (torch's
`_rebuild_tensor_v2` / `_rebuild_tensor_v3` over a storage named by a persistent id), parameters
(`_rebuild_parameter`, and `_rebuild_parameter_with_state` without state), `collections.OrderedDict`
(with a state dict's `_metadata`), dtypes, storage types, `torch.Size`, `torch.device`, and Python's
plain values (`set`, `complex`, `bytes`, `bytearray`). Anything else a pickle names - any other
class or function, quantized, sparse or subclassed tensors, backward hooks - is refused with
RefusedPickleError naming it. Tensors are not built here: each is a `TensorRef` (where its bytes
are, its dtype, shape, stride and offset, checked to lie inside its storage), built only when read.
Nothing here imports torch.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ...container.budget import MAX_DIMENSION, shape_nbytes
from ...container.shapes import MAX_DIMS
from ...errors import FormatError, RefusedPickleError
from ...nodes.arrays import TORCH_ITEMSIZE
from .pickle_rules import Global

# legacy typed storage classes -> the torch dtype of their elements
STORAGE_DTYPES = {
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8",
    "ByteStorage": "uint8", "BoolStorage": "bool", "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128",
}  # fmt: skip
_UNTYPED = {("torch", "UntypedStorage"), ("torch.storage", "UntypedStorage")}
MAX_KEY_TEXT = 256


@dataclass(frozen=True)
class StorageType:
    dtype: str  # "uint8" for an untyped storage (counted in bytes)


@dataclass(frozen=True)
class DtypeRef:
    """A torch dtype the pickle holds as a value (read back as torch.dtype, or its name without torch)."""

    name: str


@dataclass(frozen=True)
class SizeRef:
    items: tuple[int, ...]


@dataclass(frozen=True)
class DeviceRef:
    text: str


@dataclass(eq=False)
class StorageRef:
    """A storage a persistent id names: zip member `data/<key>`, `numel` elements of `dtype`."""

    key: str
    dtype: str
    location: str
    numel: int
    users: int = 0  # tensors over it

    @property
    def nbytes(self) -> int:
        return self.numel * TORCH_ITEMSIZE[self.dtype]


@dataclass(eq=False)
class TensorRef:
    """A tensor not yet read: a view (offset, shape, stride, in elements of `dtype`) of a storage."""

    storage: StorageRef
    dtype: str
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    requires_grad: bool = False
    parameter: bool = False
    extent: tuple[int, int] = field(default=(0, 0))  # the bytes [begin, end) of the storage it reads

    def children(self) -> tuple[()]:
        return ()


def _ints(value: Any, what: str, member: str | None) -> tuple[int, ...]:
    """A size or stride: at most MAX_DIMS ints, each in [0, MAX_DIMENSION] (the shared shape gate's
    bound: no real dimension comes near it, and every size computed from them stays sane)."""
    if not isinstance(value, (tuple, list, SizeRef)):
        raise FormatError(f"{what} must be a tuple of ints", member=member)
    items = value.items if isinstance(value, SizeRef) else value
    if len(items) > MAX_DIMS or not all(type(i) is int and 0 <= i <= MAX_DIMENSION for i in items):
        if len(items) <= MAX_DIMS and all(type(i) is int for i in items):
            shape_nbytes(items, 1, what=what, member=member)  # (raises, naming the dimension)
        raise FormatError(f"{what} must be at most {MAX_DIMS} ints >= 0", member=member)
    return tuple(items)


def _count(value: Any, what: str, member: str | None) -> int:
    """A storage offset or element count: an int in [0, MAX_DIMENSION]."""
    if type(value) is not int or not 0 <= value <= MAX_DIMENSION:
        shown = f"an int of {value.bit_length()} bits" if type(value) is int else type(value).__name__
        raise FormatError(f"{what} must be an int in [0, 2**48], not {shown}", member=member)
    return value


class TorchRules:
    """The allow-list above, for one data.pkl (`member`: its name, for messages)."""

    def __init__(self, member: str | None) -> None:
        self.member = member
        self.storages: dict[str, StorageRef] = {}
        self.tensors: list[TensorRef] = []

    def refuse(self, what: str) -> RefusedPickleError:
        return RefusedPickleError(
            f"the pickle asks for {what}, which zarchive does not build: it reads only tensors, parameters, "
            "dtypes, devices, sizes and plain containers (what torch.load(weights_only=True) accepts for "
            "weights); nothing was run",
            member=self.member,
        )

    # --- globals ---
    def global_value(self, g: Global) -> Any:
        module = "builtins" if g.module == "__builtin__" else g.module
        if module == "torch" and g.name in TORCH_ITEMSIZE:
            return DtypeRef(g.name)
        if module == "torch" and g.name in STORAGE_DTYPES:
            return StorageType(STORAGE_DTYPES[g.name])
        if (module, g.name) in _UNTYPED:
            return StorageType("uint8")
        key = f"{module}.{g.name}"
        if key in _CALLABLES:
            return Global(module, g.name)
        raise self.refuse(f"the global {g.dotted[:200]!r}")

    # --- calls ---
    def reduce(self, func: Any, args: tuple[Any, ...]) -> Any:
        if not isinstance(func, Global):
            raise self.refuse(f"a call of a {type(func).__name__} value")
        name = func.dotted
        try:
            return getattr(self, _CALLABLES[name])(args)
        except (TypeError, ValueError, OverflowError) as e:
            if isinstance(e, FormatError):
                raise
            raise FormatError(f"bad arguments to {name}: {str(e)[:200]}", member=self.member) from None

    def _ordered_dict(self, args: tuple[Any, ...]) -> OrderedDict[Any, Any]:
        if args == ():
            return OrderedDict()
        (items,) = args
        return OrderedDict(items)

    def _set(self, args: tuple[Any, ...]) -> set[Any]:
        (items,) = args if args else ([],)
        if not isinstance(items, (list, tuple)):
            raise TypeError("set() takes a list")
        return set(items)

    def _frozenset(self, args: tuple[Any, ...]) -> frozenset[Any]:
        return frozenset(self._set(args))

    def _complex(self, args: tuple[Any, ...]) -> complex:
        if not all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args) or len(args) > 2:
            raise TypeError("complex() takes two numbers")
        return complex(*args)

    def _encode(self, args: tuple[Any, ...]) -> bytes:
        text, codec = args if len(args) == 2 else (*args, "utf-8")
        if not isinstance(text, str) or codec not in ("latin1", "latin-1"):
            raise TypeError("_codecs.encode takes a string and 'latin1'")
        return text.encode("latin1")

    def _bytes(self, args: tuple[Any, ...]) -> bytes:
        if not args:  # (protocol 2 writes b"" as a call of bytes with no arguments)
            return b""
        return bytes(self._bytearray(args))

    def _bytearray(self, args: tuple[Any, ...]) -> bytearray:
        if not args:
            return bytearray()
        if len(args) == 1 and isinstance(args[0], (bytes, bytearray)):
            return bytearray(args[0])
        return bytearray(self._encode(args))

    def _size(self, args: tuple[Any, ...]) -> SizeRef:
        (items,) = args if args else ((),)
        return SizeRef(_ints(items, "a torch.Size", self.member))

    def _device(self, args: tuple[Any, ...]) -> DeviceRef:
        if not 1 <= len(args) <= 2 or not isinstance(args[0], str) or len(args[0]) > 64:
            raise TypeError("torch.device takes a short string (and an index)")
        if len(args) == 2:
            if type(args[1]) is not int:
                raise TypeError("a device index must be an int")
            return DeviceRef(f"{args[0]}:{args[1]}")
        return DeviceRef(args[0])

    # --- tensors ---
    def _check_hooks(self, hooks: Any) -> None:
        if not isinstance(hooks, dict):
            raise TypeError("backward_hooks must be a dict")
        if hooks:
            raise self.refuse("backward hooks (functions) on a tensor")

    def _tensor(
        self, storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any, dtype: str | None = None
    ) -> TensorRef:
        if not isinstance(storage, StorageRef):
            raise FormatError("a tensor's storage is not a storage the file names", member=self.member)
        if type(requires_grad) is not bool:
            raise FormatError("a tensor's requires_grad is malformed", member=self.member)
        offset = _count(offset, "a tensor's storage offset", self.member)
        shape, strides = _ints(size, "a tensor's size", self.member), _ints(stride, "a tensor's stride", self.member)
        if len(shape) != len(strides):
            raise FormatError("a tensor's size and stride differ in length", member=self.member)
        dtype = dtype or storage.dtype
        itemsize = TORCH_ITEMSIZE[dtype]
        if math.prod(shape) == 0:
            extent = (0, 0)
        else:
            last = offset + sum((n - 1) * s for n, s in zip(shape, strides))
            extent = (offset * itemsize, (last + 1) * itemsize)
            if extent[1] > storage.nbytes:
                raise FormatError(
                    f"a tensor of shape {list(shape)[:8]} reads bytes up to {extent[1]:,} of a storage of "
                    f"{storage.nbytes:,} bytes",
                    member=self.member,
                )
        storage.users += 1
        t = TensorRef(storage, dtype, offset, shape, strides, requires_grad, extent=extent)
        self.tensors.append(t)
        return t

    def _rebuild_v2(self, args: tuple[Any, ...]) -> TensorRef:
        if len(args) not in (6, 7):
            raise TypeError(f"{len(args)} arguments")
        storage, offset, size, stride, requires_grad, hooks, *rest = args
        self._check_hooks(hooks)
        if rest and rest[0] not in (None, {}):
            raise self.refuse("tensor metadata (a tensor with extra state)")
        return self._tensor(storage, offset, size, stride, requires_grad)

    def _rebuild_v3(self, args: tuple[Any, ...]) -> TensorRef:
        if len(args) not in (7, 8):
            raise TypeError(f"{len(args)} arguments")
        storage, offset, size, stride, requires_grad, hooks, dtype, *rest = args
        self._check_hooks(hooks)
        if rest and rest[0] not in (None, {}):
            raise self.refuse("tensor metadata (a tensor with extra state)")
        if not isinstance(dtype, DtypeRef):
            raise TypeError("the dtype argument is not a dtype")
        if isinstance(storage, StorageRef) and storage.dtype != "uint8":
            raise FormatError("_rebuild_tensor_v3 over a typed storage", member=self.member)
        return self._tensor(storage, offset, size, stride, requires_grad, dtype.name)

    def _parameter(self, args: tuple[Any, ...]) -> TensorRef:
        if len(args) == 4:
            data, requires_grad, hooks, state = args
            if state not in (None, {}) and not (isinstance(state, tuple) and all(s in (None, {}) for s in state)):
                raise self.refuse("a parameter with extra state (attributes set on it)")
        elif len(args) == 3:
            data, requires_grad, hooks = args
        else:
            raise TypeError(f"{len(args)} arguments")
        self._check_hooks(hooks)
        if not isinstance(data, TensorRef) or type(requires_grad) is not bool:
            raise FormatError("a parameter's data is not a tensor", member=self.member)
        return TensorRef(
            data.storage, data.dtype, data.offset, data.shape, data.stride, requires_grad, True, data.extent
        )

    # --- BUILD and persistent ids ---
    def build(self, obj: Any, state: Any) -> Any:
        if type(obj) is OrderedDict and isinstance(state, dict) and set(state) <= {"_metadata"}:
            if "_metadata" in state:
                obj._metadata = state["_metadata"]  # type: ignore[attr-defined]  # noqa: SLF001 - module versions
            return obj
        raise self.refuse(f"setting state on a {type(obj).__name__} (BUILD)")

    def persistent(self, pid: Any) -> StorageRef:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise self.refuse("a persistent object that is not a storage")
        _, stype, key, location, numel = pid
        if not isinstance(stype, StorageType):
            raise FormatError("a storage's type is not a storage type", member=self.member)
        if not isinstance(key, str) or not key or len(key) > MAX_KEY_TEXT or "/" in key or key in (".", ".."):
            raise FormatError("a storage's key must be a short name", member=self.member)
        if not isinstance(location, str) or len(location) > 64:
            raise FormatError("a storage's location is malformed", member=self.member)
        numel = _count(numel, "a storage's element count", self.member)
        found = self.storages.get(key)
        if found is None:
            found = self.storages[key] = StorageRef(key, stype.dtype, location, numel)
        elif found.nbytes != numel * TORCH_ITEMSIZE[stype.dtype]:
            raise FormatError(f"storage {key!r} is named twice with different sizes", member=self.member)
        return found


_CALLABLES = {
    "collections.OrderedDict": "_ordered_dict",
    "builtins.set": "_set",
    "builtins.frozenset": "_frozenset",
    "builtins.complex": "_complex",
    "builtins.bytearray": "_bytearray",
    "builtins.bytes": "_bytes",
    "_codecs.encode": "_encode",
    "torch.Size": "_size",
    "torch.device": "_device",
    "torch._utils._rebuild_tensor_v2": "_rebuild_v2",
    "torch._utils._rebuild_tensor_v3": "_rebuild_v3",
    "torch._utils._rebuild_parameter": "_parameter",
    "torch._utils._rebuild_parameter_with_state": "_parameter",
}
