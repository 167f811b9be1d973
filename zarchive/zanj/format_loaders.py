"""Loaders the reading program registers for ZANJ formats this reader does not know.

A ZANJ user who taught ZANJ a type of their own registered a loader for the "__muutils_format__"
their serializer writes (ZANJ's `register_loader_handler`). `zarchive.compat.zanj.loading` passes
such loaders here, so `.zanj` files holding those formats read too. A loader is chosen by the
format's exact name, else by its `check` of the node as stored; it gets the node with every value
in it already read (arrays as arrays) and the node's object path. Loaders are code of the reading
program, registered by it: a file can only pick among them by name, as it picks handlers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FormatLoader:
    """`load(node with its values read, object path)` for nodes whose format is `uid` (or that
    `check(node as stored)` accepts)."""

    uid: str
    load: Callable[[Any, tuple[str, ...]], Any]
    check: Callable[[Any], bool] | None = None


_lock = threading.Lock()
_loaders: dict[str, FormatLoader] = {}


def register_format_loader(loader: FormatLoader) -> FormatLoader:
    """Use `loader` for its format in every later read of a ZANJ file (replacing one of that uid)."""
    if not isinstance(loader, FormatLoader):
        raise TypeError(f"register_format_loader expects a FormatLoader, not {type(loader).__name__}")
    with _lock:
        _loaders[loader.uid] = loader
    return loader


def unregister_format_loader(uid: str) -> None:
    with _lock:
        _loaders.pop(uid, None)


def find_format_loader(fmt: str, node: Any) -> FormatLoader | None:
    """The loader registered for the format `fmt`, else the first whose check accepts `node`."""
    with _lock:
        exact = _loaders.get(fmt)
        others = list(_loaders.values())
    if exact is not None:
        return exact
    for loader in others:
        if loader.check is None:
            continue
        try:
            accepted = loader.check(node)
        except Exception:  # noqa: BLE001 - a check that cannot judge this node does not take it
            accepted = False
        if accepted is True:
            return loader
    return None


__all__ = ["FormatLoader", "find_format_loader", "register_format_loader", "unregister_format_loader"]
