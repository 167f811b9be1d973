"""Turns the JSON tree of a ZANJ file back into Python objects.

ZANJ (through muutils) marks non-JSON values with a "__muutils_format__" key: arrays and tensors
(inline as nested lists, hex or base64, or as a `.npy` member), DataFrames and long lists (`.jsonl`
members), sets, SerializableDataclasses ("Name(SerializableDataclass)") and ConfiguredModels (the bare
class name). Each is rebuilt here from data alone: `.npy` members go through zarchive's own header
parser (never numpy's pickle fallback), and classes are looked up by name among classes already
imported or registered, never imported. Tuples come back as lists, as ZANJ writes them.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import math
import typing
import warnings
from typing import Any

import numpy as np

from ..container import npy
from ..errors import FieldMismatchError, FormatError, UnknownTypeError, ZArchiveError
from ..handlers.dataclass_ import apply_field_loaders, has_field_loader
from ..objpath import join_path
from ..options import ErrorMode
from .classes import SDC_SUFFIX, resolve_dataclass
from .container import ZanjZip, loads_json

FORMAT_KEY = "__muutils_format__"
REF_KEY = "$ref"
MAX_DEPTH = 200
MAX_INLINE_ELEMENTS = 1 << 26
_ARRAY_KINDS = npy.ALLOWED_KINDS


def node_kind(node: Any) -> str:
    """What a ZANJ JSON node holds: 'json', 'list', 'dict', 'array', 'tensor', 'dataframe',
    'external_list', 'set', 'dataclass', 'model', or 'unknown' (a format this reader does not know)."""
    if isinstance(node, list):
        return "list"
    if not isinstance(node, dict):
        return "json"
    fmt = node.get(FORMAT_KEY)
    if fmt is None:
        return "dict"
    if not isinstance(fmt, str):
        return "unknown"
    base, _, mode = fmt.partition(":")
    if base == "numpy.ndarray":
        return "array"
    if base == "torch.Tensor":
        return "tensor"
    if base == "pandas.DataFrame":
        return "dataframe"
    if base in ("list", "tuple") and mode == "external":
        return "external_list"
    if fmt in ("set", "frozenset"):
        return "set"
    if fmt.endswith(SDC_SUFFIX) and len(fmt) > len(SDC_SUFFIX):
        return "dataclass"
    if is_model_node(node):
        return "model"
    return "unknown"


def is_model_node(node: dict[str, Any]) -> bool:
    """A ConfiguredModel as ZANJ writes it: its class name as format, config, weights and meta."""
    fmt = node.get(FORMAT_KEY)
    meta = node.get("meta")
    return (
        isinstance(fmt, str)
        and fmt.isidentifier()
        and "zanj_model_config" in node
        and "state_dict" in node
        and isinstance(meta, dict)
        and meta.get("class_name") == fmt
    )


def fields_of(node: dict[str, Any]) -> dict[str, Any]:
    """A formatted node's entries without the format key (a dataclass's fields, a model's parts)."""
    return {k: v for k, v in node.items() if k != FORMAT_KEY}


class ZanjLoader:
    """One read of (part of) a ZANJ tree: the current object path, options, and loaded members."""

    def __init__(
        self,
        zip_: ZanjZip,
        *,
        error_mode: ErrorMode = ErrorMode.WARN,
        map_location: Any = None,
        dtype: Any = None,
        unknown: str = "error",
    ) -> None:
        if unknown not in ("error", "dict"):
            raise ValueError(f"unknown must be 'error' or 'dict', not {unknown!r}")
        self.zip = zip_
        self.error_mode = error_mode
        self.map_location = map_location
        self.dtype = dtype
        self.unknown = unknown
        self.path: list[str] = []
        self._arrays: dict[str, np.ndarray] = {}

    # --- bookkeeping ---
    @property
    def path_str(self) -> str:
        return join_path(self.path)

    def error(
        self, message: str, *, member: str | None = None, cls: type[ZArchiveError] = FormatError
    ) -> ZArchiveError:
        return cls(message, path=self.path_str, member=member)

    def mismatch(self, message: str) -> None:
        """Something the file has that the classes here cannot take: raise, warn or ignore per error_mode."""
        if self.error_mode is ErrorMode.EXCEPT:
            raise FieldMismatchError(message + " (error_mode='except')", path=self.path_str)
        if self.error_mode is ErrorMode.WARN:
            warnings.warn(f"{message} (at object path '/{self.path_str}')", stacklevel=4)

    # --- dispatch ---
    def load(self, node: Any, key: str | int | None = None, *, hint: Any = None) -> Any:
        """The object for `node`, at child `key` of the current path; `hint` is a declared field type."""
        if key is not None:
            self.path.append(str(key))
        try:
            if len(self.path) > MAX_DEPTH:
                raise self.error(f"nested more than {MAX_DEPTH} levels deep")
            kind = node_kind(node)
            if kind == "json":
                return node
            if kind == "list":
                return [self.load(v, i) for i, v in enumerate(node)]
            if kind == "dict":
                return {k: self.load(v, k) for k, v in node.items()}
            try:
                return getattr(self, "_load_" + kind)(node, hint)
            except ZArchiveError:
                raise
            except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as e:
                fmt = str(node.get(FORMAT_KEY))[:80]
                raise self.error(f"malformed {fmt!r} node: {type(e).__name__}: {str(e)[:200]}") from e
        finally:
            if key is not None:
                self.path.pop()

    def _load_unknown(self, node: dict[str, Any], hint: Any) -> Any:
        fmt = node.get(FORMAT_KEY)
        if not isinstance(fmt, str):
            raise self.error(f"{FORMAT_KEY!r} must be a string, not {type(fmt).__name__}")
        if self.unknown == "error":
            raise self.error(
                f"the ZANJ format {fmt[:100]!r} is not one this reader knows (a custom ZANJ loader wrote it?)",
                cls=UnknownTypeError,
            )
        return {k: self.load(v, k) for k, v in node.items()}

    # --- arrays and tensors ---
    def _dtype(self, text: Any) -> np.dtype:
        if not isinstance(text, str) or len(text) > 40:
            raise self.error("bad array dtype")
        try:
            dtype = np.dtype(text.removeprefix("torch."))
        except TypeError:
            raise self.error(f"unknown array dtype {text!r}") from None
        if dtype.kind not in _ARRAY_KINDS or dtype.fields is not None or dtype.subdtype is not None:
            raise self.error(f"array dtype {text!r} is not allowed")
        return dtype

    def _array(self, node: dict[str, Any]) -> np.ndarray:
        mode = node[FORMAT_KEY].partition(":")[2]
        dtype = self._dtype(node.get("dtype"))
        shape = npy.check_shape(node.get("shape"), path=self.path_str)
        n = node.get("n_elements")
        if n is not None and (type(n) is not int or n != math.prod(shape)):
            raise self.error(f"n_elements {str(n)[:20]} does not match shape {list(shape)}")
        if mode == "external":
            arr = self._external_array(node.get(REF_KEY), dtype, shape)
        elif mode in ("array_list_meta", "zero_dim"):
            if math.prod(shape) > MAX_INLINE_ELEMENTS:
                raise self.error("inline array too large")
            arr = np.array(node["data"], dtype=dtype)
        elif mode in ("array_hex_meta", "array_b64_meta"):
            text = node["data"]
            if not isinstance(text, str):
                raise self.error("array data must be a string")
            try:
                raw = bytes.fromhex(text) if mode == "array_hex_meta" else base64.b64decode(text, validate=True)
            except (ValueError, binascii.Error) as e:
                raise self.error(f"bad encoded array data: {e}") from None
            if len(raw) != math.prod(shape) * dtype.itemsize:
                raise self.error("encoded array bytes do not match its shape and dtype")
            arr = np.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)
        else:
            raise self.error(f"unknown array mode {mode[:40]!r}", cls=UnknownTypeError)
        if arr.shape != shape:
            raise self.error(f"array data has shape {list(arr.shape)}, the node says {list(shape)}")
        return arr

    def _external_array(self, name: Any, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        if not isinstance(name, str) or not name.endswith(".npy"):
            raise self.error(f"an external array must refer to a .npy member, not {str(name)[:100]!r}")
        if name in self._arrays:
            arr = self._arrays[name]
        else:
            data = self.zip.read(name, path=self.path_str)
            arr = npy.parse(memoryview(data), member=name)
            self._arrays[name] = arr
        if arr.dtype != dtype or arr.shape != shape:
            raise self.error(
                f"the .npy header says {arr.dtype.str}{list(arr.shape)}, the node {dtype.str}{list(shape)}",
                member=name,
            )
        return arr

    def _load_array(self, node: dict[str, Any], hint: Any) -> np.ndarray:
        return self._array(node)

    def _load_tensor(self, node: dict[str, Any], hint: Any) -> Any:
        import torch

        arr = self._array(node)
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        try:
            t = torch.from_numpy(arr)
        except TypeError as e:
            raise self.error(f"an array of dtype {arr.dtype} cannot be a torch tensor: {e}") from None
        return self._place(t)

    def target_device(self) -> Any:
        """Where the read's map_location sends tensors (ZANJ saved them all from the CPU); None: stay."""
        import torch

        loc = self.map_location
        if isinstance(loc, dict):
            loc = loc.get("cpu", loc.get(torch.device("cpu")))
        if loc is None or loc == "saved":
            return None
        try:
            return torch.device(loc)
        except (RuntimeError, TypeError) as e:
            raise self.error(f"bad map_location {str(loc)[:40]!r}: {e}") from None

    def _place(self, t: Any) -> Any:
        """Apply the read's map_location and dtype to a tensor."""
        import torch

        device = self.target_device()
        if device is not None:
            t = torch.empty(t.shape, dtype=t.dtype, device="meta") if device.type == "meta" else t.to(device)
        if self.dtype is not None and t.is_floating_point():
            t = t.to(self.dtype)
        return t

    # --- tables, lists, sets ---
    def _jsonl(self, name: Any) -> list[Any]:
        if not isinstance(name, str) or not name.endswith(".jsonl"):
            raise self.error(f"external data must be a .jsonl member, not {str(name)[:100]!r}")
        try:
            text = self.zip.read(name, path=self.path_str).decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.error(f"not valid UTF-8: {e}", member=name) from None
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if any(not line.strip() for line in lines):
            raise self.error("blank line in a .jsonl member", member=name)
        values = loads_json("[" + ",".join(lines) + "]", member=name)
        if len(values) != len(lines):
            raise self.error(f"{len(lines)} lines hold {len(values)} values", member=name)
        return values

    def _load_external_list(self, node: dict[str, Any], hint: Any) -> Any:
        items = [self.load(v, i) for i, v in enumerate(self._jsonl(node.get(REF_KEY)))]
        return tuple(items) if node[FORMAT_KEY].startswith("tuple") else items

    def _load_dataframe(self, node: dict[str, Any], hint: Any) -> Any:
        import pandas as pd

        records = self._jsonl(node.get(REF_KEY)) if REF_KEY in node else node.get("data")
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise self.error("a DataFrame's rows must be a list of JSON objects")
        columns = node.get("columns")
        if columns is None:
            columns = list(dict.fromkeys(k for r in records for k in r))
        if not isinstance(columns, list) or not all(
            isinstance(c, (str, int, float, bool)) or c is None for c in columns
        ):
            raise self.error("a DataFrame's columns must be a list of JSON scalars")
        keys = [_json_key(c) for c in columns]
        rows = [[r.get(k) for k in keys] for r in records]
        return pd.DataFrame.from_records(rows, columns=columns) if rows else pd.DataFrame(columns=columns)

    def _load_set(self, node: dict[str, Any], hint: Any) -> Any:
        data = node.get("data")
        if not isinstance(data, list):
            raise self.error("a set's items must be a list")
        items = [_hashable(self.load(v, i)) for i, v in enumerate(data)]
        try:
            return frozenset(items) if node[FORMAT_KEY] == "frozenset" else set(items)
        except TypeError as e:
            self.mismatch(f"a set holds unhashable items ({e}); it is read as a list")
            return items

    # --- classes ---
    def load_dataclass(self, node: dict[str, Any], cls: type) -> Any:
        """A dataclass node read as `cls` (a caller that knows the class, e.g. a model's config class)."""
        return self._load_dataclass(node, None, cls=cls)

    def _load_dataclass(self, node: dict[str, Any], hint: Any, cls: type | None = None) -> Any:
        name = node[FORMAT_KEY][: -len(SDC_SUFFIX)]
        stored = fields_of(node)
        if cls is None and isinstance(hint, type) and dataclasses.is_dataclass(hint) and hint.__name__ == name:
            cls = hint
        if cls is None:
            try:
                cls = resolve_dataclass(name, stored, path=self.path_str)
            except UnknownTypeError:
                if self.unknown == "error":
                    raise
                return {k: self.load(v, k) for k, v in node.items()}
        known = {f.name: f for f in dataclasses.fields(cls)}
        hints = _type_hints(cls)
        extras = set(getattr(cls, "_properties_to_serialize", ()) or ())
        for k in stored:
            if k not in known and k not in extras:
                self.mismatch(f"the file's {name} has a field {k[:100]!r} that {cls.__qualname__} lacks; it is dropped")
        loaded = {k: self.load(v, k, hint=hints.get(k)) for k, v in stored.items() if k in known}
        values = {k: self._field_value(v, known[k], hints.get(k), loaded) for k, v in loaded.items()}
        missing = [
            f.name
            for f in known.values()
            if f.init
            and f.name not in values
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise self.error(
                f"{cls.__qualname__} requires field(s) {', '.join(map(repr, missing))} the file's {name} lacks",
                cls=FieldMismatchError,
            )
        try:
            obj = cls(**{k: v for k, v in values.items() if known[k].init})
        except Exception as e:  # the class's __init__/__post_init__ rejected the file's values
            raise self.error(
                f"{cls.__qualname__}(...) failed on the file's fields: {type(e).__name__}: {e}", cls=FieldMismatchError
            ) from e
        for k, v in values.items():
            if not known[k].init:
                object.__setattr__(obj, k, v)
        return obj

    def _field_value(self, value: Any, f: dataclasses.Field[Any], hint: Any, loaded: dict[str, Any]) -> Any:
        """A field's loaded value after muutils' deserialize_fn / loading_fn, or a list made a tuple
        again where the field is declared a tuple (ZANJ writes tuples as lists)."""
        if has_field_loader(f):
            return apply_field_loaders(value, f, loaded, self.path)
        if isinstance(value, list) and (hint is tuple or typing.get_origin(hint) is tuple):
            return tuple(value)
        return value

    def _load_model(self, node: dict[str, Any], hint: Any) -> Any:
        from .models import load_model

        return load_model(self, node)


def _json_key(col: Any) -> str:
    """The key json.dumps gave a DataFrame column in each row record."""
    if isinstance(col, str):
        return col
    if col is None or isinstance(col, bool):
        return {None: "null", True: "true", False: "false"}[col]
    return repr(col) if isinstance(col, float) else str(col)


def _hashable(value: Any) -> Any:
    """Lists inside set items were tuples before ZANJ wrote them."""
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def _type_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001  # unresolvable forward references: fall back to what the fields record
        return {f.name: f.type for f in dataclasses.fields(cls) if isinstance(f.type, type)}
