"""Checking a graph of values built from a file (the restricted pickle reader's result) before
anything walks it recursively: no reference cycles, bounded depth, and a bounded number of visits
counted along every path, so shared references cannot multiply into a "billion laughs" tree.

The count along every path is computed, not walked: each container's count is one plus its
children's, worked out once per container (a shared one is reached again by its memo), so the check
costs time in proportion to the distinct values and references, however large the count."""

from __future__ import annotations

from typing import Any

from ..container.depth import MAX_DEPTH
from ..errors import FormatError, UnsafeArchiveError

DEFAULT_MAX_VISITS = 5_000_000


def _children(obj: Any) -> Any:
    """The values a container holds (None for a leaf)."""
    if isinstance(obj, dict):
        return [*obj.keys(), *obj.values()]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return obj
    kids = getattr(obj, "children", None)
    return None if kids is None else kids()


def walk_bounded(value: Any, *, member: str | None, max_visits: int = DEFAULT_MAX_VISITS) -> int:
    """Check the built object graph without recursion: no cycles, at most MAX_DEPTH levels, at most
    `max_visits` values counting every path to a shared object (so later recursive walks, which
    visit shared objects once per path, stay bounded). Returns that count."""
    counts: dict[int, int] = {}  # a finished container's count along every path below it, itself included
    heights: dict[int, int] = {}  # its levels of containers, itself included
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        obj, leaving = stack.pop()
        key = id(obj)
        if leaving:
            on_path.discard(key)
            total, height = 1, 0
            for kid in _children(obj):
                total += counts.get(id(kid), 1)
                height = max(height, heights.get(id(kid), 0))
            if total > max_visits:
                raise UnsafeArchiveError(
                    f"the pickled object graph has more than {max_visits:,} values counted along every path "
                    "(shared references multiplied)",
                    member=member,
                )
            counts[key], heights[key] = total, height + 1
            continue
        depth = len(on_path)
        if key in counts:  # a shared container, finished: only its depth from here is new
            if depth + heights[key] > MAX_DEPTH:
                raise _too_deep(member)
            continue
        kids = _children(obj)
        if kids is None:
            continue
        if depth >= MAX_DEPTH:
            raise _too_deep(member)
        if key in on_path:
            raise FormatError("the pickled values contain themselves (a reference cycle)", member=member)
        on_path.add(key)
        stack.append((obj, True))
        stack.extend((k, False) for k in kids)
    return counts.get(id(value), 1)


def _too_deep(member: str | None) -> FormatError:
    return FormatError(f"the pickled values are nested more than {MAX_DEPTH} levels deep", member=member)
