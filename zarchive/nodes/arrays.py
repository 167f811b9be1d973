"""Schemas of numpy and torch nodes: arrays, tensors, scalars, dtypes, devices, sizes.

Planning an array or a tensor checks its dtype name and shape and records the member it reads;
inline arrays count their bytes (element count x item size, from the dtype text alone), so a node
asking for more than the read may allocate is refused before numpy sees it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..container.budget import MAX_DIMENSION
from ..container.shapes import check_shape
from ..engine.dtype_text import numpy_dtype_name
from .base import NodeSchema, PlanSink

_NUMPY_DTYPE = re.compile(r"^[<>|=]?([a-zA-Z])(\d*)(\[\w+\])?$")
_CHAR_BYTES = {"U": 4}  # numpy's unicode strings take 4 bytes a character
MAX_DTYPE_TEXT = 64


def numpy_itemsize(text: Any) -> int | None:
    """The item size of a numpy dtype string such as '<f8', '|S5', '<U3', '<M8[ns]' (None: unknown
    to this quick reading; numpy checks it when the array is built)."""
    if not isinstance(text, str) or len(text) > MAX_DTYPE_TEXT:
        return None
    m = _NUMPY_DTYPE.match(text)
    if m is None or not m.group(2):
        return None
    return int(m.group(2)) * _CHAR_BYTES.get(m.group(1), 1)


# bytes per element of every torch dtype a manifest can name (sub-byte types take a byte each)
TORCH_ITEMSIZE: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "complex128": 16, "complex64": 8, "complex32": 4,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1, "bits8": 1, "bits16": 2, "bits1x8": 1, "bits2x4": 1, "bits4x2": 1,
    **{f"int{n}": 1 for n in range(1, 8)}, **{f"uint{n}": 1 for n in range(1, 8)},
}  # fmt: skip


# torch dtype name (as the manifest writes it) -> safetensors code of its member entry. Dtypes not
# listed are stored as raw U8 bytes; the manifest's "dtype" says how to view them.
SAFETENSORS_CODES: dict[str, str] = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8",
    "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8",
    "bool": "BOOL", "complex64": "C64",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
    "float8_e4m3fnuz": "F8_E4M3FNUZ", "float8_e5m2fnuz": "F8_E5M2FNUZ",
}  # fmt: skip


class NumpyArraySchema(NodeSchema):
    name = "numpy.ndarray"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        shape, dtype = check_shape(node.get("shape"), path=p.path_str), node.get("dtype")
        if not isinstance(dtype, str) or len(dtype) > MAX_DTYPE_TEXT:
            raise p.error("an array's 'dtype' must be a short string")
        if dtype == "object":
            items = node.get("items")
            if not isinstance(items, (list, dict)):
                raise p.error("an object array needs its 'items'")
            p.visit(items, "items")
        elif "$ref" in node:
            p.member(node["$ref"])
        else:
            itemsize = numpy_itemsize(dtype)
            p.inline_bytes(math.prod(shape) * (itemsize if itemsize is not None else 1))

    def summary(self, node: dict[str, Any]) -> str:
        where = f" -> {node['$ref']}" if "$ref" in node else ""
        return f"ndarray {numpy_dtype_name(node.get('dtype'))} {node.get('shape')}{where}"


class NumpyScalarSchema(NodeSchema):
    name = "numpy.scalar"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        if not isinstance(node.get("dtype"), str):
            raise p.error("a numpy scalar needs its 'dtype'")
        # built at its dtype's item size, whatever its value's text holds ('|S2147483648' with "")
        p.inline_bytes(numpy_itemsize(node["dtype"]) or 0)


class NumpyDtypeSchema(NodeSchema):
    name = "numpy.dtype"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        if not isinstance(node.get("value"), str):
            raise p.error("a numpy dtype node needs its 'value' string")


class TensorSchema(NodeSchema):
    """{"$ref": member, "key": entry, "dtype", "shape", "device"} (+ "view", "parameter", "requires_grad")."""

    name = "torch.Tensor"
    tensor = True

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        check_shape(node.get("shape"), path=p.path_str)
        if not isinstance(node.get("dtype"), str):
            raise p.error(f"unknown torch dtype {str(node.get('dtype'))[:40]!r}")
        if not isinstance(node.get("key"), str):
            raise p.error("tensor node lacks its 'key' in the member")
        if not isinstance(node.get("device", "cpu"), str):
            raise p.error("a tensor's 'device' must be a string")
        view = node.get("view")
        if view is not None and not (isinstance(view, dict) and type(view.get("storage_offset")) is int):
            ref = node.get("$ref")
            raise p.error("bad tensor view", member=ref if isinstance(ref, str) else None)
        p.member(node.get("$ref"))

    def summary(self, node: dict[str, Any]) -> str:
        return f"tensor {node.get('dtype')} {node.get('shape')} -> {node.get('$ref')}[{node.get('key')!r}]"


class _ValueSchema(NodeSchema):
    """{"value": a short string}"""

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        if not isinstance(node.get("value"), str):
            raise p.error(f"a {self.name!r} node needs its 'value' string")


class TorchDeviceSchema(_ValueSchema):
    name = "torch.device"


class TorchDtypeSchema(_ValueSchema):
    name = "torch.dtype"


MAX_SIZE_DIMS = 64  # torch itself allows at most 64 dimensions


def size_problem(items: list[int]) -> str | None:
    """Why a torch.Size of `items` cannot be a real size (None if it can): more dimensions than torch
    allows, or a dimension past MAX_DIMENSION (such a value's repr() and arithmetic fail)."""
    if len(items) > MAX_SIZE_DIMS:
        return f"a torch.Size of {len(items)} dimensions (torch allows at most {MAX_SIZE_DIMS})"
    for i in items:
        if not -1 <= i <= MAX_DIMENSION:
            return f"a torch.Size has an impossible dimension of {i.bit_length()} bits"
    return None


class TorchSizeSchema(NodeSchema):
    name = "torch.Size"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        items = node.get("items")
        if not (isinstance(items, list) and all(type(i) is int for i in items)):
            raise p.error("torch.Size items must be ints")
        problem = size_problem(items)
        if problem:
            raise p.error(problem)
