"""numpy arrays, scalars and dtypes.

Small arrays (fewer than `external_array_threshold` elements, as ZANJ counts) are written inline, as nested lists when
every value is exact and finite in JSON, else as base64 of their raw bytes. Larger arrays become `.npy`
members, read back into memory of their own (or, with `mmap=True`, as views of the mapped file). Object arrays are
saved item by item through the handler chain; nothing is ever pickled.
"""

from __future__ import annotations

import base64
import math
from typing import Any, cast

import numpy as np

from ..container import npy
from ..container.archive_writer import CompressHint
from ..container.byte_groups import numpy_width
from ..container.shapes import shape_problem
from ..engine.context import LoadContext, Node, SaveContext
from ..errors import FormatError, SaveError
from ..nodes.arrays import NumpyArraySchema, NumpyDtypeSchema, NumpyScalarSchema, numpy_itemsize
from .allocation import allocating
from .base import Handler, expect
from .builtins import float_node, load_float

_LIST_KINDS = frozenset("biu")
MAX_INLINE_LIST_ELEMENTS = 1 << 24  # an inline array as nested lists: more elements are never read
MAX_UNPLANNED_SCALAR = 64  # bytes: a scalar's dtype past this is charged to the read's budget when built
_ARRAY_KINDS = npy.ALLOWED_KINDS


def parse_dtype(text: Any, ctx: LoadContext, *, allow_object: bool = False) -> np.dtype:
    if not isinstance(text, str) or len(text) > 40:
        raise ctx.error("bad dtype")
    if text == "object" and allow_object:
        return np.dtype(object)
    try:
        dtype = npy.dtype_from_text(text)
    except FormatError:
        raise ctx.error(f"unknown dtype {text!r}") from None
    if dtype.kind not in _ARRAY_KINDS or dtype.fields is not None:
        raise ctx.error(f"dtype {text!r} is not allowed")
    return dtype


def _short(shape: tuple[int, ...]) -> str:
    text = str(list(shape))
    return text if len(text) <= 80 else text[:77] + "..."


def _inline_data(arr: np.ndarray) -> dict[str, Any]:
    kind = arr.dtype.kind
    if arr.size == 0:  # nested lists cannot say the shape (2, 0, 4): [[], []]
        return {"base64": ""}
    if kind in _LIST_KINDS or (kind == "f" and arr.dtype.itemsize <= 8 and bool(np.isfinite(arr).all())):
        return {"data": arr.tolist()}
    return {"base64": base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode("ascii")}


class NumpyArrayHandler(NumpyArraySchema, Handler):
    name = "numpy.ndarray"

    def accepts(self, cls: type) -> bool:
        return cls is np.ndarray

    def save(self, arr: np.ndarray, ctx: SaveContext) -> Node:
        problem = shape_problem(arr.shape)
        if problem is not None:
            raise ctx.error(f"an array of shape {_short(arr.shape)} cannot be saved: {problem}")
        if arr.dtype.hasobject:
            if arr.dtype != np.dtype(object):
                raise ctx.error("structured arrays with object fields cannot be saved")
            items = ctx.save([x for x in arr.reshape(-1, order="C")], "items") if arr.size else []
            return {"$type": self.name, "dtype": "object", "shape": list(arr.shape), "items": items}
        if arr.dtype.kind not in _ARRAY_KINDS or arr.dtype.fields is not None:
            raise ctx.error(f"numpy dtype {arr.dtype} is not supported (structured/void arrays)")
        order = {"order": "F"} if arr.ndim > 1 and arr.flags.f_contiguous and not arr.flags.c_contiguous else {}
        if arr.size < ctx.settings.external_array_threshold and arr.size <= MAX_INLINE_LIST_ELEMENTS:
            return {"$type": self.name, "dtype": arr.dtype.str, "shape": list(arr.shape), **order, **_inline_data(arr)}
        memo: dict[int, tuple[np.ndarray, Any]] = ctx.state("numpy.memo", dict)
        seen = memo.get(id(arr))
        if seen is not None and seen[0] is arr:
            plan = seen[1]
        else:
            # float data stays mappable, unless compress_weights asks for it byte-grouped; integers
            # and datetimes are byte-grouped by their item size where that pays
            grouped = arr.dtype.kind in "iumM" and arr.dtype.itemsize in (2, 4, 8)
            hint: CompressHint = "weights" if arr.dtype.kind in "fc" else "grouped" if grouped else "try"
            plan = ctx.add_member("npy", lambda: [(None, p) for p in npy.array_parts(arr)], compress=hint)
            plan.widths = [1, arr.dtype.itemsize if grouped else numpy_width(arr.dtype)]
            memo[id(arr)] = (arr, plan)
        return ctx.ref_node(plan, self.name, dtype=arr.dtype.str, shape=list(arr.shape), **order)

    def load(self, node: dict[str, Any], ctx: LoadContext) -> np.ndarray:
        shape = npy.check_shape(node.get("shape"), path=ctx.path_str)
        dtype = parse_dtype(node.get("dtype"), ctx, allow_object=True)
        if dtype == np.dtype(object):
            items = ctx.load(node.get("items"), "items")
            if not isinstance(items, list) or len(items) != math.prod(shape):
                raise ctx.error("object array items do not match its shape")
            out = np.empty(len(items), dtype=object)
            for i, item in enumerate(items):  # item by item: numpy must not broadcast nested lists
                out[i] = item
            return out.reshape(shape)
        if "$ref" in node:
            arr = self._load_member(node, dtype, shape, ctx)
        elif "data" in node:
            if math.prod(shape) > MAX_INLINE_LIST_ELEMENTS:
                raise ctx.error("inline array too large")
            try:
                arr = np.array(node["data"], dtype=dtype)
            except (ValueError, TypeError, OverflowError) as e:
                raise ctx.error(f"inline data does not fit dtype {dtype.str}: {e}") from None
            if arr.shape != shape:
                raise ctx.error(f"inline data has shape {arr.shape}, the node says {shape}")
        else:
            raw = base64.b64decode(expect(node, "base64", str, ctx), validate=True)
            if len(raw) != math.prod(shape) * dtype.itemsize:
                raise ctx.error("inline bytes do not match shape and dtype")
            arr = np.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)
        if node.get("order") == "F" and "$ref" not in node:
            arr = np.asfortranarray(arr)
        return arr

    def _load_member(
        self, node: dict[str, Any], dtype: np.dtype, shape: tuple[int, ...], ctx: LoadContext
    ) -> np.ndarray:
        name = node["$ref"]
        memo: dict[str, np.ndarray] = ctx.state("numpy.memo", dict)
        arr = memo.get(name) if isinstance(name, str) else None
        if arr is not None:  # another node naming the same member: the same array, if it says the same
            if arr.dtype != dtype or arr.shape != shape:
                raise FormatError(
                    f"the member holds {arr.dtype.str}{list(arr.shape)}, this node says {dtype.str}{list(shape)}",
                    member=name,
                    path=ctx.path_str,
                )
            return arr
        entry = ctx.member_entry(name)
        data_bytes = math.prod(shape) * dtype.itemsize
        if not data_bytes <= entry["size"] <= data_bytes + npy.MAX_HEADER_BYTES + 12:
            raise FormatError(
                f"member holds {entry['size']} bytes, an array of shape {shape} and dtype {dtype.str} needs "
                f"{data_bytes} plus a header",
                member=name,
                path=ctx.path_str,
            )
        arr = npy.parse(ctx.member_bytes(name), member=name)
        if arr.dtype != dtype or arr.shape != shape:
            raise FormatError(
                f"the .npy header says {arr.dtype.str}{list(arr.shape)}, the manifest {dtype.str}{list(shape)}",
                member=name,
                path=ctx.path_str,
            )
        memo[name] = arr
        return arr


class NumpyScalarHandler(NumpyScalarSchema, Handler):
    """numpy scalars keep their numpy type (np.float32(1.5) does not come back as a float)."""

    name = "numpy.scalar"

    def accepts(self, cls: type) -> bool:
        return issubclass(cls, np.generic)

    def save(self, obj: np.generic, ctx: SaveContext) -> Node:
        dtype = obj.dtype
        if dtype.kind not in _ARRAY_KINDS or dtype.fields is not None:
            raise ctx.error(f"numpy scalar of dtype {dtype} is not supported")
        node: dict[str, Any] = {"$type": self.name, "dtype": dtype.str}
        kind = dtype.kind
        if kind == "b":
            node["value"] = bool(obj)
        elif kind in "iu":
            node["value"] = int(obj)
        elif kind == "f" and dtype.itemsize <= 8:
            node["value"] = float_node(float(obj))
        elif kind == "c" and dtype.itemsize <= 16:
            node["real"], node["imag"] = float_node(float(obj.real)), float_node(float(obj.imag))
        elif kind == "U":  # by value: np.str_('') has itemsize 0, but np.asarray of it has 4 bytes
            node["value"] = cast(str, obj)[:]  # (str() of np.str_('a\x00') drops the NUL its dtype counts)
        elif kind == "S":
            node["base64"] = base64.b64encode(bytes(obj)).decode("ascii")  # type: ignore[call-overload]  # np.bytes_ is bytes
        else:
            node["base64"] = base64.b64encode(np.asarray(obj).tobytes()).decode("ascii")
        return node

    def load(self, node: dict[str, Any], ctx: LoadContext) -> np.generic:
        dtype = parse_dtype(node.get("dtype"), ctx)
        if dtype.itemsize > MAX_UNPLANNED_SCALAR and numpy_itemsize(node.get("dtype")) != dtype.itemsize:
            # a dtype text whose size the plan could not read from it: charged now, before it is built
            allocating(ctx, dtype.itemsize, f"a numpy scalar of dtype {dtype.str[:40]}")
        if dtype.kind == "U" and "value" in node:
            text = np.str_(expect(node, "value", str, ctx))
            if text.dtype != dtype:
                raise ctx.error("scalar text does not match the dtype")
            return text
        if "base64" in node:
            raw = base64.b64decode(expect(node, "base64", str, ctx), validate=True)
            if len(raw) != dtype.itemsize:
                raise ctx.error("scalar bytes do not match the dtype")
            if dtype.kind == "S":
                return np.bytes_(raw)
            return np.frombuffer(raw, dtype=dtype)[0]  # type: ignore[no-any-return]
        if "real" in node:
            value: Any = complex(load_float(node["real"], ctx), load_float(node["imag"], ctx))
        elif dtype.kind == "f":
            value = load_float(node.get("value"), ctx)
        else:
            value = node.get("value")
            if dtype.kind == "b" and type(value) is not bool or dtype.kind in "iu" and type(value) is not int:
                raise ctx.error("scalar value does not match its dtype")
        try:
            return cast(np.generic, np.array(value, dtype=dtype)[()])
        except (OverflowError, ValueError) as e:
            raise ctx.error(f"value does not fit {dtype.str}: {e}") from None


class NumpyDtypeHandler(NumpyDtypeSchema, Handler):
    name = "numpy.dtype"

    def accepts(self, cls: type) -> bool:
        return issubclass(cls, np.dtype)

    def save(self, obj: np.dtype, ctx: SaveContext) -> Node:
        if obj.fields is not None or obj.kind not in _ARRAY_KINDS | {"O"}:
            raise SaveError(f"numpy dtype {obj} is not supported", path=ctx.path_str)
        return {"$type": self.name, "value": "object" if obj.kind == "O" else obj.str}

    def load(self, node: dict[str, Any], ctx: LoadContext) -> np.dtype:
        return parse_dtype(node.get("value"), ctx, allow_object=True)
