"""Classes that another program cannot find by their tag: defined in `__main__` (a script, a
notebook) or inside a function.

Saving an object of such a class works, but the file names the class as `__main__:Config` or
`train:run.<locals>.Config`, which a program reading it later does not have. So the first save of
each such class in a process warns (`ClassLocationWarning`) with the fix: define the class in a
module the reader imports, or register it under a stable name on both sides
(`zarchive.register_class(Config, name="myproject:Config")`).

A function-local class is found again only by the process that saved it (the class object it saved,
while it lives). Reading a `__main__:Name` tag looks the class up in the reading program's own `__main__`: the
notebook or script that is run again defines the same class there. That is a guess about another
program's class, so the read says so, once per tag and process, unless the class is one this
process itself saved (the same script saving and reading back).

This module imports nothing of zarchive: typeref (reading) and the class-naming handlers (saving)
call it.
"""

from __future__ import annotations

import inspect
import os
import threading
import warnings
import weakref

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # zarchive/


class ClassLocationWarning(UserWarning):
    """A class is saved where other programs cannot find it (`__main__`, a function), or a read
    took a file's `__main__` class from this program's `__main__`."""


_lock = threading.Lock()
_warned: weakref.WeakSet[type] = weakref.WeakSet()  # classes whose save was warned about
_saved_here: weakref.WeakSet[type] = weakref.WeakSet()  # __main__/local classes this process saved
_noted: set[str] = set()  # __main__ tags whose resolution a read reported (bounded by the tags read)
_saved_tags: dict[str, weakref.ref[type]] = {}  # tag -> the function-local class this process saved under it
MAX_NOTED = 10_000


def _outside_zarchive() -> int:
    """The stacklevel of the first caller outside the zarchive package: the user's save or read."""
    frame = inspect.currentframe()
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return max(level - 1, 1)


def unfindable_where(cls: type) -> str | None:
    """Where `cls` is defined if a reading program cannot find it by its tag, else None."""
    if "<locals>" in cls.__qualname__:
        return "inside a function"
    if cls.__module__ == "__main__":
        return "in __main__ (a script or notebook)"
    return None


def warn_on_save(cls: type, tag: str, what: str) -> None:
    """Warn once per class when `cls` is saved under its natural tag `tag` and lives where another
    program cannot find it. `what`: the kind of class, for the message ("dataclass", ...)."""
    where = unfindable_where(cls)
    if where is None:
        return
    with _lock:
        _saved_here.add(cls)
        if "<locals>" in cls.__qualname__ and len(_saved_tags) < MAX_NOTED:
            _saved_tags[tag] = weakref.ref(cls)
        if cls in _warned:
            return
        _warned.add(cls)
    name = cls.__name__
    warnings.warn(
        f"{what} class {tag!r} is defined {where}, so a program reading this file cannot find it: define {name} "
        f"in a module, or name it with zarchive.register_class({name}, name='yourproject:{name}') before saving "
        "(without the class, a reader gets its values with unresolved='generic')",
        ClassLocationWarning,
        stacklevel=_outside_zarchive(),
    )


def saved_local_class(tag: str) -> type | None:
    """The function-local class this process saved under `tag` (the latest one, while it lives):
    the same program reading back what it wrote, as ZANJ users do in tests and notebooks."""
    with _lock:
        ref = _saved_tags.get(tag)
    return ref() if ref is not None else None


def note_main_resolution(tag: str, cls: type, what: str) -> None:
    """Say (once per tag) that the file's `__main__` class `tag` was taken from this program's
    `__main__`, unless this process saved that very class."""
    with _lock:
        if cls in _saved_here or tag in _noted or len(_noted) >= MAX_NOTED:
            return
        _noted.add(tag)
    warnings.warn(
        f"the file names the {what} class {tag!r}, defined in the __main__ of the program that saved it; "
        f"reading it as the class {cls.__qualname__} that this program's __main__ defines (same name). To "
        f"make this explicit, zarchive.register_class({cls.__name__}, name={tag!r}) before reading.",
        ClassLocationWarning,
        stacklevel=_outside_zarchive(),
    )


def main_not_found(tag: str, qualname: str, what: str) -> str:
    """The message for a `__main__` class that this program's `__main__` does not define."""
    return (
        f"{what} class {tag!r} was defined in the __main__ of the program that saved the file (a script or "
        f"notebook), and this program's __main__ defines no {qualname}: define or import it there before "
        f"reading (re-run the notebook cell), or zarchive.register_class(YourClass, name={tag!r})"
    )


def local_not_found(tag: str, what: str) -> str:
    """The message for a class that was defined inside a function."""
    return (
        f"{what} class {tag!r} was defined inside a function, so no program can find it by that name: "
        f"zarchive.register_class(YourClass, name={tag!r}) before reading (and next time give the class a "
        "stable name with register_class(..., name='yourproject:Name') before saving, or define it in a module)"
    )


__all__ = [
    "ClassLocationWarning",
    "local_not_found",
    "main_not_found",
    "note_main_resolution",
    "saved_local_class",
    "warn_on_save",
]
