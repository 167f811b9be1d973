"""The handler contract: one object family, both directions, under one stable name.

A handler
- says which classes it saves (`accepts(cls)`: decided by the class alone, so dispatch can be cached),
- turns an object into a manifest node (`save`): plain JSON, or a dict whose "$type" is `name`,
  possibly pointing at members it planned through the context,
- turns a node carrying its `name` back into an equal object (`load`), trusting nothing in the node,
- optionally lists a node's children (`children`) so a lazy reader can walk into it without loading it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from ..browse import MISSING

if TYPE_CHECKING:
    from ..context import LoadContext, Node, SaveContext


class Handler(ABC):
    name: ClassVar[str]
    """The stable tag recorded as "$type" in the manifest. Never change it once files exist."""

    @abstractmethod
    def accepts(self, cls: type) -> bool:
        """Whether objects of exactly this class are saved by this handler."""

    @abstractmethod
    def save(self, obj: Any, ctx: SaveContext) -> Node:
        """The manifest node for `obj`."""

    @abstractmethod
    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        """The object for a node whose "$type" is this handler's name."""

    def children(self, node: dict[str, Any]) -> dict[str, Any] | None:
        """The node's child nodes by path component, for lazy navigation (None: a leaf)."""
        return None

    def child(self, node: dict[str, Any], key: str) -> Any:
        """One child node by path component (MISSING if there is none); override where listing
        every child to find one is costly."""
        kids = self.children(node)
        return kids[key] if kids is not None and key in kids else MISSING

    def summary(self, node: dict[str, Any]) -> str:
        """A one-line description for listings (`zarchive show`)."""
        return self.name

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
