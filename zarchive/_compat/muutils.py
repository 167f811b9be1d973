"""muutils internals: the names of the properties a `SerializableDataclass` also serializes, which
muutils keeps in the private class attribute `_properties_to_serialize` (ZANJ files hold them beside
the fields).

Probe (see the package docstring for the rule), "muutils.properties_to_serialize": a throwaway class
made with muutils' `serializable_dataclass(properties_to_serialize=[...])` carries that list there. Fallback: no names;
reading a ZANJ dataclass then reports each such property as a field the class does not have (a
mismatch, per error_mode) instead of skipping it silently.
"""

from __future__ import annotations

from typing import Any

from . import Probe


def _check() -> bool | None:
    from muutils.json_serialize import SerializableDataclass, serializable_dataclass

    @serializable_dataclass(properties_to_serialize=["double"])
    class _Probe(SerializableDataclass):
        @property
        def double(self) -> int:
            return 2

    names = getattr(_Probe, "_properties_to_serialize", None)
    return True if isinstance(names, (list, tuple)) and list(names) == ["double"] else None


_PROPERTIES = Probe("muutils.properties_to_serialize", _check)


def serialized_properties(cls: type) -> set[str]:
    """The property names a SerializableDataclass class serializes besides its fields."""
    if _PROPERTIES.get() is None:
        return set()
    names: Any = getattr(cls, "_properties_to_serialize", ())
    return {n for n in names if isinstance(n, str)} if isinstance(names, (list, tuple, set)) else set()


__all__ = ["serialized_properties"]
