"""The ordered handler chain of one ZArchive, and process-wide user registrations.

Save dispatch walks the chain in order and takes the first handler that accepts the object's class;
the answer is cached per class. Load dispatch looks up the node's "$type" tag. Handlers given as
`handlers_pre` come first, then globally registered ones, then the built-in defaults.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from .errors import UnknownTypeError
from .handlers.base import Handler

_global_handlers: list[Handler] = []
_global_lock = threading.Lock()


def register_handler(handler: Handler, *, overwrite: bool = False) -> Handler:
    """Add `handler` to every ZArchive made after this call (before the built-in handlers)."""
    if not isinstance(handler, Handler):
        raise TypeError("register_handler expects a zarchive.Handler instance")
    with _global_lock:
        for i, h in enumerate(_global_handlers):
            if h.name == handler.name:
                if not overwrite:
                    raise ValueError(f"a handler named {handler.name!r} is already registered; pass overwrite=True")
                _global_handlers[i] = handler
                return handler
        if not overwrite and handler.name in {h.name for h in default_handlers()}:
            raise ValueError(f"{handler.name!r} is a built-in handler name; pass overwrite=True to replace it")
        _global_handlers.append(handler)
    return handler


def unregister_handler(name: str) -> None:
    with _global_lock:
        _global_handlers[:] = [h for h in _global_handlers if h.name != name]


def registered_handlers() -> tuple[Handler, ...]:
    with _global_lock:
        return tuple(_global_handlers)


def default_handlers() -> tuple[Handler, ...]:
    from .handlers import DEFAULT_HANDLERS

    return DEFAULT_HANDLERS


class HandlerRegistry:
    """An immutable chain of handlers with a per-class dispatch cache."""

    def __init__(self, handlers: Sequence[Handler]) -> None:
        self.handlers: tuple[Handler, ...] = tuple(handlers)
        self._by_tag: dict[str, Handler] = {}
        for h in self.handlers:
            self._by_tag.setdefault(h.name, h)  # earlier handlers win
        self._by_class: dict[type, Handler | None] = {}

    @classmethod
    def build(cls, handlers_pre: Sequence[Handler] = ()) -> HandlerRegistry:
        return cls([*handlers_pre, *registered_handlers(), *default_handlers()])

    def for_object(self, obj: Any) -> Handler | None:
        t = type(obj)
        try:
            return self._by_class[t]
        except KeyError:
            pass
        found = next((h for h in self.handlers if h.accepts(t)), None)
        self._by_class[t] = found
        return found

    def for_tag(self, tag: Any, *, path: str | None = None) -> Handler:
        handler = self._by_tag.get(tag) if isinstance(tag, str) else None
        if handler is None:
            raise UnknownTypeError(
                f"no handler named {str(tag)[:100]!r} (written by a newer zarchive, or by a custom "
                "handler not given to this reader)",
                path=path,
            )
        return handler
