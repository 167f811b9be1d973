"""ZANJ ConfiguredModels, read into the matching model class here.

ZANJ writes a model as its class name, its config (a SerializableDataclass), its state dict and some
information (module, source code, parameter count) that is shown but never run. The plan found the
class by name among ConfiguredModel subclasses already imported (zarchive's first, then ZANJ's own)
and checked that it declares a config class of the same name as the file's. The model is built by
the same code as a .zarc's (handlers.torch_model.build_model): on the meta device with the weights
assigned where the class allows it, else for real within a budget set by the weights the file
holds, so a config that asks for far more than that is refused before it allocates; the weights
must fit exactly (a ConfigMismatchError otherwise).
"""

from __future__ import annotations

from typing import Any

import torch

from ...engine.context import LoadContext
from ...engine.typeref import class_tag
from ...handlers.base import Handler
from ...handlers.torch_model import build_model
from ...handlers.torch_types import place
from .handlers import ZanjReading, build_zanj_dataclass, generic_model
from .nodes import model_config_class, model_for
from .schemas import ZanjModelSchema


class ZanjModelHandler(ZanjReading, ZanjModelSchema, Handler):
    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        tag, _ = model_for(node, ctx.policy.given, ctx.path_str)
        cls = ctx.resolve_class(tag, "ConfiguredModel")
        if cls is None:  # not here, and the read asked for unresolved="generic" (or unknown="dict")
            if self.unknown == "dict":
                return {k: ctx.load(v, k) for k, v in node.items() if k != "meta"}
            return generic_model(tag, node, ctx)
        cfg_cls = model_config_class(cls, node, ctx.path_str)
        ctx.path.append("zanj_model_config")
        try:
            config = build_zanj_dataclass(cfg_cls, class_tag(cfg_cls), node["zanj_model_config"], ctx)
        finally:
            ctx.path.pop()
        state = ctx.load(node["state_dict"], "state_dict")
        if not isinstance(state, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
        ):
            raise ctx.error("a ZANJ model's state_dict must map names to tensors")
        records = ctx.load(node.get("training_records"), "training_records")
        model = build_model(cls, config, state, ctx)
        if records is not None or hasattr(model, "training_records"):
            model.training_records = records
        # buffers the state dict leaves out (non-persistent ones) follow the weights
        device = place("cpu", ctx)
        if device is not None and device.type != "meta":
            model = model.to(device)
        if ctx.dtype is not None:
            model = model.to(ctx.dtype)
        return model


__all__ = ["ZanjModelHandler"]
