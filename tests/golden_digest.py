"""A JSON digest of a loaded value, exact enough to notice any change in how a frozen archive reads.

`describe(obj)` records, all the way down: the type (top-level package and qualified name, so a class
moving inside pandas or torch does not count as a change), every float's IEEE-754 bits, ints exactly,
array and tensor dtypes, shapes, Fortran order and a SHA-256 of their bytes, which tensors share
storage (and, for those, their strides and offsets), which arrays and tensors are the same object,
dict key order and key types, pandas dtypes, index and column labels, and models' parameters,
buffers, training flags and configs.

The digests of spec/examples/*.zarc are stored beside them (`*.expected.json`) and compared by
tests/test_spec.py. Changing what this module produces changes every stored digest: don't, unless the
change is additive and the stored digests are known to stay equal.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import hashlib
import json
import pathlib
import struct
import uuid
from collections import OrderedDict, defaultdict
from typing import Any

import numpy as np
import pandas as pd
import torch

_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_BY_REPR = (
    decimal.Decimal, uuid.UUID, dt.datetime, dt.date, dt.time, dt.timedelta, pathlib.PurePath, enum.Enum,
    torch.dtype, torch.device, torch.Size, pd.Timestamp, pd.Timedelta, pd.Period, type(pd.NaT), type(pd.NA),
)  # fmt: skip


# Classes renamed between library versions, under their newest name (numpy 2 renamed bool_ to bool).
_RENAMED = {"numpy:bool_": "numpy:bool"}


def type_name(x: Any) -> str:
    t = type(x)
    name = f"{t.__module__.split('.')[0]}:{t.__qualname__}"
    return _RENAMED.get(name, name)


def float_bits(x: float) -> str:
    return f"{struct.unpack('<Q', struct.pack('<d', x))[0]:016x}"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tensor_bytes(t: torch.Tensor) -> bytes:
    """The tensor's values in C order as bytes, also for dtypes torch cannot copy (bits*, int1..7)."""
    t = t.detach().cpu()
    if t.numel() == 0:
        return b""
    carrier = _SAME_SIZE_INT.get(t.element_size())
    if carrier is not None and t.dtype != carrier:
        t = t.view(carrier)
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def describe(obj: Any) -> Any:
    """The digest of `obj` (plain JSON)."""
    return _Describer().run(obj)


class _Describer:
    def __init__(self) -> None:
        self._objects: dict[int, int] = {}  # id -> index, for arrays and tensors
        self._keep: list[Any] = []  # keeps described objects alive so ids stay unique
        self._storages: dict[tuple[str, int], int] = {}
        self._tensors: list[tuple[dict[str, Any], tuple[str, int] | None, int]] = []

    def run(self, obj: Any) -> Any:
        out = self.value(obj)
        users: dict[tuple[str, int], set[int]] = {}
        for _, key, index in self._tensors:
            if key is not None:
                users.setdefault(key, set()).add(index)
        for desc, key, _ in self._tensors:
            if key is None or len(users[key]) < 2:  # alone on its storage: layout is not part of the value
                for k in ("storage", "stride", "storage_offset"):
                    desc.pop(k, None)
        return out

    def _object_index(self, x: Any) -> int:
        if id(x) not in self._objects:
            self._objects[id(x)] = len(self._objects)
            self._keep.append(x)
        return self._objects[id(x)]

    def value(self, x: Any) -> Any:
        t = type(x)
        if x is None or t is bool or t is str:
            return x
        if t is int:
            return {"int": str(x)}
        if t is float:
            return {"float": float_bits(x)}
        if t is complex:
            return {"complex": [float_bits(x.real), float_bits(x.imag)]}
        if isinstance(x, torch.nn.Module):
            return self.module(x)
        if isinstance(x, torch.Tensor):
            return self.tensor(x)
        if isinstance(x, np.ndarray):
            return self.array(x)
        if isinstance(x, np.generic):
            return {"type": type_name(x), "dtype": x.dtype.str, "hex": np.asarray(x).tobytes().hex()}
        if isinstance(x, np.dtype):
            return {"type": "numpy:dtype", "str": "object" if x.kind == "O" else x.str}
        if type(x).__module__.split(".")[0] == "polars" and type(x).__name__ in ("DataFrame", "Series"):
            if type(x).__name__ == "DataFrame":
                return {"type": "polars:DataFrame", "columns": [self.value(s) for s in x.get_columns()]}
            return {"type": "polars:Series", "name": x.name, "dtype": str(x.dtype),
                    "values": [self.value(v) for v in x.to_list()]}  # fmt: skip
        if isinstance(x, pd.DataFrame):
            return self.frame(x)
        if isinstance(x, pd.Series):
            return {
                "type": type_name(x), "name": self.value(x.name), "dtype": str(x.dtype),
                "index": self.value(x.index), "values": self.values(x.array), **self.extras(x),
            }  # fmt: skip
        if isinstance(x, pd.Index):
            return self.index(x)
        if isinstance(x, pd.api.extensions.ExtensionArray):
            return self.values(x)
        if isinstance(x, _BY_REPR):
            return {"type": type_name(x), "repr": repr(x)}
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            fields = {f.name: self.value(getattr(x, f.name)) for f in dataclasses.fields(x) if hasattr(x, f.name)}
            return {"type": type_name(x), "fields": fields}
        if isinstance(x, tuple) and hasattr(type(x), "_fields"):
            return {"type": type_name(x), "fields": {k: self.value(v) for k, v in zip(type(x)._fields, x)}}
        if t in (list, tuple):
            return {"type": type_name(x), "items": [self.value(v) for v in x]}
        if t in (set, frozenset):
            items = [self.value(v) for v in x]
            return {"type": type_name(x), "items": sorted(items, key=_sort_key)}
        if t in (dict, OrderedDict, defaultdict):
            out: dict[str, Any] = {
                "type": type_name(x),
                "items": [[self.value(k), self.value(v)] for k, v in x.items()],
            }
            if t is defaultdict:
                factory = x.default_factory
                out["default_factory"] = None if factory is None else factory.__name__
            if hasattr(x, "_metadata"):
                out["_metadata"] = self.value(x._metadata)
            return out
        if t in (bytes, bytearray):
            return {"type": type_name(x), "len": len(x), "sha256": sha256(bytes(x))}
        raise TypeError(f"golden_digest cannot describe {type_name(x)}")

    def array(self, a: np.ndarray) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": type_name(a),
            "object": self._object_index(a),
            "dtype": "object" if a.dtype == object else a.dtype.str,
            "shape": list(a.shape),
            "fortran": bool(a.ndim > 1 and a.flags.f_contiguous and not a.flags.c_contiguous),
        }
        if a.dtype == object:
            out["items"] = [self.value(v) for v in a.reshape(-1)]
        else:
            out["sha256"] = sha256(np.ascontiguousarray(a).tobytes())
        return out

    def tensor(self, t: torch.Tensor) -> dict[str, Any]:
        index = self._object_index(t)
        key = None
        if t.numel() and t.device.type != "meta":
            key = (str(t.device), t.untyped_storage().data_ptr())
        out: dict[str, Any] = {
            "type": type_name(t),
            "object": index,
            "dtype": str(t.dtype).removeprefix("torch."),
            "shape": list(t.shape),
            "device": str(t.device),
            "requires_grad": t.requires_grad,
            "sha256": sha256(tensor_bytes(t)),
        }
        if key is not None:
            out["storage"] = self._storages.setdefault(key, len(self._storages))
            out["stride"] = list(t.stride())
            out["storage_offset"] = t.storage_offset()
        self._tensors.append((out, key, index))
        return out

    def module(self, m: torch.nn.Module) -> dict[str, Any]:
        sd = m.state_dict()
        out: dict[str, Any] = {"type": type_name(m)}
        if hasattr(m, "config"):
            out["config"] = self.value(m.config)
        out["training"] = {name: sub.training for name, sub in m.named_modules()}
        out["parameters"] = [[n, self.value(p)] for n, p in m.named_parameters(remove_duplicate=False)]
        out["buffers"] = [[n, self.value(b)] for n, b in m.named_buffers(remove_duplicate=False)]
        out["tensor_attributes"] = [
            [f"{name}.{k}" if name else k, self.value(v)]
            for name, sub in m.named_modules()
            for k, v in vars(sub).items()
            if isinstance(v, torch.Tensor)
        ]
        out["state_dict_keys"] = list(sd)
        out["state_dict_metadata"] = self.value(getattr(sd, "_metadata", None))
        records = getattr(m, "training_records", None)
        if records is not None:  # (format 1.3; absent for older examples)
            out["training_records"] = self.value(records)
        return out

    def extras(self, x: pd.DataFrame | pd.Series) -> dict[str, Any]:
        return {"attrs": self.value(dict(x.attrs)), "allows_duplicate_labels": x.flags.allows_duplicate_labels}

    def frame(self, df: pd.DataFrame) -> dict[str, Any]:
        return {
            "type": type_name(df),
            "shape": list(df.shape),
            "columns": self.value(df.columns),
            "index": self.value(df.index),
            "dtypes": [str(d) for d in df.dtypes],
            "data": [self.values(df.iloc[:, i].array) for i in range(df.shape[1])],
            **self.extras(df),
        }

    def index(self, idx: pd.Index) -> dict[str, Any]:
        out: dict[str, Any] = {"type": type_name(idx)}
        if isinstance(idx, pd.MultiIndex):
            out["names"] = [self.value(n) for n in idx.names]
            out["levels"] = [self.value(level) for level in idx.levels]
            out["codes"] = [[int(c) for c in codes] for codes in idx.codes]
            return out
        out["name"] = self.value(idx.name)
        out["dtype"] = str(idx.dtype)
        if isinstance(idx, pd.RangeIndex):
            out.update(start=idx.start, stop=idx.stop, step=idx.step)
            return out
        out["freq"] = getattr(idx, "freqstr", None)
        out["values"] = self.values(idx.array)
        return out

    def values(self, arr: Any) -> dict[str, Any]:
        """A column's or index's storage: its class, dtype and items (categoricals: categories and codes)."""
        out: dict[str, Any] = {"type": type_name(arr), "dtype": str(arr.dtype)}
        if isinstance(arr, pd.Categorical):
            out["categories"] = self.value(arr.categories)
            out["ordered"] = bool(arr.ordered)
            out["codes"] = [int(c) for c in arr.codes]
            return out
        out["items"] = [self.value(v) for v in arr]
        if isinstance(arr, pd.arrays.NumpyExtensionArray):
            out["numpy_dtype"] = arr.to_numpy().dtype.str if arr.dtype != object else "object"
        return out


def _sort_key(desc: Any) -> str:
    return json.dumps(desc, sort_keys=True)
