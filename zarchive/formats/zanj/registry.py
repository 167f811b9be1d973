"""The handler set of a ZANJ read: what the planner and the load context of zarchive ask a
registry (zarchive.engine.registry.HandlerRegistry) for, over ZANJ's node types.

A JSON object is a node of type "zanj.<kind>" when it has a "__muutils_format__" key (see
zanj.nodes.node_kind), else a plain dict; lists and other JSON values are the same as in a .zarc.
Schemas import neither torch nor pandas; the model handler (torch) is imported when a model is built.
"""

from __future__ import annotations

from typing import Any

from ...handlers.base import Handler
from ...nodes.base import NodeSchema
from .handlers import HANDLERS, ZanjModelAsGeneric
from .nodes import Unknown, zanj_tag
from .schemas import SCHEMAS


class ZanjHandlers:
    """ZANJ's node types for one open file. `unknown`: "error", or "dict" (formats this reader does
    not know, and classes not here, read as plain dicts; with a ReadPolicy of unresolved="generic")."""

    def __init__(self, unknown: Unknown = "error") -> None:
        self.unknown = unknown
        self._schemas: dict[str, NodeSchema] = {s.name: s(unknown) for s in SCHEMAS}
        self._handler_classes: dict[str, type[Handler]] = {h.name: h for h in HANDLERS}
        self._handlers: dict[tuple[str, str], Handler] = {}

    def tag_of(self, node: dict[str, Any]) -> str | None:
        return zanj_tag(node)

    def schema_for(self, tag: Any) -> NodeSchema | None:
        return self._schemas.get(tag) if isinstance(tag, str) else None

    def for_tag(self, tag: Any, *, path: str | None = None, tensors: str = "torch") -> Handler:
        """The handler of a ZANJ node type; tensors="numpy": one that never imports torch (tensors
        are numpy arrays, models GenericObjects)."""
        key = (tag, tensors)
        handler = self._handlers.get(key)
        if handler is None:
            cls: type[Handler]
            if tag == "zanj.model" and tensors == "numpy":
                cls = ZanjModelAsGeneric
            elif tag == "zanj.model":
                from .models import ZanjModelHandler  # (torch: only once a model is built)

                cls = ZanjModelHandler
            else:
                cls = self._handler_classes[tag]
            handler = self._handlers[key] = cls(self.unknown)  # type: ignore[call-arg]
        return handler

    def for_object(self, obj: Any) -> None:
        """Nothing: ZANJ files are read, never written."""
        return


__all__ = ["ZanjHandlers"]
