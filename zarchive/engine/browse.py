"""Walking an archive's object tree by object path, shared by every opened-archive class, and the
interface every opened archive has (`OpenedArchive`).

A subclass supplies the root node (`_root_node`) and how a node lists its children (`children`);
this gives it `node(path)`, `keys(path)` and `path in archive` without loading any value.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import MemberNotFoundError
from ..nodes.base import MISSING
from .objpath import join_path, split_path
from .plan import Plan, ReadPolicy
from .verify_result import VerifyResult

if TYPE_CHECKING:
    from typing import Self


class TreeBrowser:
    def _root_node(self) -> Any:
        raise NotImplementedError

    def children(self, node: Any) -> dict[str, Any] | None:
        raise NotImplementedError

    def node(self, path: str = "") -> Any:
        """The manifest node at an object path ('a/b/0')."""
        node = self._root_node()
        walked: list[str] = []
        for comp in split_path(path):
            found = self.child(node, comp)
            if found is MISSING:
                raise MemberNotFoundError(f"no value {comp!r} here", path=join_path(walked))
            node = found
            walked.append(comp)
        return node

    def child(self, node: Any, key: str) -> Any:
        """One child node by path component (MISSING if there is none); subclasses may find it
        without listing every sibling."""
        kids = self.children(node)
        return kids[key] if kids is not None and key in kids else MISSING

    def keys(self, path: str = "") -> list[str]:
        """Children of the node at `path`, without loading anything."""
        kids = self.children(self.node(path))
        return list(kids) if kids is not None else []

    def __contains__(self, path: str) -> bool:
        try:
            self.node(path)
        except MemberNotFoundError:
            return False
        return True


class OpenedArchive(Protocol):
    """What `zarchive.open` returns, for a .zarc (lazy.LazyArchive), a ZANJ file (zanj.ZanjArchive)
    and a torch.save, safetensors or numpy file (foreign.ForeignArchive) alike: what the command
    line, progress bars and ConfiguredModel.read use."""

    format: str  # "zarchive", "zanj", or a foreign file's kind: "torch", "safetensors", "npy", "npz"

    @property
    def manifest(self) -> Any: ...
    @property
    def meta(self) -> dict[str, Any]: ...
    @property
    def members(self) -> dict[str, dict[str, Any]]: ...
    @property
    def policy(self) -> ReadPolicy: ...
    @property
    def on_read(self) -> Callable[[str, int], None] | None: ...
    @on_read.setter
    def on_read(self, fn: Callable[[str, int], None] | None) -> None: ...
    @property
    def closed(self) -> bool: ...

    # browsing, without loading
    def node(self, path: str = "") -> Any: ...
    def keys(self, path: str = "") -> list[str]: ...
    def children(self, node: Any) -> dict[str, Any] | None: ...
    def child(self, node: Any, key: str) -> Any: ...
    def describe(self, node: Any) -> str: ...
    def summary(self, path: str = "") -> str: ...
    def member_size(self, name: str) -> int: ...
    def model_tag(self, path: str = "") -> str | None: ...
    def is_tensor(self, node: Any) -> bool: ...
    def tensor_digests(self, objpath: str = "") -> dict[str, bytes]: ...
    def weights_hash(self, objpath: str = "") -> str: ...
    def __contains__(self, path: str) -> bool: ...

    # reading: a plan, then construction
    def plan(self, path: str = "", *, root_class: type | None = None) -> Plan: ...
    def audit(self, path: str = "") -> dict[str, list[str]]: ...
    def get(
        self, path: str = "", *, map_location: Any = None, dtype: Any = None, root_class: type | None = None
    ) -> Any: ...
    def __getitem__(self, path: str) -> Any: ...
    def load_node(self, node: Any, path: str = "", *, map_location: Any = None, dtype: Any = None) -> Any: ...
    def load(self, *, map_location: Any = None, dtype: Any = None, root_class: type | None = None) -> Any: ...
    def verify(self) -> VerifyResult: ...

    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
