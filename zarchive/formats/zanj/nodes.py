"""The node types of a ZANJ file as schemas of the two-phase read (see zarchive.engine.plan).

ZANJ (through muutils) marks non-JSON values with a "__muutils_format__" key: arrays and tensors
(inline as nested lists, hex or base64, or as a `.npy` member), DataFrames and long lists (`.jsonl`
members), sets, SerializableDataclasses ("Name(SerializableDataclass)") and ConfiguredModels (the bare
class name). Each kind is a node type here, tagged "zanj.<kind>" (`zanj_tag`); JSON objects without the
key are plain dicts. A schema checks its node, records the members and classes it needs, and lists
and describes it, without constructing anything (the handlers in zanj.handlers and zanj.models
construct). Imports neither torch nor pandas.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from ...container import npy
from ...engine.typeref import class_tag
from ...errors import ConfigMismatchError, FormatError, UnknownTypeError
from ...nodes.base import NodeSchema, PlanSink
from .classes import SDC_SUFFIX, config_class_of, resolve_dataclass, resolve_model
from .container import loads_json
from .format_loaders import loader_code

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


# --- the schemas ---
class ZanjSchema(NodeSchema):
    """A ZANJ node type. `unknown`: what the read does with what it cannot match ("error", or
    "dict": formats it does not know, and classes not here, are read as plain dicts)."""

    kind: ClassVar[str]

    def __init__(self, unknown: Unknown = "error") -> None:
        if unknown not in ("error", "dict"):
            raise ValueError(f"unknown must be 'error' or 'dict', not {unknown!r}")
        self.unknown = unknown

    def _where(self, node: dict[str, Any]) -> str:
        return f" -> {node[REF_KEY]}" if isinstance(node.get(REF_KEY), str) else ""


class ZanjArraySchema(ZanjSchema):
    """{"__muutils_format__": "numpy.ndarray:<mode>", "dtype", "shape", "n_elements", "data" or "$ref"}"""

    name = "zanj.array"
    label = "ndarray"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        mode, dtype, shape = array_layout(node, p.path_str)
        if mode == "external":
            p.member(npy_member(node.get(REF_KEY), p.path_str))
        elif mode in ("array_list_meta", "zero_dim"):
            if math.prod(shape) > MAX_INLINE_ELEMENTS:
                raise p.error("inline array too large")
            p.inline_bytes(math.prod(shape) * dtype.itemsize)
        else:
            if not isinstance(node.get("data"), str):
                raise p.error("array data must be a string")
            p.inline_bytes(len(node["data"]))

    def summary(self, node: dict[str, Any]) -> str:
        dtype = str(node.get("dtype")).removeprefix("torch.")
        return f"{self.label} {dtype} {node.get('shape')}{self._where(node)}"


class ZanjTensorSchema(ZanjArraySchema):
    """An array node whose format is "torch.Tensor:<mode>"."""

    name = "zanj.tensor"
    label = "tensor"
    tensor = True


class ZanjFrameSchema(ZanjSchema):
    """{"__muutils_format__": "pandas.DataFrame", "columns", "data" (rows) or "$ref" (a .jsonl of rows)}"""

    name = "zanj.dataframe"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        if REF_KEY in node:
            p.member(jsonl_member(node[REF_KEY], p.path_str))
        elif not isinstance(node.get("data"), list):
            raise p.error("a DataFrame's rows must be a list of JSON objects")

    def summary(self, node: dict[str, Any]) -> str:
        rows = node.get("len(data)", len(node["data"]) if isinstance(node.get("data"), list) else "?")
        cols = node.get("columns")
        ncols = len(cols) if isinstance(cols, list) else "?"
        return f"DataFrame {rows} rows x {ncols} columns{self._where(node)}"


class ZanjPolarsFrameSchema(ZanjFrameSchema):
    """{"__muutils_format__": "polars.DataFrame:external", "columns", "$ref" (a .jsonl of rows) or "data"}"""

    name = "zanj.polars_dataframe"


class ZanjExternalListSchema(ZanjSchema):
    """{"__muutils_format__": "list:external" or "tuple:external", "$ref": a .jsonl member of nodes}"""

    name = "zanj.external_list"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        member = jsonl_member(node.get(REF_KEY), p.path_str)
        for i, item in enumerate(parse_jsonl(p.member_bytes(member), member)):
            p.visit(item, i)

    def summary(self, node: dict[str, Any]) -> str:
        return f"{node[FORMAT_KEY].partition(':')[0]}{self._where(node)}"


class ZanjSetSchema(ZanjSchema):
    """{"__muutils_format__": "set" or "frozenset", "data": [items]}"""

    name = "zanj.set"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        data = node.get("data")
        if not isinstance(data, list):
            raise p.error("a set's items must be a list")
        for i, item in enumerate(data):
            p.visit(item, i)

    def children(self, node: dict[str, Any]) -> dict[str, Any] | None:
        data = node.get("data")
        return {str(i): v for i, v in enumerate(data)} if isinstance(data, list) else None

    def summary(self, node: dict[str, Any]) -> str:
        data = node.get("data")
        return f"{node[FORMAT_KEY]}[{len(data) if isinstance(data, list) else '?'}]"


class ZanjDataclassSchema(ZanjSchema):
    """{"__muutils_format__": "Name(SerializableDataclass)", field: node, ...}"""

    name = "zanj.dataclass"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        tag, found = dataclass_for(node, p.given, p.path_str)
        p.use_class(tag, "dataclass", found=found)
        for k, v in fields_of(node).items():
            p.visit(v, k)

    def children(self, node: dict[str, Any]) -> dict[str, Any] | None:
        return fields_of(node)

    def summary(self, node: dict[str, Any]) -> str:
        return f"dataclass {node[FORMAT_KEY][: -len(SDC_SUFFIX)]} (SerializableDataclass)"


class ZanjModelSchema(ZanjSchema):
    """{"__muutils_format__": class name, "zanj_model_config": dataclass node, "state_dict": {name:
    tensor node}, "training_records": node, "meta": {"class_name", "module_name", ...}}; the meta
    (module, source code, parameter count) is shown, never run."""

    name = "zanj.model"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        cfg = node["zanj_model_config"]
        if node_kind(cfg) != "dataclass":
            raise p.error("a ZANJ model's zanj_model_config must be a SerializableDataclass")
        if p.tensors == "torch":
            tag, found = model_for(node, p.given, p.path_str)
            cls = p.use_class(tag, "ConfiguredModel", found=found)
            if cls is not None:  # its config is read as the class the model declares
                cfg_cls = model_config_class(cls, node, p.path_str)
                p.seed_class(class_tag(cfg_cls), "dataclass", cfg_cls)
        else:  # tensors="numpy": the model is not built, only its config and weights are read
            p.callable_used(node[FORMAT_KEY])
        p.visit(cfg, "zanj_model_config")
        p.visit(node["state_dict"], "state_dict")
        p.visit(node.get("training_records"), "training_records")

    def children(self, node: dict[str, Any]) -> dict[str, Any] | None:
        return fields_of(node)

    def summary(self, node: dict[str, Any]) -> str:
        params = node["meta"].get("num_params")
        extra = f", {params:,} parameters" if isinstance(params, int) else ""
        return f"model {node[FORMAT_KEY]} (ConfiguredModel{extra})"


class ZanjUnknownSchema(ZanjSchema):
    """A "__muutils_format__" this reader does not know (a custom ZANJ serializer wrote it?): read by
    a loader the reading program registered for it (zanj.format_loaders), else refused (or, with
    unknown="dict", read as a dict)."""

    name = "zanj.unknown"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        fmt = node.get(FORMAT_KEY)
        if not isinstance(fmt, str):
            raise p.error(f"{FORMAT_KEY!r} must be a string, not {type(fmt).__name__}")
        code = loader_code(fmt)  # declared, not called: a check runs only once trusted= allowed it
        if self.unknown == "error" and not code:
            raise UnknownTypeError(
                f"the ZANJ format {fmt[:100]!r} is not one this reader knows (a custom ZANJ serializer wrote it? "
                "register its loader with zarchive.compat.zanj.register_loader_handler before reading)",
                path=p.path_str,
            )
        for fn, what in code:
            p.use_code(fn, what)
        for k, v in node.items():
            p.visit(v, k)

    def children(self, node: dict[str, Any]) -> dict[str, Any] | None:
        return fields_of(node)

    def summary(self, node: dict[str, Any]) -> str:
        return f"{str(node.get(FORMAT_KEY))[:60]} (unknown ZANJ format)"


SCHEMAS: tuple[type[ZanjSchema], ...] = (
    ZanjArraySchema,
    ZanjTensorSchema,
    ZanjFrameSchema,
    ZanjPolarsFrameSchema,
    ZanjExternalListSchema,
    ZanjSetSchema,
    ZanjDataclassSchema,
    ZanjModelSchema,
    ZanjUnknownSchema,
)
