"""Finding the class a ZANJ file names, without importing anything.

ZANJ records a dataclass as "Name(SerializableDataclass)" and a model by its bare class name (plus
the module it came from, as information). A name read from a file is matched only against classes
that are already here: classes given to `zarchive.register_class`, SerializableDataclass subclasses
that are imported, and ConfiguredModel subclasses (zarchive's, or ZANJ's own if `zanj.torchutil` is
imported). When several classes share the name, the file's other clues (the model's module, the
dataclass's field names) pick one; if that still leaves a tie, reading stops and says how to resolve it.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ...engine.typeref import is_model_class, registered_classes
from ...errors import UnknownTypeError

SDC_SUFFIX = "(SerializableDataclass)"


def _subclasses(base: type) -> Iterator[type]:
    seen: set[int] = set()
    stack: list[type] = list(base.__subclasses__())
    while stack:
        cls = stack.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        yield cls
        stack.extend(cls.__subclasses__())


def _unique(classes: Iterable[type]) -> list[type]:
    out: dict[int, type] = {}
    for c in classes:
        out.setdefault(id(c), c)
    return list(out.values())


def _describe(classes: list[type]) -> str:
    return ", ".join(sorted(f"{c.__module__}.{c.__qualname__}" for c in classes))


def dataclass_candidates(name: str) -> list[type]:
    """Dataclasses named `name`: registered ones first, then imported SerializableDataclasses."""
    registered = [c for c in registered_classes().values() if dataclasses.is_dataclass(c) and c.__name__ == name]
    found = list(registered)
    muutils_sdc = sys.modules.get("muutils.json_serialize.serializable_dataclass")
    base = getattr(muutils_sdc, "SerializableDataclass", None)
    if isinstance(base, type):
        found += [c for c in _subclasses(base) if c.__name__ == name and dataclasses.is_dataclass(c)]
    return _unique(found)


def _given(name: str, given: Iterable[type], accept: Callable[[type], bool]) -> type | None:
    """The one class of that name the reader was given (trusted=, a root class), if there is one."""
    named = _unique(c for c in given if isinstance(c, type) and c.__name__ == name and accept(c))
    return named[0] if len(named) == 1 else None


def resolve_dataclass(name: str, stored_fields: Iterable[str], *, given: Iterable[type] = (), path: str | None) -> type:
    """The dataclass a ZANJ "Name(SerializableDataclass)" node stands for: the class of that name
    the read was given, else one among those here (see dataclass_candidates)."""
    chosen = _given(name, given, dataclasses.is_dataclass)
    if chosen is not None:
        return chosen
    found = dataclass_candidates(name)
    if not found:
        raise UnknownTypeError(
            f"the ZANJ file holds a {name!r} dataclass, and no dataclass of that name is imported or "
            "registered (import the module that defines it, or zarchive.register_class it, before reading)",
            path=path,
        )
    if len(found) == 1:
        return found[0]
    registered = [c for c in found if c in registered_classes().values()]
    if len(registered) == 1:
        return registered[0]
    stored = set(stored_fields)
    exact = [c for c in found if {f.name for f in dataclasses.fields(c)} == stored]
    if len(exact) == 1:
        return exact[0]
    raise UnknownTypeError(
        f"the ZANJ file's {name!r} dataclass matches several classes ({_describe(found)}); "
        "zarchive.register_class the one to use",
        path=path,
    )


def _is_model(cls: type) -> bool:
    return is_model_class(cls) or _is_zanj_model(cls)


def _is_zanj_model(cls: type) -> bool:
    zanj_base = getattr(sys.modules.get("zanj.torchutil"), "ConfiguredModel", None)
    return isinstance(zanj_base, type) and isinstance(cls, type) and issubclass(cls, zanj_base)


def model_candidates(name: str) -> list[type]:
    """ConfiguredModel subclasses named `name`: zarchive's first, then ZANJ's own if it is imported.
    Neither can exist before its module is imported, so nothing is imported here."""
    base = getattr(sys.modules.get("zarchive.models.configured"), "ConfiguredModelBase", None)
    found: list[type] = []
    if isinstance(base, type):
        ours = [c for c in registered_classes().values() if is_model_class(c)]
        ours += list(_subclasses(base))
        found = [c for c in _unique(ours) if c.__name__ == name]
    if found:
        return found
    zanj_torchutil = sys.modules.get("zanj.torchutil")
    zanj_base = getattr(zanj_torchutil, "ConfiguredModel", None)
    if isinstance(zanj_base, type):
        return _unique(c for c in _subclasses(zanj_base) if c.__name__ == name)
    return []


def resolve_model(
    name: str, module: Any, config_name: str | None, *, given: Iterable[type] = (), path: str | None
) -> type:
    """The ConfiguredModel class a ZANJ model node stands for (same class name, same config class
    name): the class of that name the read was given, else one among those here."""
    chosen = _given(name, given, _is_model)
    if chosen is not None:
        return chosen
    found = model_candidates(name)
    if not found:
        raise UnknownTypeError(
            f"the ZANJ file holds a {name!r} model, and no ConfiguredModel of that name is imported or "
            "registered: define it with zarchive.torchutil.ConfiguredModel and @set_config_class, and import "
            "it before reading",
            path=path,
        )
    if len(found) > 1 and isinstance(module, str):
        same_module = [c for c in found if c.__module__ == module]
        if len(same_module) == 1:
            return same_module[0]
    if len(found) > 1 and config_name is not None:
        same_config = [c for c in found if getattr(config_class_of(c), "__name__", None) == config_name]
        if len(same_config) == 1:
            return same_config[0]
    if len(found) > 1:
        raise UnknownTypeError(
            f"the ZANJ file's {name!r} model matches several classes ({_describe(found)}); "
            "zarchive.register_class the one to use",
            path=path,
        )
    return found[0]


def config_class_of(model_cls: type) -> type | None:
    """The config dataclass a ConfiguredModel subclass declares (ZANJ's and ours use one attribute)."""
    cfg = getattr(model_cls, "_config_class", None)
    return cfg if isinstance(cfg, type) else None
