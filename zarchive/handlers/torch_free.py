"""What torch's other node types become when a read asks for tensors="numpy" (torch is then never
imported): a device and a dtype as their names, a torch.Size as a tuple of ints, and a
ConfiguredModel as a GenericObject holding its config and its state dict of numpy arrays."""

from __future__ import annotations

from typing import Any

from ..engine.context import LoadContext, Node, SaveContext
from ..engine.generic import GenericObject
from ..nodes.arrays import TorchDeviceSchema, TorchDtypeSchema, TorchSizeSchema
from ..nodes.classes import ConfiguredModelSchema
from .base import Handler, expect


class _ReadOnly(Handler):
    def accepts(self, cls: type) -> bool:
        return False

    def save(self, obj: Any, ctx: SaveContext) -> Node:
        raise ctx.error(f"{self.name!r} values are saved by torch's handlers, not by tensors='numpy' reading")


class DeviceAsText(TorchDeviceSchema, _ReadOnly):
    def load(self, node: dict[str, Any], ctx: LoadContext) -> str:
        return str(expect(node, "value", str, ctx))[:64]


class DtypeAsText(TorchDtypeSchema, _ReadOnly):
    def load(self, node: dict[str, Any], ctx: LoadContext) -> str:
        return str(expect(node, "value", str, ctx))[:64]


class SizeAsTuple(TorchSizeSchema, _ReadOnly):
    def load(self, node: dict[str, Any], ctx: LoadContext) -> tuple[int, ...]:
        items = expect(node, "items", list, ctx)
        if not all(type(i) is int for i in items):
            raise ctx.error("torch.Size items must be ints")
        return tuple(items)


class ModelAsGeneric(ConfiguredModelSchema, _ReadOnly):
    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        fields = {
            "config": ctx.load(node.get("config"), "config"),
            "state_dict": ctx.load(node.get("state_dict"), "state_dict"),
            "training": expect(node, "training", bool, ctx),
        }
        if "training_records" in node:
            fields["training_records"] = ctx.load(node["training_records"], "training_records")
        return GenericObject(str(node.get("class")), fields, "ConfiguredModel")
