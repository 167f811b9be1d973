"""The node types of a ZANJ file as schemas of the two-phase read (see zarchive.engine.plan): one per
kind of node (zanj.nodes.node_kind). A schema checks its node, records the members and classes it
needs, and lists and describes it, without constructing anything (the handlers in zanj.handlers and
zanj.models, which extend these schemas, construct). Imports neither torch nor pandas.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ...engine.typeref import class_tag
from ...errors import UnknownTypeError
from ...nodes.base import NodeSchema, PlanSink
from .classes import SDC_SUFFIX
from .format_loaders import loader_code
from .nodes import (
    FORMAT_KEY,
    MAX_INLINE_ELEMENTS,
    REF_KEY,
    Unknown,
    array_layout,
    dataclass_for,
    fields_of,
    jsonl_member,
    model_config_class,
    model_for,
    node_kind,
    npy_member,
    parse_jsonl,
)


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
