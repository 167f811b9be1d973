"""The depth gate: how deeply values built from file data may nest, one number for every reader.

Every reader that builds nested values from a file (the manifest planner, JSON members, the restricted
pickle reader's tuples, dicts, sets and `_metadata` graphs, ZANJ trees, DCP metadata) refuses nesting
deeper than MAX_DEPTH *while* building, never by recursing over what it built: CPython recurses in C
when it hashes, compares or frees a nested tuple, so a few hundred bytes nested a million levels deep
would crash the process before any later check ran. MAX_DEPTH is far below the C stack's limit and far
above what any real object tree needs (the writer refuses to save deeper, so every file a save writes,
a read accepts).
"""

from __future__ import annotations

from ..errors import UnsafeArchiveError

__all__ = ["MAX_DEPTH", "too_deep"]

MAX_DEPTH = 200


def too_deep(*, member: str | None = None, path: str | None = None, what: str = "values") -> UnsafeArchiveError:
    """The refusal for nesting past MAX_DEPTH (raise it)."""
    return UnsafeArchiveError(f"{what} nested more than {MAX_DEPTH} levels deep", member=member, path=path)
