"""enum internals: an Enum class's cache of members by value (`_value2member_map_`) and a Flag class's
mask of its members' bits (`_flag_mask_`), so that reading a Flag value from a file neither scans
every member nor leaves an entry behind in the class for every new value read (`cls(value)` on a
Flag caches each combination it builds there, and a Flag with boundary KEEP accepts any int).

Probe "enum.value_map": a throwaway Enum has `_value2member_map_`, a dict from value to member, and a
throwaway Flag has an int `_flag_mask_` of its members' bits. Fallback: the public API (members by
iterating the class, the mask as the OR of its members' values), and combinations built by
`cls(value)` stay cached in the class (bounded: only combinations of the class's own bits are built).
"""

from __future__ import annotations

import enum
import functools
import operator
import threading
from typing import Any

from . import Probe

_LOCK = threading.Lock()


def _check_value_map() -> bool | None:
    class _Color(enum.Enum):
        RED = 1

    class _Bits(enum.Flag):
        A = 1
        B = 4

    cache = _Color.__dict__.get("_value2member_map_")
    mask = getattr(_Bits, "_flag_mask_", None)
    return True if isinstance(cache, dict) and cache.get(1) is _Color.RED and mask == 5 else None


_VALUE_MAP = Probe("enum.value_map", _check_value_map)


def known_member(cls: Any, value: Any) -> Any:
    """The member of the Enum `cls` whose value is `value`, if one exists already (else None)."""
    if _VALUE_MAP.get() is not None:
        try:
            return cls._value2member_map_.get(value)
        except TypeError:  # an unhashable value: no member has it
            return None
    for member in cls.__members__.values():
        if type(member.value) is type(value) and member.value == value:
            return member
    return None


def flag_mask(cls: Any) -> int | None:
    """The bits of the Flag `cls`'s own members (None where its members' values are not ints)."""
    if _VALUE_MAP.get() is not None:
        mask = getattr(cls, "_flag_mask_", None)
        return mask if isinstance(mask, int) else None
    values = [m.value for m in cls.__members__.values()]
    return functools.reduce(operator.or_, values, 0) if all(type(v) is int for v in values) else None


def flag_combination(cls: Any, value: int) -> Any:
    """`cls(value)` for a Flag `cls`, without leaving a cache entry behind for an int-valued Flag
    (IntFlag, RegexFlag: compared by value, so dropping the cached pseudo-member loses nothing)."""
    if _VALUE_MAP.get() is None:
        return cls(value)
    with _LOCK:
        had = value in cls._value2member_map_
        member = cls(value)
        if issubclass(cls, int) and not had:
            cls._value2member_map_.pop(value, None)
    return member


__all__ = ["flag_combination", "flag_mask", "known_member"]
