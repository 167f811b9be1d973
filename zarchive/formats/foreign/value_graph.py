"""Checking a graph of values built from a file (the restricted pickle reader's result) before
anything walks it recursively: no reference cycles, bounded depth, and a bounded number of visits
counted along every path, so shared references cannot multiply into a "billion laughs" tree.

The edges are every reference a later walk follows: a container's items (a dict's keys and values)
and the attributes set on it (a state dict's `_metadata`, set by BUILD, which the dict handler saves
too), so memo-shared graphs hung there are counted like any other value.

The count along every path is computed, not walked: each container's count is one plus its
children's, worked out once per container (a shared one is reached again by its memo), so the check
costs time in proportion to the distinct values and references, however large the count. The count is
capped in proportion to the pickle's size (`visit_cap`): a pickle without shared references has at
most about one value per byte, and every later walk (the manifest of a foreign file, one node per
value along every path) then costs time and memory in proportion to the file."""

from __future__ import annotations

from typing import Any

from ...container.depth import MAX_DEPTH, too_deep
from ...errors import FormatError, UnsafeArchiveError

__all__ = [
    "DEFAULT_MAX_VISITS",
    "MAX_DEPTH",
    "VISITS_FLOOR",
    "VISITS_PER_BYTE",
    "children",
    "visit_cap",
    "walk_bounded",
]

DEFAULT_MAX_VISITS = 5_000_000  # (for a graph of unknown origin; a pickle's cap is visit_cap's)
VISITS_FLOOR = 100_000  # a small pickle may still share a few values widely
VISITS_PER_BYTE = 8  # real torch.save pickles: 0.01-0.03 values a byte; plain lists of Nones: 1


def visit_cap(pickle_bytes: int) -> int:
    """The most values, counted along every path, that a pickle of `pickle_bytes` bytes may hold."""
    return max(VISITS_FLOOR, VISITS_PER_BYTE * pickle_bytes)


_LEAVES = frozenset({str, int, float, bool, type(None), bytes, bytearray, complex})
_SEQUENCES = frozenset({list, tuple, set, frozenset})


def children(obj: Any) -> Any:
    """The values a container holds, attributes set on it included (None for a leaf)."""
    kind = type(obj)
    if kind in _LEAVES:
        return None
    if kind in _SEQUENCES:
        return obj
    if kind is dict:
        return [*obj.keys(), *obj.values()]
    if isinstance(obj, dict):
        attrs = getattr(obj, "__dict__", None)  # (an OrderedDict's attributes: BUILD's state)
        return [*obj.keys(), *obj.values(), *(attrs.values() if attrs else ())]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return obj
    kids = getattr(obj, "children", None)
    return None if kids is None else kids()


class _Leaving:
    __slots__ = ()


_LEAVING = _Leaving()  # on the stack above a container and below its children: they are done
_HEIGHT_BITS = (MAX_DEPTH + 1).bit_length()  # a finished container's height, in its table entry's low bits
_HEIGHT = (1 << _HEIGHT_BITS) - 1


def walk_bounded(value: Any, *, member: str | None, max_visits: int = DEFAULT_MAX_VISITS) -> int:
    """Check the built object graph without recursion: no cycles, at most MAX_DEPTH levels, at most
    `max_visits` values counting every path to a shared object (so later recursive walks, which
    visit shared objects once per path, stay bounded). Returns that count. What it holds meanwhile:
    one table entry a container and one stack slot a reference."""
    done: dict[int, int] = {}  # a finished container: its count along every path below it, and its height
    on_path: set[int] = set()
    stack: list[Any] = [value]
    while stack:
        obj = stack.pop()
        if obj is _LEAVING:
            obj = stack.pop()
            on_path.discard(id(obj))
            total, height = 1, 0
            for kid in children(obj):
                found = done.get(id(kid))
                if found is None:
                    total += 1
                else:
                    total += found >> _HEIGHT_BITS
                    height = max(height, found & _HEIGHT)
            if total > max_visits:
                raise UnsafeArchiveError(
                    f"the pickled object graph has more than {max_visits:,} values counted along every path "
                    "(shared references multiplied; the cap grows with the size of the pickle)",
                    member=member,
                )
            done[id(obj)] = total << _HEIGHT_BITS | (height + 1)
            continue
        key = id(obj)
        depth = len(on_path)
        found = done.get(key)
        if found is not None:  # a shared container, finished: only its depth from here is new
            if depth + (found & _HEIGHT) > MAX_DEPTH:
                raise too_deep(member=member, what="the pickled values are")
            continue
        kids = children(obj)
        if kids is None:
            continue
        if depth >= MAX_DEPTH:
            raise too_deep(member=member, what="the pickled values are")
        if key in on_path:
            raise FormatError("the pickled values contain themselves (a reference cycle)", member=member)
        on_path.add(key)
        stack.append(obj)
        stack.append(_LEAVING)
        stack.extend(kids)
    found = done.get(id(value))
    return 1 if found is None else found >> _HEIGHT_BITS
