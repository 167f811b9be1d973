"""ZANJ's loader-extension API (`zanj.loading`) over zarchive.

A ZANJ user teaches ZANJ a type of their own with two handlers: a muutils `SerializerHandler` in
`ZANJ(handlers_pre=...)` that turns the object into JSON (with a "__muutils_format__" key), and a
`LoaderHandler` registered with `register_loader_handler` that turns that JSON back. Both keep
working here:

- saving with `zarchive.compat.zanj.ZANJ(handlers_pre=(serializer,))` stores what the serializer
  returns as a "zanj.custom" node (its values go through zarchive's handlers, so arrays in it become
  members), and reading such a node gives it to the loader registered for it;
- `.zanj` files written by the real ZANJ with such formats read with `zarchive.read` and
  `ZANJ().read`, through the same registered loaders.

A loader is picked, as ZANJ picks it, by the "__muutils_format__" of the JSON (its `uid`), else by
its `check`. It gets the JSON with the values in it already read (arrays are arrays, nested
dataclasses are objects); `load_item_recursive` leaves such values as they are, so loaders written for
ZANJ that call it keep working.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...formats.zanj.format_loaders import FormatLoader, register_format_loader

FORMAT_KEY = "__muutils_format__"
ObjectPath = tuple[str | int, ...]


@dataclass(frozen=True)
class LoaderHandler:
    """How to recognise (`check(json_item, path, zanj)`) and load (`load(json_item, path, zanj)`) a
    JSON item of your own format; `uid` is the "__muutils_format__" it loads."""

    check: Callable[[Any, ObjectPath, Any], bool]
    load: Callable[[Any, ObjectPath, Any], Any]
    uid: str
    source_pckg: str
    priority: int = 0
    desc: str = "(no description)"

    def serialize(self) -> dict[str, Any]:
        """A description of the handler, as metadata."""
        return {"uid": self.uid, "source_pckg": self.source_pckg, "priority": self.priority, "desc": self.desc}


LOADER_MAP: dict[str, LoaderHandler] = {}
LOADER_MAP_LOCK = threading.Lock()


def register_loader_handler(handler: LoaderHandler) -> None:
    """Use `handler` for its format in every later read (of a .zarc written through a ZANJ serializer
    handler, or of a .zanj file), replacing one of the same uid."""
    if not isinstance(handler, LoaderHandler):
        raise TypeError(f"register_loader_handler expects a LoaderHandler, not {type(handler).__name__}")
    with LOADER_MAP_LOCK:
        LOADER_MAP[handler.uid] = handler
    register_format_loader(
        FormatLoader(
            uid=handler.uid,
            load=lambda item, path: handler.load(item, path, None),
            check=lambda item: bool(handler.check(item, (), None)),
            load_code=handler.load,  # the user's functions: what audit() lists and trusted= checks
            check_code=handler.check,
        )
    )


def loader_handlers() -> dict[str, LoaderHandler]:
    """The registered loader handlers by uid (a copy)."""
    with LOADER_MAP_LOCK:
        return dict(LOADER_MAP)


def loader_code(json_item: Any) -> list[tuple[Callable[..., Any], str]]:
    """The registered functions that finding and running the loader of `json_item` may call, each
    with what it is: the load of the loader its "__muutils_format__" names, else the check (each is
    asked) and load of every registered loader. Nothing is called."""
    handlers = loader_handlers()
    if isinstance(json_item, Mapping):
        fmt = json_item.get(FORMAT_KEY)
        if isinstance(fmt, str) and fmt in handlers:
            return [(handlers[fmt].load, f"the ZANJ loader {fmt[:100]!r}")]
    out: list[tuple[Callable[..., Any], str]] = []
    for uid, handler in handlers.items():
        out.append((handler.check, f"the check of the ZANJ loader {uid[:100]!r}"))
        out.append((handler.load, f"the ZANJ loader {uid[:100]!r}"))
    return out


def get_item_loader(
    json_item: Any,
    path: ObjectPath = (),
    zanj: Any = None,
    error_mode: Any = None,
    *,
    allowed: Callable[[Callable[..., Any]], bool] | None = None,
) -> Any:
    """The registered LoaderHandler for `json_item`: by its "__muutils_format__", else the first whose
    check accepts it; None if there is none. `allowed`: only loaders whose functions it accepts
    (a read's plan: see loader_code)."""
    with LOADER_MAP_LOCK:
        handlers = dict(LOADER_MAP)
    if isinstance(json_item, Mapping):
        fmt = json_item.get(FORMAT_KEY)
        if isinstance(fmt, str) and fmt in handlers and (allowed is None or allowed(handlers[fmt].load)):
            return handlers[fmt]
    for handler in handlers.values():
        if allowed is not None and not (allowed(handler.check) and allowed(handler.load)):
            continue
        if _accepts(handler, json_item, path, zanj):
            return handler
    return None


def _accepts(handler: LoaderHandler, json_item: Any, path: ObjectPath, zanj: Any) -> bool:
    try:
        return bool(handler.check(json_item, path, zanj))
    except Exception:  # noqa: BLE001 - a check that cannot judge this item does not take it
        return False


def load_item_recursive(json_item: Any, path: ObjectPath = (), zanj: Any = None, **_: Any) -> Any:
    """`json_item` with registered loaders applied: a value zarchive already read (an array, an
    object) comes back as it is; a dict or list is walked."""
    handler = get_item_loader(json_item, path, zanj)
    if handler is not None:
        return handler.load(json_item, path, zanj)
    if isinstance(json_item, dict):
        return {k: load_item_recursive(v, (*path, k), zanj) for k, v in json_item.items()}
    if isinstance(json_item, list):
        return [load_item_recursive(v, (*path, i), zanj) for i, v in enumerate(json_item)]
    return json_item


__all__ = [
    "FORMAT_KEY",
    "LOADER_MAP",
    "LOADER_MAP_LOCK",
    "LoaderHandler",
    "ObjectPath",
    "get_item_loader",
    "load_item_recursive",
    "loader_code",
    "loader_handlers",
    "register_loader_handler",
]
