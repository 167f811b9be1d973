"""The class-free neutral form of numpy and torch nodes (spec/neutral.md sections 5.2 and 5.4):
arrays and tensors by their values' SHA-256, with `same_as` where a node names what an earlier one
did, and the `storage` that tensors sharing one stored entry keep (filled in once the walk is done)."""

from __future__ import annotations

import json
import math

from ..errors import FormatError
from .encode import D
from .fields import text_field
from .walker import NodeDescriber, Walker, child


def ndarray_node(w: Walker, node: D, path: str) -> D:
    dtype = node.get("dtype")
    out: D = {"kind": "ndarray", "dtype": dtype, "shape": node.get("shape"), "order": node.get("order", "C")}
    if dtype == "object":
        out["order"] = "C"
        items = w.sequence(node.get("items"), child(path, "items"))
        shape = node.get("shape")
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
            raise FormatError("an array's shape must be a list of sizes", path=path)
        if math.prod(shape) != len(items):  # (checked, not loaded: the items may name classes)
            raise FormatError("an object array's items do not fill its shape", path=path)
        base = child(path, "items")
        out["items"] = [w.value(v, child(base, i)) for i, v in enumerate(items)]
        return out
    out["shape"], out["sha256"] = w.hashed_values(node, path)
    ref = node.get("$ref")
    if isinstance(ref, str):
        first = w.arrays.setdefault(ref, path)
        if first != path:
            out["same_as"] = first
    return out


def scalar_node(w: Walker, node: D, path: str) -> D:
    import numpy as np

    value = w.load(node, path)
    arr = np.asarray(value)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return {"kind": "numpy.scalar", "dtype": node.get("dtype"), "hex": arr.tobytes().hex()}


def dtype_node(w: Walker, node: D, path: str) -> D:
    return {"kind": "numpy.dtype", "value": text_field(node, "value", path)}


def tensor_node(w: Walker, node: D, path: str) -> D:
    shape, sha = w.hashed_values(node, path)
    out: D = {
        "kind": "tensor",
        "dtype": node.get("dtype"),
        "shape": shape,
        "device": node.get("device"),
        "parameter": node.get("parameter") is True,
        "requires_grad": node.get("requires_grad") is True,
        "sha256": sha,
    }
    view = node.get("view")
    identity = _identity(node)
    first = w.identities.setdefault(identity, path)
    if first != path:
        out["same_as"] = first
    if isinstance(view, dict):
        offset, stride = view.get("storage_offset"), view.get("stride")
    else:
        offset, stride = 0, _c_strides(shape)
    out["storage"] = {"offset": offset, "stride": stride}
    entry = (str(node.get("$ref")), str(node.get("key")))
    w.tensors.append((out, path, entry, identity, math.prod(shape) > 0))
    return out


def device_node(w: Walker, node: D, path: str) -> D:
    return {"kind": "torch.device", "value": text_field(node, "value", path)}


def torch_dtype_node(w: Walker, node: D, path: str) -> D:
    return {"kind": "torch.dtype", "value": text_field(node, "value", path)}


def size_node(w: Walker, node: D, path: str) -> D:
    items = node.get("items")
    if not (isinstance(items, list) and all(type(i) is int for i in items)):
        raise FormatError("a torch.Size needs a list of ints", path=path)
    return {"kind": "torch.Size", "items": items}


def fill_storages(tensors: list[tuple[D, str, tuple[str, str], str, bool]]) -> None:
    """Once every tensor of a walk was met: `storage` stays only on tensors with elements whose entry
    another tensor identity (with elements) also names; `first` is the path of the first such node."""
    users: dict[tuple[str, str], set[str]] = {}
    firsts: dict[tuple[str, str], str] = {}
    for _, path, entry, identity, nonempty in tensors:
        if nonempty:
            users.setdefault(entry, set()).add(identity)
            firsts.setdefault(entry, path)
    for desc, _, entry, _, nonempty in tensors:
        if not nonempty or len(users.get(entry, ())) < 2:
            del desc["storage"]
        else:
            desc["storage"] = {"first": firsts[entry], **desc["storage"]}


def _identity(node: D) -> str:
    """Nodes that agree in all of these read as one tensor object (spec 5.4)."""
    fields = {k: node.get(k) for k in ("$ref", "key", "dtype", "shape", "device", "view")}
    fields["parameter"] = node.get("parameter") is True
    fields["requires_grad"] = node.get("requires_grad") is True
    return json.dumps(fields, sort_keys=True)


def _c_strides(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return strides[::-1]


ARRAY_TYPES: dict[str, NodeDescriber] = {
    "numpy.ndarray": ndarray_node,
    "numpy.scalar": scalar_node,
    "numpy.dtype": dtype_node,
    "torch.Tensor": tensor_node,
    "torch.device": device_node,
    "torch.dtype": torch_dtype_node,
    "torch.Size": size_node,
}

__all__ = ["ARRAY_TYPES", "fill_storages"]
