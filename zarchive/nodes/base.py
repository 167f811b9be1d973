"""What a reader knows about one node type without constructing anything: its shape.

A `NodeSchema` checks a node (`plan`: validate it, report the classes, members and children it
needs to the planner, which visits the children, and the code of the reading program it would run:
see `PlanSink.use_code`), lists its children for browsing (`children`,
`child`) and describes it in one line (`summary`). Schemas import neither torch nor pandas, so
planning, auditing and browsing an archive never do; a `Handler` is a schema that can also save
and construct its type.

`since` is the format version that introduced the node type's current shape: a reader given a file
of a newer minor version whose node does not fit the shape it knows says so with a VersionError.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from ..errors import FormatError, UnknownTypeError

MISSING: Any = object()


class PlanSink(Protocol):
    """What a schema tells the planner (zarchive.engine.plan.Planner) while it checks a node."""

    @property
    def path_str(self) -> str: ...
    @property
    def tensors(self) -> str: ...
    def visit(self, node: Any, key: str | int | tuple[str | int, ...] | None = None) -> None: ...
    def walk_fields(self, node: dict[str, Any]) -> None: ...
    def error(self, message: str, *, member: str | None = None) -> FormatError: ...
    def member(self, name: Any, *, expected_size: int | None = None) -> dict[str, Any]: ...
    def member_bytes(self, name: str, expected_size: int | None = None) -> memoryview: ...
    def count_nodes(self, n: int) -> None: ...
    def inline_bytes(self, n: int) -> None: ...
    def callable_used(self, tag: str) -> None: ...
    @property
    def given(self) -> dict[str, type]: ...
    def use_class(self, tag: Any, kind: str, *, found: type | UnknownTypeError | None = None) -> type | None: ...
    def seed_class(self, tag: str, kind: str, cls: type) -> None: ...
    def use_code(self, code: Any, what: str) -> None:
        """Reading the node calls `code` (a class or callable of the reading program, not of the file:
        a registered loader, a handler): listed by audit, refused (UntrustedTypeError) unless trusted."""
        ...


class NodeSchema:
    name: ClassVar[str]
    """The stable tag recorded as "$type" in the manifest. Never change it once files exist."""
    since: ClassVar[str] = "1.0"
    tensor: ClassVar[bool] = False
    """Whether a node of this type reads as one tensor: the weights hash (zarchive.weights_hash) and
    tools that collect weights fetch exactly these nodes. A node type that stores a tensor another
    way (compressed, quantised, from another format) sets it."""

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        """Check `node` and visit its child nodes through `p` (default: every nested JSON value,
        with the member it names recorded). Constructs and calls nothing: every class the read of
        this node would construct is declared through `p.use_class`, every other callable it would
        call through `p.use_code` (a schema outside zarchive is declared by the planner itself: it is
        the code that reads its nodes). audit() lists what is declared; trusted= checks it."""
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


class SchemaSource(Protocol):
    """Where the planner finds the schema of a node type (zarchive.engine.registry.HandlerRegistry, or
    zarchive.formats.zanj.handlers.ZanjHandlers for a ZANJ file)."""

    def tag_of(self, node: dict[str, Any]) -> Any:
        """The node type of a JSON object (None: a plain dict); a ValueError for an object that is
        neither."""
        ...

    def schema_for(self, tag: Any) -> NodeSchema | None: ...
