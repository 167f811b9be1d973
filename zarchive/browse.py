"""Walking an archive's object tree by object path, shared by every opened-archive class.

A subclass supplies the root node (`_root_node`) and how a node lists its children (`children`);
this gives it `node(path)`, `keys(path)` and `path in archive` without loading any value.
"""

from __future__ import annotations

from typing import Any

from .errors import MemberNotFoundError
from .nodes.base import MISSING
from .objpath import join_path, split_path


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
