"""Checking a graph of values built from a file (the restricted pickle reader's result) before
anything walks it recursively: no reference cycles, bounded depth, and a bounded number of visits
counted along every path, so shared references cannot multiply into a "billion laughs" tree."""

from __future__ import annotations

from typing import Any

from ..errors import FormatError, UnsafeArchiveError

MAX_DEPTH = 200  # what the planner allows a manifest (plan.MAX_DEPTH)
DEFAULT_MAX_VISITS = 5_000_000


def walk_bounded(value: Any, *, member: str | None, max_visits: int = DEFAULT_MAX_VISITS) -> int:
    """Check the built object graph without recursion: no cycles, at most MAX_DEPTH levels, at most
    `max_visits` visits counting every path to a shared object (so later recursive walks, which
    visit shared objects once per path, stay bounded). Returns the number of visits."""
    visits = 0
    on_path: set[int] = set()
    stack: list[tuple[Any, int, bool]] = [(value, 0, False)]
    while stack:
        obj, depth, leaving = stack.pop()
        if leaving:
            on_path.discard(id(obj))
            continue
        visits += 1
        if visits > max_visits:
            raise UnsafeArchiveError(
                f"the pickled object graph has more than {max_visits:,} values counted along every path "
                "(shared references multiplied)",
                member=member,
            )
        if isinstance(obj, dict):
            kids: Any = [*obj.keys(), *obj.values()]
        elif isinstance(obj, (list, tuple, set, frozenset)):
            kids = obj
        else:
            kids = getattr(obj, "children", None)
            if kids is None:
                continue
            kids = kids()
        if depth >= MAX_DEPTH:
            raise FormatError(f"the pickled values are nested more than {MAX_DEPTH} levels deep", member=member)
        if id(obj) in on_path:
            raise FormatError("the pickled values contain themselves (a reference cycle)", member=member)
        on_path.add(id(obj))
        stack.append((obj, depth, True))
        stack.extend((k, depth + 1, False) for k in kids)
    return visits
