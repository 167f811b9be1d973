"""Stable names for classes ("module:QualName") and the rule for turning a name back into a class.

A name read from a file is never imported and never evaluated. It resolves to a class only if that
class was registered with `register_class`, or its module is already imported (in `sys.modules`) and
the attribute path leads to a class that is a subclass of what the caller expects (a dataclass, an
Enum, a ConfiguredModel...). Anything else is an UnknownTypeError.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import UnknownTypeError
from . import main_classes

T = TypeVar("T", bound=type)

_registered: dict[str, type] = {}
_lock = threading.Lock()


def class_tag(cls: type) -> str:
    """The stable name of a class, as the manifest records it."""
    return f"{cls.__module__}:{cls.__qualname__}"


def code_tag(code: Any) -> str:
    """The name audit() lists and trusted= takes for a class or callable a read runs: its
    "module:QualName" (a function's own; a bound method's is its function's)."""
    fn = getattr(code, "__func__", code)
    return f"{getattr(fn, '__module__', None) or '?'}:{getattr(fn, '__qualname__', None) or type(fn).__qualname__}"


def is_zarchive_code(code: Any) -> bool:
    """Whether a class or callable is zarchive's own (defined in the zarchive package)."""
    module = getattr(getattr(code, "__func__", code), "__module__", None) or ""
    return module == "zarchive" or module.startswith("zarchive.")


def register_class(cls: T, *, name: str | None = None, overwrite: bool = False) -> T:
    """Make `cls` loadable by its tag (or `name`), even when defined in a function or __main__."""
    tag = name or class_tag(cls)
    with _lock:
        existing = _registered.get(tag)
        if existing is not None and existing is not cls and not overwrite:
            raise ValueError(f"{tag!r} is already registered to {existing!r}; pass overwrite=True")
        _registered[tag] = cls
    return cls


def unregister_class(tag_or_cls: str | type) -> None:
    tag = tag_or_cls if isinstance(tag_or_cls, str) else class_tag(tag_or_cls)
    with _lock:
        _registered.pop(tag, None)


def registered_classes() -> dict[str, type]:
    """A read-only snapshot of explicitly registered classes."""
    with _lock:
        return dict(_registered)


def resolve_class(tag: Any, accept: Callable[[type], bool], *, what: str, path: str | None = None) -> type:
    """The class named by `tag`, if it is registered or already imported and `accept`s it."""
    if not isinstance(tag, str) or tag.count(":") != 1 or len(tag) > 1000:
        raise UnknownTypeError(f"bad class name {str(tag)[:100]!r}", path=path)
    with _lock:
        cls = _registered.get(tag)
    if cls is None:
        module_name, qualname = tag.split(":")
        module = sys.modules.get(module_name)
        if "<locals>" in qualname:
            local = main_classes.saved_local_class(tag)  # this process saved it: that very class
            if local is None or not accept(local):
                raise UnknownTypeError(main_classes.local_not_found(tag, what), path=path)
            return local
        if module is None:
            raise UnknownTypeError(
                f"{what} class {tag!r} is not available: its module is not imported and the class is not "
                "registered (import it, or zarchive.register_class it, before reading)",
                path=path,
            )
        obj: Any = module
        for part in qualname.split("."):
            if part.startswith("<") or not part.isidentifier():
                raise UnknownTypeError(main_classes.local_not_found(tag, what), path=path)
            obj = obj.__dict__.get(part) if hasattr(obj, "__dict__") else None
            if obj is None:
                if module_name == "__main__":
                    raise UnknownTypeError(main_classes.main_not_found(tag, qualname, what), path=path)
                raise UnknownTypeError(f"{what} class {tag!r} was not found in its module", path=path)
        cls = obj
        if module_name == "__main__" and isinstance(cls, type) and accept(cls):
            main_classes.note_main_resolution(tag, cls, what)  # the notebook re-run case: say so
    if not isinstance(cls, type) or not accept(cls):
        raise UnknownTypeError(f"{tag!r} is not a {what} class", path=path)
    return cls


def is_dataclass_class(cls: type) -> bool:
    # an Enum with a dataclass mixin is an Enum member, saved by name by the enum handler
    return isinstance(cls, type) and dataclasses.is_dataclass(cls) and not issubclass(cls, enum.Enum)


def is_namedtuple_class(cls: type) -> bool:
    return (
        isinstance(cls, type)
        and issubclass(cls, tuple)
        and cls is not tuple
        and isinstance(getattr(cls, "_fields", None), tuple)
        and callable(getattr(cls, "_make", None))
    )


def is_enum_class(cls: type) -> bool:
    return isinstance(cls, type) and issubclass(cls, enum.Enum)


def is_model_class(cls: type) -> bool:
    """A ConfiguredModel subclass: zarchive's, or one still deriving from zanj's own (a half-migrated
    project). Such a class exists only once torch (and zanj) is imported, so this imports neither."""
    if "torch" not in sys.modules or not isinstance(cls, type):
        return False
    base = getattr(sys.modules.get("zarchive.models.configured"), "ConfiguredModelBase", None)
    if base is not None and issubclass(cls, base):
        return True
    zanj_base = getattr(sys.modules.get("zanj.torchutil"), "ConfiguredModel", None)  # zanj's own, if imported
    return isinstance(zanj_base, type) and issubclass(cls, zanj_base)


# what a class node may name, by kind: (what to call it in messages, the test a class must pass)
CLASS_KINDS: dict[str, tuple[str, Callable[[type], bool]]] = {
    "dataclass": ("dataclass", is_dataclass_class),
    "namedtuple": ("named tuple", is_namedtuple_class),
    "enum": ("Enum", is_enum_class),
    "ConfiguredModel": ("ConfiguredModel", is_model_class),
}
