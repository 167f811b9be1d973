"""ZANJ serializer handlers (muutils `SerializerHandler`s given in `ZANJ(handlers_pre=...)`) as
zarchive handlers.

ZANJ asks each serializer handler's `check(zanj, obj, path)` about every object it saves, before its
own handlers; `SerializerHandlerRegistry` does the same before zarchive's handler chain. What the
chosen serializer returns (JSON, usually with a "__muutils_format__" key, possibly holding arrays or
other objects) is saved through zarchive's handlers as the value of a "zanj.custom" node:

    {"$type": "zanj.custom", "uid": <the serializer's uid>, "value": NODE}

Reading gives the value, read, to the LoaderHandler registered for it (zarchive.compat.zanj.loading);
with no loader for it, the read fails (or, with unresolved="generic", returns the value as read).
The loaders are code of the reading program that the file picks: planning a node declares the
functions its read may call (loading.loader_code), which audit() lists and trusted= checks, and the
read picks only among those.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...engine.context import LoadContext, Node, SaveContext
from ...engine.registry import HandlerRegistry
from ...errors import FieldMismatchError, UnknownTypeError
from ...handlers.base import Handler
from ...nodes.base import NodeSchema, PlanSink
from .loading import get_item_loader, loader_code

NAME = "zanj.custom"


class ZanjCustomSchema(NodeSchema):
    """{"uid": the ZANJ serializer's uid, "value": NODE}"""

    name = NAME

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        if not isinstance(node.get("uid"), str):
            raise p.error("a 'zanj.custom' node needs the string 'uid' of the serializer that wrote it")
        if "value" not in node:
            raise p.error("a 'zanj.custom' node needs its 'value'")
        for fn, what in loader_code(node["value"]):
            p.use_code(fn, what)
        p.visit(node["value"], "value")

    def children(self, node: dict[str, Any]) -> dict[str, Any] | None:
        return {"value": node["value"]} if "value" in node else None

    def summary(self, node: dict[str, Any]) -> str:
        return f"ZANJ-serialized {str(node.get('uid'))[:100]}"


class ZanjCustomHandler(ZanjCustomSchema, Handler):
    """Reads "zanj.custom" nodes; saves for one ZANJ serializer handler (`serializer`), which the
    registry below chooses per object (by the serializer's own check)."""

    def __init__(self, serializer: Any = None, zanj: Any = None) -> None:
        self.serializer = serializer
        self.zanj = zanj

    def accepts(self, cls: type) -> bool:
        return False  # chosen per object by SerializerHandlerRegistry, never by class

    def save(self, obj: Any, ctx: SaveContext) -> Node:
        if self.serializer is None:
            raise ctx.error("no ZANJ serializer handler to save this object with")
        path = tuple(ctx.path)
        value = self.serializer.serialize_func(self.zanj, obj, path)
        registry = ctx.registry
        skip = registry.serializing if isinstance(registry, SerializerHandlerRegistry) else set()
        skip.add(id(value))  # the serializer's own output is saved by zarchive's handlers
        try:
            return {"$type": NAME, "uid": str(self.serializer.uid), "value": ctx.save(value, "value")}
        finally:
            skip.discard(id(value))

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        uid = node.get("uid")
        if not isinstance(uid, str):
            raise ctx.error("a 'zanj.custom' node needs a string 'uid'")
        value = ctx.load(node.get("value"), "value")
        path = tuple(ctx.path)
        loader = get_item_loader(value, path, self.zanj, allowed=ctx.planned_code)  # among those planned
        if loader is None:
            if ctx.policy.unresolved == "generic":
                return value
            raise UnknownTypeError(
                f"the value was saved by the ZANJ serializer handler {uid[:100]!r}, and no loader is registered "
                "for it: zarchive.compat.zanj.register_loader_handler(LoaderHandler(...)) before reading (or "
                "read with unresolved='generic' for the value as saved)",
                path=ctx.path_str,
            )
        try:
            return loader.load(value, path, self.zanj)
        except Exception as e:
            raise FieldMismatchError(
                f"the ZANJ loader {loader.uid[:100]!r} failed: {type(e).__name__}: {str(e)[:300]}", path=ctx.path_str
            ) from e


class SerializerHandlerRegistry(HandlerRegistry):
    """A handler registry that asks ZANJ serializer handlers first, object by object."""

    def __init__(self, custom: Sequence[Handler], serializers: Sequence[Any], zanj: Any) -> None:
        super().__init__([ZanjCustomHandler(None, zanj), *custom])
        self.serializers = tuple(ZanjCustomHandler(s, zanj) for s in serializers)
        self.zanj = zanj
        self.serializing: set[int] = set()

    def for_object(self, obj: Any) -> Handler | None:
        if self.serializers and id(obj) not in self.serializing:
            for adapter in self.serializers:
                try:
                    taken = adapter.serializer.check(self.zanj, obj, ())
                except Exception:  # noqa: BLE001 - as in ZANJ, a check that fails does not take the object
                    taken = False
                if taken:
                    return adapter
        return super().for_object(obj)


def is_serializer_handler(h: Any) -> bool:
    """A muutils/ZANJ SerializerHandler (duck-typed: muutils is not imported for this)."""
    return not isinstance(h, Handler) and all(hasattr(h, a) for a in ("check", "serialize_func", "uid"))


__all__ = ["NAME", "SerializerHandlerRegistry", "ZanjCustomHandler", "ZanjCustomSchema", "is_serializer_handler"]
