"""Which handler saves an object and which reads a node: one registry per ZArchive.

Handlers come from four places, asked in this order:
1. `handlers_pre` given to the ZArchive, then handlers registered process-wide with `register_handler`;
2. the built-in handlers for Python's own value types (str, int, list, dict, tuple, bytes, ...),
   by exact type;
3. handlers that installed packages declare in the `zarchive.handlers` entry-point group (the entry
   point's name is the handler's tag, its value the handler class): found without the user
   registering anything, imported only when a save or a read needs one;
4. the other built-in handlers (see handlers/catalog.py), each imported on first use;
5. for a subclass of `str` that none of them takes (`torch.__version__`, a TorchVersion), the `str`
   handler: it is saved as the string it is.

Save dispatch asks each handler whether it takes the object's class and caches the answer per class;
read dispatch looks the node's "$type" up by tag. A built-in family is never imported to answer a
save: its objects cannot exist before the module it `needs` is imported.
"""

from __future__ import annotations

import importlib
import sys
import threading
import warnings
from collections.abc import Sequence
from typing import Any

from ..errors import UnknownTypeError
from ..handlers.base import Handler
from ..handlers.catalog import BUILTIN_HANDLERS, BY_TAG, NUMPY_TENSOR_HANDLERS
from ..nodes import BUILTIN_SCHEMAS, NodeSchema

ENTRY_POINT_GROUP = "zarchive.handlers"
# Subclasses of these that no handler takes (by a custom handler, a plugin or a built-in row such as
# enums) are saved by the handler of the base type, as values of it: a reader gets the base type back.
VALUE_BASES: tuple[type, ...] = (str,)

_global_handlers: list[Handler] = []
_global_lock = threading.Lock()
_loaded: dict[str, Handler] = {}  # built-in handler instances by target (bounded by the catalog)
_entry_points: dict[str, Any] | None = None  # tag -> entry point, read once (reset: reload_entry_points)


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
        if not overwrite and handler.name in BY_TAG:
            raise ValueError(f"{handler.name!r} is a built-in handler name; pass overwrite=True to replace it")
        _global_handlers.append(handler)
    return handler


def unregister_handler(name: str) -> None:
    with _global_lock:
        _global_handlers[:] = [h for h in _global_handlers if h.name != name]


def registered_handlers() -> tuple[Handler, ...]:
    with _global_lock:
        return tuple(_global_handlers)


def builtin_handler(target: str) -> Handler:
    """The built-in handler at `target` ("module:Class" under zarchive.handlers), imported on first use."""
    handler = _loaded.get(target)
    if handler is None:
        module_name, _, class_name = target.partition(":")
        module = importlib.import_module(f"..handlers.{module_name}", __package__)  # our own catalog's names only
        handler = _loaded[target] = getattr(module, class_name)()
    return handler


def default_handlers() -> tuple[Handler, ...]:
    """Every built-in handler, imported (for tests and tools that list them all)."""
    return tuple(builtin_handler(b.target) for b in BUILTIN_HANDLERS)


def reload_entry_points() -> None:
    """Forget the `zarchive.handlers` entry points read so far (after installing a package)."""
    global _entry_points
    with _global_lock:
        _entry_points = None


def _entry_point_table() -> dict[str, Any]:
    global _entry_points
    with _global_lock:
        if _entry_points is None:
            from importlib import metadata  # (tens of milliseconds: only once a read or save needs it)

            found: dict[str, Any] = {}
            for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
                found.setdefault(ep.name, ep)
            _entry_points = found
        return _entry_points


def _load_entry_point(tag: str, ep: Any) -> Handler | None:
    """The handler an installed package declares for `tag`; a broken one is skipped with a warning."""
    try:
        obj = ep.load()
        handler = obj() if isinstance(obj, type) else obj
    except Exception as e:  # noqa: BLE001 - a broken plugin must not break unrelated saves and reads
        warnings.warn(f"zarchive handler entry point {tag!r} ({ep.value}) failed to load: {e}", stacklevel=3)
        return None
    if not isinstance(handler, Handler) or handler.name != tag:
        warnings.warn(
            f"zarchive handler entry point {tag!r} ({ep.value}) is not a Handler named {tag!r}; ignored", stacklevel=3
        )
        return None
    return handler


class HandlerRegistry:
    """The handlers of one ZArchive, with save dispatch cached per class."""

    def __init__(self, custom: Sequence[Handler] = ()) -> None:
        self.custom: tuple[Handler, ...] = tuple(custom)
        self._custom_by_tag: dict[str, Handler] = {}
        for h in self.custom:
            self._custom_by_tag.setdefault(h.name, h)  # earlier handlers win
        self._by_class: dict[type, Handler | None] = {}
        self._by_tag: dict[str, Handler] = {}
        self._plugins: list[Handler] | None = None
        self._exact: dict[type, str] = {c: b.target for b in BUILTIN_HANDLERS for c in b.exact}

    @classmethod
    def build(cls, handlers_pre: Sequence[Handler] = ()) -> HandlerRegistry:
        return cls([*handlers_pre, *registered_handlers()])

    # --- saving ---
    def for_object(self, obj: Any) -> Handler | None:
        t = type(obj)
        try:
            return self._by_class[t]
        except KeyError:
            pass
        found = self._dispatch(t)
        self._by_class[t] = found
        return found

    def _dispatch(self, t: type) -> Handler | None:
        for h in self.custom:
            if h.accepts(t):
                return h
        target = self._exact.get(t)
        if target is not None:
            return builtin_handler(target)
        for h in self._plugin_handlers():
            if h.accepts(t):
                return h
        for b in BUILTIN_HANDLERS:
            if b.exact or (b.needs is not None and b.needs not in sys.modules):
                continue
            h = builtin_handler(b.target)
            if h.accepts(t):
                return h
        for base in VALUE_BASES:  # a str subclass no handler claims (torch.__version__): saved as a str
            if issubclass(t, base):
                return builtin_handler(self._exact[base])
        return None

    def _plugin_handlers(self) -> list[Handler]:
        if self._plugins is None:
            table = _entry_point_table()
            loaded = (_load_entry_point(tag, ep) for tag, ep in table.items() if tag not in self._custom_by_tag)
            self._plugins = [h for h in loaded if h is not None]
        return self._plugins

    # --- reading ---
    def tag_of(self, node: dict[str, Any]) -> Any:
        """A manifest object's "$type" (None: a plain dict)."""
        tag = node.get("$type")
        if tag is None and any(k.startswith("$") for k in node):
            raise ValueError("object with '$' keys but no '$type'")
        return tag

    def for_tag(self, tag: Any, *, path: str | None = None, tensors: str = "torch") -> Handler:
        """The handler reading nodes whose "$type" is `tag` (tensors="numpy": one that never imports torch)."""
        handler = self.find_tag(tag, tensors=tensors)
        if handler is None:
            raise UnknownTypeError(
                f"no handler named {str(tag)[:100]!r} (written by a newer zarchive, or by a custom handler this "
                "reader does not have: install the package that provides it, or pass it in handlers_pre)",
                path=path,
            )
        return handler

    def find_tag(self, tag: Any, *, tensors: str = "torch") -> Handler | None:
        if not isinstance(tag, str):
            return None
        custom = self._custom_by_tag.get(tag)
        if custom is not None:
            return custom
        if tensors == "numpy" and tag in NUMPY_TENSOR_HANDLERS:
            return builtin_handler(NUMPY_TENSOR_HANDLERS[tag])
        found = self._by_tag.get(tag)
        if found is not None:
            return found
        builtin = BY_TAG.get(tag)
        if builtin is not None:
            found = builtin_handler(builtin.target)
        else:
            ep = _entry_point_table().get(tag)
            found = _load_entry_point(tag, ep) if ep is not None else None
        if found is not None:
            self._by_tag[tag] = found
        return found

    def schema_for(self, tag: Any) -> NodeSchema | None:
        """What checks and lists nodes tagged `tag` without constructing anything: a built-in schema
        (never imports torch or pandas), or the custom handler itself."""
        if not isinstance(tag, str):
            return None
        custom = self._custom_by_tag.get(tag)
        if custom is not None:
            return custom
        schema = BUILTIN_SCHEMAS.get(tag)
        return schema if schema is not None else self.find_tag(tag)
