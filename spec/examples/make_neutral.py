#!/usr/bin/env python
"""Writes `<name>.neutral.json` for every example: the value it reads to, in a form any language can check.

    python spec/examples/make_neutral.py   # write the files that do not exist yet

Each file describes the decoded object tree node by node, with every value's object path (spec 3.1):
ints as decimal text, floats as their IEEE-754 bits, arrays and tensors by dtype, shape and the SHA-256
of their values in C order and little-endian byte order, classes by their class tags. No Python repr
appears anywhere. The format is documented in README.md (this folder); tests/test_spec_neutral.py
re-derives every file from the frozen archives and compares.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import json
import pathlib
import sys
import uuid
from collections import OrderedDict, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests"))

import golden_models  # noqa: F401  (the examples' classes must be imported for their tags to resolve)
import numpy as np
import pandas as pd
import torch
from golden_digest import float_bits as bits
from golden_digest import sha256 as sha
from golden_digest import tensor_bytes

import zarchive
from zarchive.engine.objpath import escape
from zarchive.engine.typeref import registered_classes

D = dict[str, Any]


def class_tag(cls: type) -> str:
    """The tag the archive records (spec 5.6): a registered name, else `module:QualName`."""
    natural = f"{cls.__module__}:{cls.__qualname__}"
    names = [name for name, c in registered_classes().items() if c is cls]
    return natural if not names or natural in names else min(names)


def child(path: str | None, component: str | int) -> str | None:
    """The object path of a child (spec 3.1); None below a value that has no path."""
    c = escape(str(component))
    return None if path is None else c if path == "" else f"{path}/{c}"


def key_name(key: Any) -> str:
    """A non-string dict key's path component (spec 3.1)."""
    if key is None or type(key) is bool:
        return json.dumps(key)
    if type(key) is int:
        return str(key)
    if type(key) is float:
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(key), json.dumps(key))
    if type(key) is tuple:
        return ",".join(key_name(k) if not isinstance(k, str) else k for k in key)
    raise TypeError(f"no neutral name for a {type(key).__name__} key")


def column_keys(labels: list[Any]) -> list[str]:
    """A frame's column keys (pandas.md 2.1): the label's text, made unique with `#<position>`."""

    def text(label: Any) -> str:
        if isinstance(label, str):
            return label
        return ",".join(text(i) for i in label) if isinstance(label, tuple) else str(label)

    keys: list[str] = []
    for i, label in enumerate(labels):
        key = text(label)[:200]
        if not key or key in keys:
            key += f"#{i}"
            while key in keys:
                key += "#"
        keys.append(key)
    return keys


def zone(tz: Any) -> Any:
    """A time zone: its IANA name where it has one, else its fixed offset and name."""
    key = getattr(tz, "key", None) or getattr(tz, "zone", None)  # zoneinfo, pytz
    if key is None and tz is dt.UTC:
        key = "UTC"
    if key is not None:
        return key
    offset = tz.utcoffset(None)
    return {"offset_seconds": None if offset is None else int(offset.total_seconds()), "name": tz.tzname(None)}


def dtype_text(dtype: Any) -> str:
    """pandas' name of a dtype; a zone-aware one as `datetime64[<unit>, <zone name, or +<seconds>s <name>>]`."""
    tz = getattr(dtype, "tz", None)
    if tz is None:
        return str(dtype)
    z = zone(tz)
    name = z if isinstance(z, str) else "{:+d}s {}".format(z["offset_seconds"], z["name"])
    return f"datetime64[{dtype.unit}, {name}]"


def le_bytes(a: np.ndarray) -> bytes:
    """An array's values in C order, little-endian."""
    a = np.ascontiguousarray(a)
    return a.astype(a.dtype.newbyteorder("<")).tobytes() if a.dtype.byteorder == ">" else a.tobytes()


class Describer:
    def __init__(self) -> None:
        self.first_path: dict[int, str] = {}  # id of an array or tensor -> the path it was first seen at
        self.keep: list[Any] = []  # keeps described objects alive, so ids stay unique
        self.storages: dict[tuple[str, int], list[tuple[D, int]]] = {}

    def run(self, value: Any) -> D:
        out = self.value(value, "")
        for users in self.storages.values():
            if len({i for _, i in users}) < 2:  # alone on its storage: its layout is not part of the value
                for desc, _ in users:
                    del desc["storage"]
        return out

    def value(self, x: Any, path: str | None) -> D:
        """`x` described, with its object path first (None: a value with no path of its own)."""
        out: D = {} if path is None else {"path": path}
        out.update(self.describe(x, path))
        if isinstance(x, (np.ndarray, torch.Tensor)) and path is not None:
            self.keep.append(x)
            first = self.first_path.setdefault(id(x), path)
            if first != path:
                out["same_as"] = first
        if "storage" in out:  # a tensor: note who uses its storage
            users = self.storages.setdefault(out["storage"].pop("key"), [])
            out["storage"] = {"first": users[0][0].get("path") if users else path, **out["storage"]}
            users.append((out, id(x)))
        return out

    def describe(self, x: Any, path: str | None) -> D:
        p = path if path is not None else ""
        t = type(x)
        if x is None:
            return {"kind": "null"}
        if t in (bool, str):
            return {"kind": t.__name__, "value": x}
        if t is int:
            return {"kind": "int", "value": str(x)}
        if t is float:
            return {"kind": "float", "bits": bits(x)}
        if t is complex:
            return {"kind": "complex", "real": bits(x.real), "imag": bits(x.imag)}
        if t in (bytes, bytearray):
            return {"kind": "bytes", "bytearray": t is bytearray, "length": len(x), "sha256": sha(bytes(x))}
        if isinstance(x, torch.nn.Module):
            return self.model(x, p)
        if isinstance(x, torch.Tensor):
            return self.tensor(x, p)
        if isinstance(x, np.ndarray):
            return self.array(x, p)
        if isinstance(x, np.generic):
            return {"kind": "numpy.scalar", "dtype": x.dtype.str, "hex": le_bytes(np.asarray(x)).hex()}
        if isinstance(x, np.dtype):
            return {"kind": "numpy.dtype", "value": "object" if x.kind == "O" else x.str}
        if t.__module__.split(".")[0] == "polars" and t.__name__ in ("DataFrame", "Series"):
            return self.polars(x, p)
        if isinstance(x, pd.DataFrame):
            return self.frame(x, p)
        if isinstance(x, pd.Series):
            return {"kind": "pandas.Series", "name": self.value(x.name, child(path, "(name)")), "dtype": dtype_text(x.dtype),
                    "index": self.index(x.index, child(path, "(index)")), "values": self.values(x.array),
                    **self.flags(x, path)}  # fmt: skip
        if isinstance(x, pd.Index):
            return self.index(x)  # (value() puts the path first)
        if isinstance(x, pd.api.extensions.ExtensionArray):
            return self.values(x)
        if isinstance(x, pd.Timestamp):
            tz = None if x.tz is None else zone(x.tz)
            return {"kind": "pandas.Timestamp", "iso": x.isoformat(), "unit": x.unit, "value": str(x.value), "tz": tz}
        if isinstance(x, pd.Timedelta):
            return {"kind": "pandas.Timedelta", "unit": x.unit, "value": str(x.value)}
        if isinstance(x, pd.Period):
            return {"kind": "pandas.Period", "freq": x.freqstr, "ordinal": str(x.ordinal)}
        if x is pd.NaT or x is pd.NA:
            return {"kind": "pandas.NaT" if x is pd.NaT else "pandas.NA"}
        if isinstance(x, enum.Enum):
            return {"kind": "enum", "class": class_tag(t), "name": x.name, "value": self.value(x.value, None)}
        if isinstance(x, (dt.datetime, dt.date, dt.time, dt.timedelta)):
            return self.datetime(x)
        if isinstance(x, pathlib.PurePath):
            return {"kind": "path", "flavour": "windows" if isinstance(x, pathlib.PureWindowsPath) else "posix",
                    "concrete": isinstance(x, pathlib.Path), "value": str(x)}  # fmt: skip
        if isinstance(x, (decimal.Decimal, uuid.UUID)):
            return {"kind": t.__name__.lower(), "value": str(x)}
        if isinstance(x, torch.device):
            return {"kind": "torch.device", "value": str(x)}
        if isinstance(x, torch.dtype):
            return {"kind": "torch.dtype", "value": str(x).removeprefix("torch.")}
        if isinstance(x, torch.Size):
            return {"kind": "torch.Size", "items": list(x)}
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            names = [f.name for f in dataclasses.fields(x) if hasattr(x, f.name)]
            return {"kind": "dataclass", "class": class_tag(t), "fields": self.fields(x, names, path)}
        if isinstance(x, tuple) and hasattr(t, "_fields"):
            return {"kind": "namedtuple", "class": class_tag(t), "fields": self.fields(x, t._fields, path)}
        if t in (list, tuple):
            return {"kind": t.__name__, "items": [self.value(v, child(path, i)) for i, v in enumerate(x)]}
        if t in (set, frozenset):
            items = sorted((self.value(v, None) for v in x), key=lambda d: json.dumps(d, sort_keys=True))
            return {"kind": "set", "frozen": t is frozenset, "items": items}
        if t in (dict, OrderedDict, defaultdict):
            return self.dict(x, path)
        raise TypeError(f"make_neutral cannot describe a {t.__module__}.{t.__qualname__}")

    def polars(self, x: Any, path: str | None) -> D:
        """A polars DataFrame (its columns) or Series: name, dtype as spec/polars.md writes it, values."""
        from zarchive.handlers.polars_ import dtype_json

        if type(x).__name__ == "DataFrame":
            return {
                "kind": "polars.DataFrame",
                "columns": [self.polars(s, child(path, s.name)) for s in x.get_columns()],
            }
        return {"kind": "polars.Series", "name": x.name, "dtype": dtype_json(x.dtype),
                "values": [self.value(v, None) for v in x.to_list()]}  # fmt: skip

    def fields(self, x: Any, names: Any, path: str | None) -> list[Any]:
        return [[n, self.value(getattr(x, n), child(path, n))] for n in names]

    def dict(self, x: dict[Any, Any], path: str | None) -> D:
        entries = []
        for k, v in x.items():  # a string key as itself; any other key described, at `<name>.key`
            if type(k) is str:
                entries.append([k, self.value(v, child(path, k))])
            else:
                name = key_name(k)
                entries.append([self.value(k, child(path, name + ".key")), self.value(v, child(path, name))])
        out: D = {"kind": "dict", "class": type(x).__name__, "entries": entries}
        if type(x) is defaultdict:
            out["default_factory"] = None if x.default_factory is None else x.default_factory.__name__
        if hasattr(x, "_metadata"):
            out["_metadata"] = self.value(x._metadata, child(path, "_metadata"))
        return out

    def datetime(self, x: Any) -> D:
        if isinstance(x, dt.timedelta):
            return {"kind": "timedelta", "days": x.days, "seconds": x.seconds, "microseconds": x.microseconds}
        kind = "datetime" if isinstance(x, dt.datetime) else type(x).__name__
        out: D = {"kind": kind, "iso": x.isoformat()}
        tz = getattr(x, "tzinfo", None)
        if tz is not None:
            out["tz"] = zone(tz)
        if getattr(x, "fold", 0):
            out["fold"] = 1
        return out

    def array(self, a: np.ndarray, path: str) -> D:
        out: D = {"kind": "ndarray", "dtype": "object" if a.dtype == object else a.dtype.str, "dtype_name": a.dtype.name,
                  "shape": list(a.shape), "order": "F" if a.ndim > 1 and a.flags.f_contiguous and not a.flags.c_contiguous else "C"}  # fmt: skip
        if a.dtype == object:
            out["items"] = [self.value(v, child(child(path, "items"), i)) for i, v in enumerate(a.reshape(-1))]
        else:
            out["sha256"] = sha(le_bytes(a))
        return out

    def tensor(self, t: torch.Tensor, path: str) -> D:
        out: D = {"kind": "tensor", "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                  "device": str(t.device), "parameter": isinstance(t, torch.nn.Parameter),
                  "requires_grad": t.requires_grad, "sha256": sha(tensor_bytes(t))}  # fmt: skip
        if t.numel() and t.device.type != "meta":
            key = (str(t.device), t.untyped_storage().data_ptr())
            out["storage"] = {"key": key, "offset": t.storage_offset(), "stride": list(t.stride())}
        return out

    def model(self, m: torch.nn.Module, path: str) -> D:
        sd = m.state_dict()
        in_sd = lambda n: child(child(path, "state_dict"), n) if n in sd or n == "_metadata" else None
        return {
            "kind": "model",
            "class": class_tag(type(m)),
            "config": self.value(m.config, child(path, "config")),
            "training": [[n, sub.training] for n, sub in m.named_modules()],
            "parameters": [[n, self.value(v, in_sd(n))] for n, v in m.named_parameters(remove_duplicate=False)],
            "buffers": [[n, self.value(v, in_sd(n))] for n, v in m.named_buffers(remove_duplicate=False)],
            "tensor_attributes": [
                [f"{name}.{k}" if name else k, self.value(v, None)]
                for name, sub in m.named_modules()
                for k, v in vars(sub).items()
                if isinstance(v, torch.Tensor)
            ],
            "state_dict_keys": list(sd),
            "state_dict_metadata": self.value(getattr(sd, "_metadata", None), in_sd("_metadata")),
            **self.records(m, path),
        }

    def records(self, m: torch.nn.Module, path: str) -> D:
        """A model's training_records (format 1.3), only where it has some."""
        records = getattr(m, "training_records", None)
        return {} if records is None else {"training_records": self.value(records, child(path, "training_records"))}

    def flags(self, x: pd.DataFrame | pd.Series, path: str | None) -> D:
        return {"attrs": self.value(dict(x.attrs), child(path, "(attrs)")),
                "allows_duplicate_labels": x.flags.allows_duplicate_labels}  # fmt: skip

    def frame(self, df: pd.DataFrame, path: str) -> D:
        keys = column_keys(list(df.columns))
        data = [{"path": child(path, k), **self.values(df.iloc[:, i].array)} for i, k in enumerate(keys)]
        return {"kind": "pandas.DataFrame", "shape": list(df.shape), "column_keys": keys,
                "columns": self.index(df.columns, child(path, "(columns)")), "index": self.index(df.index, child(path, "(index)")),
                "dtypes": [dtype_text(d) for d in df.dtypes], "data": data, **self.flags(df, path)}  # fmt: skip

    def index(self, idx: pd.Index, path: str | None = None) -> D:
        out: D = {} if path is None else {"path": path}
        out.update(kind="pandas.Index", **{"class": type(idx).__name__})
        if isinstance(idx, pd.MultiIndex):
            out["names"] = [self.value(n, None) for n in idx.names]
            out["levels"] = [self.index(level) for level in idx.levels]
            out["codes"] = [[int(c) for c in codes] for codes in idx.codes]
            return out
        out.update(name=self.value(idx.name, None), dtype=dtype_text(idx.dtype))
        if isinstance(idx, pd.RangeIndex):
            return {**out, "start": idx.start, "stop": idx.stop, "step": idx.step}
        out["freq"] = getattr(idx, "freqstr", None)
        out["values"] = self.values(idx.array)
        return out

    def values(self, arr: Any) -> D:
        """A column's or index's values: plain numpy data by digest, anything else item by item."""
        out: D = {
            "kind": "pandas.array",
            "class": type(arr).__name__,
            "dtype": dtype_text(arr.dtype),
            "length": len(arr),
        }
        if isinstance(arr, pd.Categorical):
            return {**out, "categories": self.index(arr.categories), "ordered": bool(arr.ordered),
                    "codes": [int(c) for c in arr.codes]}  # fmt: skip
        data = getattr(arr, "_ndarray", None)
        if isinstance(data, np.ndarray) and data.dtype != object and getattr(arr.dtype, "tz", None) is None:
            return {**out, "numpy_dtype": data.dtype.str, "sha256": sha(le_bytes(data))}
        out["items"] = [self.value(v, None) for v in arr]
        return out


def neutral(value: Any, example: str) -> D:
    return {"example": example, "format": "zarchive-neutral-1", "value": Describer().run(value)}


def dumps(doc: Any) -> str:
    """JSON with 1-space indents; on one line: what fits in 100 characters, and objects of plain values."""

    def flat_list(v: Any) -> bool:
        return isinstance(v, list) and not any(isinstance(i, (dict, list)) for i in v)

    def leaf(x: Any) -> bool:  # an object of plain values, or a [name, such object] pair
        if isinstance(x, list):
            return len(x) == 2 and isinstance(x[0], str) and leaf(x[1])
        return isinstance(x, dict) and all(not isinstance(v, (dict, list)) or flat_list(v) for v in x.values())

    def enc(x: Any, depth: int) -> str:
        flat = json.dumps(x, ensure_ascii=False)
        if len(flat) + depth <= 100 or not isinstance(x, (dict, list)) or not x or leaf(x):
            return flat
        pad = " " * (depth + 1)
        if isinstance(x, dict):
            inner = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {enc(v, depth + 1)}" for k, v in x.items()]
            return "{\n" + ",\n".join(inner) + "\n" + " " * depth + "}"
        return "[\n" + ",\n".join(pad + enc(v, depth + 1) for v in x) + "\n" + " " * depth + "]"

    return enc(doc, 0) + "\n"


def examples() -> dict[str, list[Path]]:
    """Example name -> its archives (`<name>.zarc` and, where it exists, `<name>.uncompressed.zarc`)."""
    out: dict[str, list[Path]] = {}
    for p in sorted(HERE.glob("*.zarc")):
        out.setdefault(p.name.split(".")[0], []).append(p)
    return out


def derive(archives: list[Path]) -> str:
    name = archives[0].name.split(".")[0]
    texts = {dumps(neutral(zarchive.read(p), name)) for p in archives}
    if len(texts) != 1:
        raise AssertionError(f"{[p.name for p in archives]} read to different values")
    return texts.pop()


def main() -> None:
    """Write the files of examples that have none (tests/test_spec_neutral.py checks the others)."""
    for name, archives in examples().items():
        target = HERE / f"{name}.neutral.json"
        if not target.exists():
            target.write_text(derive(archives), encoding="utf-8")
            print(f"wrote {target.name}")


if __name__ == "__main__":
    main()
