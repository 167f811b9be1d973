"""What a reader knows about one node type without constructing anything: its shape.

A `NodeSchema` checks a node (`plan`: validate it, report the classes, members and children it
needs to the planner, which visits the children), lists its children for browsing (`children`,
`child`) and describes it in one line (`summary`). Schemas import neither torch nor pandas, so
planning, auditing and browsing an archive never do; a `Handler` is a schema that can also save
and construct its type.

`since` is the format version that introduced the node type's current shape: a reader given a file
of a newer minor version whose node does not fit the shape it knows says so with a VersionError.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ..plan import Planner

MISSING: Any = object()


class NodeSchema:
    name: ClassVar[str]
    """The stable tag recorded as "$type" in the manifest. Never change it once files exist."""
    since: ClassVar[str] = "1.0"

    def plan(self, node: dict[str, Any], p: Planner) -> None:
        """Check `node` and visit its child nodes through `p` (default: every nested JSON value,
        with the member it names recorded). Constructs nothing."""
        p.walk_fields(node)

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


def is_int(x: Any) -> bool:
    return type(x) is int


def is_shape(x: Any) -> bool:
    return isinstance(x, list) and all(type(d) is int and d >= 0 for d in x)
