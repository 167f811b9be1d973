"""The handler contract: one object family, both directions, under one stable name.

A handler is a node schema (see nodes/base.py: checking, planning and browsing its nodes) that also
- says which classes it saves (`accepts(cls)`: decided by the class alone, so dispatch can be cached),
- turns an object into a manifest node (`save`): plain JSON, or a dict whose "$type" is `name`,
  possibly pointing at members it planned through the context,
- turns a node carrying its `name` back into an equal object (`load`), trusting nothing in the node,
- optionally, fills memory the caller already has (`load_into`: a tensor read straight into the
  destination's memory); handlers that cannot say False, and the caller loads and copies.

`version` is the handler's own version of its node shape (for handlers outside zarchive): nodes of
a handler whose version is above 1 record it as "$version", and a reader whose handler is older
refuses them with a VersionError instead of misreading them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from ..nodes.base import NodeSchema

if TYPE_CHECKING:
    from ..engine.context import LoadContext, Node, SaveContext


class Handler(NodeSchema, ABC):
    version: ClassVar[int] = 1

    @abstractmethod
    def accepts(self, cls: type) -> bool:
        """Whether objects of exactly this class are saved by this handler."""

    @abstractmethod
    def save(self, obj: Any, ctx: SaveContext) -> Node:
        """The manifest node for `obj`."""

    @abstractmethod
    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        """The object for a node whose "$type" is this handler's name."""

    def load_into(self, node: dict[str, Any], ctx: LoadContext, out: Any) -> bool:
        """Fill `out` with the value of `node` without building it first; False where this handler
        cannot (the default), and the caller loads the value and copies it into `out`."""
        return False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def expect(node: dict[str, Any], key: str, kind: type | tuple[type, ...], ctx: LoadContext) -> Any:
    """node[key], checked to be of `kind`; a FormatError naming the node otherwise."""
    if key not in node:
        raise ctx.error(f"{node.get('$type')!r} node lacks {key!r}")
    value = node[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, (int,))):
        raise ctx.error(f"{key!r} of a {node.get('$type')!r} node has the wrong type ({type(value).__name__})")
    return value
