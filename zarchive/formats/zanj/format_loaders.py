"""Loaders the reading program registers for ZANJ formats this reader does not know.

A ZANJ user who taught ZANJ a type of their own registered a loader for the "__muutils_format__"
their serializer writes (ZANJ's `register_loader_handler`). `zarchive.compat.zanj.loading` passes
such loaders here, so `.zanj` files holding those formats read too. A loader is chosen by the
format's exact name, else by its `check` of the node as stored; it gets the node with every value
in it already read (arrays as arrays) and the node's object path. Loaders are code of the reading
program, registered by it: a file can only pick among them by name, as it picks handlers. So the plan
of a read declares the functions a node may run (`loader_code`: audit() lists them, trusted= checks
them), and construction picks only among those (`find_format_loader(..., allowed=)`).
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
    # the reading program's functions behind `load` and `check` when these wrap them (an adapter
    # such as zarchive.compat.zanj's): what audit() lists and trusted= checks
    load_code: Callable[..., Any] | None = None
    check_code: Callable[..., Any] | None = None

    @property
    def load_fn(self) -> Callable[..., Any]:
        return self.load_code or self.load

    @property
    def check_fn(self) -> Callable[..., Any] | None:
        return self.check_code or self.check


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


def loader_code(fmt: str) -> list[tuple[Callable[..., Any], str]]:
    """The functions reading a node of format `fmt` may call, each with what it is: the load of the
    loader registered for `fmt`, else the check (each is asked) and load of every loader with a check."""
    with _lock:
        exact = _loaders.get(fmt)
        others = list(_loaders.values())
    if exact is not None:
        return [(exact.load_fn, f"the loader of the ZANJ format {exact.uid[:100]!r}")]
    out: list[tuple[Callable[..., Any], str]] = []
    for loader in others:
        check = loader.check_fn
        if check is not None:
            out.append((check, f"the check of the loader of the ZANJ format {loader.uid[:100]!r}"))
            out.append((loader.load_fn, f"the loader of the ZANJ format {loader.uid[:100]!r}"))
    return out


def find_format_loader(
    fmt: str, node: Any, *, allowed: Callable[[Callable[..., Any]], bool] | None = None
) -> FormatLoader | None:
    """The loader registered for the format `fmt`, else the first whose check accepts `node`.
    `allowed`: only loaders whose functions (load_fn, check_fn) it accepts (the plan's)."""

    def ok(*fns: Any) -> bool:
        return allowed is None or all(allowed(f) for f in fns)

    with _lock:
        exact = _loaders.get(fmt)
        others = list(_loaders.values())
    if exact is not None and ok(exact.load_fn):
        return exact
    for loader in others:
        if loader.check is None or not ok(loader.check_fn, loader.load_fn):
            continue
        try:
            accepted = loader.check(node)
        except Exception:  # noqa: BLE001 - a check that cannot judge this node does not take it
            accepted = False
        if accepted is True:
            return loader
    return None


__all__ = ["FormatLoader", "find_format_loader", "loader_code", "register_format_loader", "unregister_format_loader"]
