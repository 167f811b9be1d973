"""What a node of a ZANJ file is and holds, read from its JSON without constructing anything: its
kind, the class it names, an array's layout and the members it refers to.

ZANJ (through muutils) marks non-JSON values with a "__muutils_format__" key: arrays and tensors
(inline as nested lists, hex or base64, or as a `.npy` member), DataFrames and long lists (`.jsonl`
members), sets, SerializableDataclasses ("Name(SerializableDataclass)") and ConfiguredModels (the bare
class name). Each kind is a node type, tagged "zanj.<kind>" (`zanj_tag`); JSON objects without the
key are plain dicts. The schemas of those node types (zanj.schemas) check nodes with what is here; the
handlers (zanj.handlers, zanj.models) construct. Imports neither torch nor pandas.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...container import npy
from ...engine.typeref import class_tag
from ...errors import ConfigMismatchError, FormatError, UnknownTypeError
from .classes import SDC_SUFFIX, config_class_of, resolve_dataclass, resolve_model
from .container import loads_json

FORMAT_KEY = "__muutils_format__"
REF_KEY = "$ref"
MAX_INLINE_ELEMENTS = 1 << 26
ARRAY_MODES = ("external", "array_list_meta", "zero_dim", "array_hex_meta", "array_b64_meta")
Unknown = str  # "error": a format this reader does not know is an UnknownTypeError; "dict": read as a dict


def node_kind(node: Any) -> str:
    """What a ZANJ JSON node holds: 'json', 'list', 'dict', 'array', 'tensor', 'dataframe',
    'polars_dataframe', 'external_list', 'set', 'dataclass', 'model', or 'unknown' (a format this reader does not know)."""
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
    if base == "polars.DataFrame":
        return "polars_dataframe"
    if base in ("list", "tuple") and mode == "external":
        return "external_list"
    if fmt in ("set", "frozenset"):
        return "set"
    if fmt.endswith(SDC_SUFFIX) and len(fmt) > len(SDC_SUFFIX):
        return "dataclass"
    if is_model_node(node):
        return "model"
    return "unknown"


def zanj_tag(node: dict[str, Any]) -> str | None:
    """The node type of a JSON object in a ZANJ tree ("zanj.array", ...); None for a plain dict."""
    if FORMAT_KEY not in node:
        return None
    return "zanj." + node_kind(node)


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


# --- the classes a node names ---
def dataclass_for(node: dict[str, Any], given: Mapping[str, type], path: str) -> tuple[str, type | UnknownTypeError]:
    """The tag a ZANJ dataclass node's class goes by ('module:QualName' where the recorded name
    matches a class here, else the recorded name) and the class, or the error saying why none matched."""
    fmt = node[FORMAT_KEY]
    try:
        cls = resolve_dataclass(fmt[: -len(SDC_SUFFIX)], fields_of(node), given=given.values(), path=path)
    except UnknownTypeError as e:
        return fmt, e
    return class_tag(cls), cls


def model_for(node: dict[str, Any], given: Mapping[str, type], path: str) -> tuple[str, type | UnknownTypeError]:
    """Like dataclass_for, for a ZANJ model node (matched by class name, module and config class name)."""
    name = node[FORMAT_KEY]
    cfg = node.get("zanj_model_config")
    cfg_name = cfg[FORMAT_KEY][: -len(SDC_SUFFIX)] if isinstance(cfg, dict) and node_kind(cfg) == "dataclass" else None
    try:
        cls = resolve_model(name, node["meta"].get("module_name"), cfg_name, given=given.values(), path=path)
    except UnknownTypeError as e:
        return name, e
    return class_tag(cls), cls


def model_config_class(cls: type, node: dict[str, Any], path: str) -> type:
    """The config class `cls` declares, which must have the name of the file's config class."""
    cfg_name = node["zanj_model_config"][FORMAT_KEY][: -len(SDC_SUFFIX)]
    cfg_cls = config_class_of(cls)
    if cfg_cls is None or cfg_cls.__name__ != cfg_name:
        raise ConfigMismatchError(
            f"{cls.__qualname__} takes a {getattr(cfg_cls, '__qualname__', None)} config; the file's "
            f"{node[FORMAT_KEY]} has a {cfg_name} config",
            path=path,
        )
    return cfg_cls


# --- arrays ---
def array_dtype(text: Any, path: str) -> np.dtype:
    """The dtype a ZANJ array node records, if it is one an array may have (no objects, no records)."""
    if not isinstance(text, str) or len(text) > 40:
        raise FormatError("bad array dtype", path=path)
    try:
        dtype = npy.dtype_from_text(text.removeprefix("torch."))
    except FormatError:
        raise FormatError(f"unknown array dtype {text!r}", path=path) from None
    if dtype.kind not in npy.ALLOWED_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise FormatError(f"array dtype {text!r} is not allowed", path=path)
    return dtype


def array_layout(node: dict[str, Any], path: str) -> tuple[str, np.dtype, tuple[int, ...]]:
    """An array or tensor node's mode, dtype and shape, checked against each other."""
    mode = node[FORMAT_KEY].partition(":")[2]
    dtype = array_dtype(node.get("dtype"), path)
    shape = npy.check_shape(node.get("shape"), path=path)
    n = node.get("n_elements")
    if n is not None and (type(n) is not int or n != math.prod(shape)):
        raise FormatError(f"n_elements {str(n)[:20]} does not match shape {list(shape)}", path=path)
    if mode not in ARRAY_MODES:
        raise UnknownTypeError(f"unknown array mode {mode[:40]!r}", path=path)
    return mode, dtype, shape


def npy_member(name: Any, path: str) -> str:
    if not isinstance(name, str) or not name.endswith(".npy"):
        raise FormatError(f"an external array must refer to a .npy member, not {str(name)[:100]!r}", path=path)
    return name


def jsonl_member(name: Any, path: str) -> str:
    if not isinstance(name, str) or not name.endswith(".jsonl"):
        raise FormatError(f"external data must be a .jsonl member, not {str(name)[:100]!r}", path=path)
    return name


_BLANK_LINE = re.compile(r"(?:^|\n)[ \t\r]*(?:\n|$)")


def parse_jsonl(data: memoryview, member: str) -> list[Any]:
    """The values of a `.jsonl` member, one per line (a line holding two values is refused). Parsed
    as one JSON array of the lines (no list of line strings: 50 bytes a line more than the budget's
    JSON estimate counts, for lines of a few bytes)."""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"not valid UTF-8: {e}", member=member) from None
    if not text:
        return []
    body = text.removesuffix("\n")
    del text
    if _BLANK_LINE.search(body):
        raise FormatError("blank line in a .jsonl member", member=member)
    n_lines = body.count("\n") + 1
    values = loads_json("[" + body.replace("\n", ",") + "]", member=member)
    if len(values) != n_lines:
        raise FormatError(f"{n_lines} lines hold {len(values)} values", member=member)
    return list(values)


def nbytes_of(node: Any) -> int | None:
    """The size of an array or tensor node's data, from its dtype and shape, if they make sense."""
    if node_kind(node) not in ("array", "tensor"):
        return None
    try:
        dtype = npy.dtype_from_text(str(node.get("dtype")).removeprefix("torch."))
        shape = node.get("shape")
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            return None
        return math.prod(shape) * dtype.itemsize
    except (TypeError, FormatError):
        return None
