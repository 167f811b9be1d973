"""What the describers of each node family need of the neutral form's walk (spec/neutral.md): the
`Walker` a describer calls back (to describe a child, fetch a leaf's value through the archive's
reader), what the walk needs of an opened archive (`NodeSource`), and child paths.

The walk itself is `zarchive.neutral.describe.Describer`; the describers of node families
(`builtins`, `arrays`, `classes`, `tables`, `arrow`) are functions `(walker, node, path) -> DESC`
that know the walk only through this protocol, so none of them imports the walk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..container.budget import ReadBudget
from ..engine.objpath import escape
from .encode import D


class NodeSource(Protocol):
    """What the walk needs of an opened archive (zarchive.engine.planned_archive.PlannedArchive has it)."""

    def node(self, path: str = "") -> Any: ...
    def plan(self, path: str = "", *, root_class: type | None = None) -> Any: ...
    def load_node(
        self, node: Any, path: str = "", *, map_location: Any = None, dtype: Any = None, whole: bool = False
    ) -> Any: ...
    @property
    def read_budget(self) -> ReadBudget | None: ...


class Walker(Protocol):
    """One walk over an archive's nodes, as a node family's describer sees it."""

    arrays: dict[str, str]  # .npy member -> path of the first array node naming it
    identities: dict[str, str]  # tensor identity -> path of its first node
    tensors: list[tuple[D, str, tuple[str, str], str, bool]]  # desc, path, entry, identity, nonempty

    def value(self, node: Any, path: str) -> D:
        """The DESC of any node (with its `path`)."""
        ...

    def load(self, node: Any, path: str) -> Any:
        """A leaf's value, read through the archive (on the CPU)."""
        ...

    def member_bytes(self, ref: Any, nbytes: Any, path: str) -> bytes:
        """A member's decoded bytes (checked and budgeted)."""
        ...

    def member_digest(self, ref: Any, nbytes: Any, path: str) -> tuple[int, str]:
        """(length, SHA-256) of a member's decoded bytes."""
        ...

    def hashed_values(self, node: D, path: str) -> tuple[list[int], str]:
        """(shape, SHA-256 of the values) of an array or tensor node."""
        ...

    def lines(self, node: dict[str, Any], path: str) -> list[Any]:
        """The items of a `list` node."""
        ...

    def sequence(self, items: Any, path: str) -> list[Any]:
        """The nodes of a NODE that reads as a list."""
        ...


NodeDescriber = Callable[[Walker, D, str], D]  # a node family's describer of one `$type`


def child(path: str, component: str | int) -> str:
    """The object path of a child (spec 3.1): components escaped, joined by `/`."""
    c = escape(str(component))
    return c if path == "" else f"{path}/{c}"


__all__ = ["NodeDescriber", "NodeSource", "Walker", "child"]
