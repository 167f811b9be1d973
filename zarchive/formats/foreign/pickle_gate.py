"""The allocation and depth gates of the restricted pickle reader: what the values built so far cost,
and how deeply each container nests, both known *before* the next value is built.

- Memory: every value is charged at (an upper estimate of) its size as CPython holds it, before it
  is allocated: a string at its in-memory kind (1, 2 or 4 bytes a character, from the largest UTF-8
  lead byte in its text, never from decoding it first), bytes and bytearrays at their length plus
  their header, containers per opcode, and what a call (REDUCE) copies from its arguments (a set, a
  dict or bytes built from a shared list or string) at its size. Past the limit the read is refused.
- Depth: every container the reader builds gets its depth (1 + its deepest item's) when built, and a
  container that is added to later (APPEND, SETITEMS, ADDITEMS, BUILD) gets deeper then; one past
  MAX_DEPTH is refused before it is built. So nothing the reader hashes or compares (dict keys, set
  items, both immutable and so exactly as deep as when built) can make CPython recurse in C past
  MAX_DEPTH levels. A mutable container made deeper after it was put inside another leaves that
  one's depth stale; value_graph's walk of the finished graph (exact, without recursion) refuses it.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from ...container.depth import MAX_DEPTH, too_deep
from ...errors import UnsafeArchiveError
from .value_graph import children

__all__ = ["SHORT_TEXT", "BuildGate", "built_size", "bytes_size", "copy_bound", "str_size"]

# CPython (3.11-3.14, 64-bit) object sizes: sys.getsizeof of an empty value of each kind.
_ASCII, _LATIN1, _UCS2, _UCS4 = 49, 73, 74, 76  # str headers (compact ASCII, compact 1-, 2-, 4-byte kinds)
_BYTES, _BYTEARRAY = 33, 58
# Bytes a call may build per item of a container argument (an OrderedDict takes ~140 an item, a set ~90).
_PER_COPIED_ITEM = 192
_CALL = 256

SHORT_TEXT = 64  # a text this short is charged as if 4 bytes a character (at most 332 bytes), not scanned
_LONG_TEXT = 1 << 16
_NON_ASCII = re.compile(rb"[\x80-\xff]")
_PAST_LATIN1 = re.compile(rb"[\xc4-\xff]")  # a UTF-8 lead byte of a code point >= 0x100
_PAST_BMP = re.compile(rb"[\xf0-\xff]")  # a UTF-8 lead byte of a code point >= 0x10000


def str_size(data: bytes | bytearray, begin: int, end: int) -> int:
    """An upper bound of the memory CPython takes for the str that the UTF-8 text data[begin:end]
    decodes to: at most one character a byte, each 1, 2 or 4 bytes wide as its widest character
    needs, known from the text's largest byte (scanned in C, nothing decoded or copied); a short text
    is charged at the widest kind's size without scanning it."""
    n = end - begin
    if n <= SHORT_TEXT:
        return _UCS4 + 4 * n
    if n > _LONG_TEXT:  # (numpy scans a long text ~30 times faster than a regular expression)
        import numpy as np

        top = int(np.frombuffer(data, np.uint8, n, begin).max())
        return (
            _ASCII + n if top < 0x80 else _LATIN1 + n if top < 0xC4 else _UCS2 + 2 * n if top < 0xF0 else _UCS4 + 4 * n
        )
    if _NON_ASCII.search(data, begin, end) is None:
        return _ASCII + n
    if _PAST_LATIN1.search(data, begin, end) is None:
        return _LATIN1 + n
    if _PAST_BMP.search(data, begin, end) is None:
        return _UCS2 + 2 * n
    return _UCS4 + 4 * n


def bytes_size(n: int, *, mutable: bool = False) -> int:
    """The memory a bytes (or bytearray) object of n bytes takes."""
    return (_BYTEARRAY if mutable else _BYTES) + n


# Bytes a call may build per unit of len() of an argument of each type it could copy.
_COPIED: dict[type, int] = {str: 4, bytes: 1, bytearray: 1, list: _PER_COPIED_ITEM, tuple: _PER_COPIED_ITEM, dict: _PER_COPIED_ITEM,
           OrderedDict: _PER_COPIED_ITEM, set: _PER_COPIED_ITEM, frozenset: _PER_COPIED_ITEM}  # fmt: skip


def copy_bound(args: Iterable[Any]) -> int:
    """An upper bound of what a call can build from `args` by copying them (a set or an OrderedDict of
    a list's items, bytes of a string or of other bytes); the arguments themselves are already paid for.
    (The reader builds only these exact types, never subclasses of them, save OrderedDict.)"""
    total = _CALL
    per = _COPIED.get
    for a in args:
        k = per(type(a))
        if k:
            total += _BYTEARRAY + k * len(a)
    return total


def built_size(value: Any) -> int:
    """What a value a call returned takes (charged after `copy_bound` let the call run)."""
    if isinstance(value, (bytes, bytearray)):
        return _BYTEARRAY + len(value)
    if isinstance(value, (dict, set, frozenset)):
        return _CALL + _PER_COPIED_ITEM * len(value)
    return _CALL


class BuildGate:
    """Cost and depth of the values one pickle read builds (see the module docstring)."""

    def __init__(self, limit: int | None, member: str | None) -> None:
        self.spent = 0
        self.limit = limit if limit is not None else 1 << 62
        self.member = member
        self._depth: dict[int, int] = {}  # id -> depth of every container built (pinned by _kept: ids stay unique)
        self._kept: list[Any] = []
        self.made((), 1)  # (the empty tuple is one object, for ever: pushed as is)

    # --- memory ---
    def charge(self, cost: int) -> None:
        """Add `cost` bytes about to be allocated; refused past the limit, before allocating."""
        self.spent += cost
        if self.spent > self.limit:
            raise self.refusal()

    def fits(self, cost: int) -> None:
        """Refuse a step that may allocate `cost` bytes more than the limit allows (not charged)."""
        if self.spent + cost > self.limit:
            raise self.refusal()

    def refusal(self) -> UnsafeArchiveError:
        return UnsafeArchiveError(
            f"the pickle's values would take more than the {self.limit:,} bytes the read may still allocate "
            "(max_read_bytes; raise it with ZArchive(max_read_bytes=...) if you trust the file)",
            member=self.member,
        )

    # --- depth ---
    def forget(self) -> None:
        """Drop the depth table (the values are built): its memory is the walk's that checks them."""
        self._depth.clear()
        self._kept.clear()
        self.made((), 1)

    def depth(self, value: Any) -> int:
        """How deeply a value nests (0 for one that holds nothing)."""
        return self._depth.get(id(value), 0)

    def holding(self, items: Iterable[Any]) -> int:
        """The depth of a container that would hold `items`: refused past MAX_DEPTH, before it is built."""
        get, top = self._depth.get, 0
        for x in items:
            d = get(id(x), 0)
            if d > top:  # noqa: PLR1730 - (a compare, not a call of max(): this runs for every item built)
                top = d
        if top >= MAX_DEPTH:
            raise too_deep(member=self.member, what="the pickled values are")
        return top + 1

    def tuple_of(self, items: list[Any]) -> tuple[Any, ...]:
        """A new tuple of `items`, recorded (refused past MAX_DEPTH before it exists to be hashed)."""
        depth = self.holding(items)
        made = tuple(items)
        self._depth[id(made)] = depth
        self._kept.append(made)
        return made

    def list_of(self, items: list[Any]) -> list[Any]:
        """`items`, a list the reader owns, recorded as a new list value."""
        depth = self.holding(items)
        self._depth[id(items)] = depth
        self._kept.append(items)
        return items

    def made(self, container: Any, depth: int) -> Any:
        """Record a container just built at `depth` (from `holding`); returns it."""
        self._depth[id(container)] = depth
        self._kept.append(container)
        return container

    def grow(self, container: Any, items: Iterable[Any]) -> None:
        """A container is about to take `items` (APPEND, SETITEMS, ADDITEMS): refused if that makes it
        nest past MAX_DEPTH, before any item is added (or hashed)."""
        depth = self.holding(items)
        self._deeper(container, depth)

    def _deeper(self, container: Any, depth: int) -> None:
        key = id(container)
        known = self._depth.get(key)
        if known is None:  # (a container the reader did not build itself: pinned from now on)
            self._kept.append(container)
        if known is None or depth > known:
            self._depth[key] = depth

    def deepen(self, container: Any, depth: int) -> None:
        """A container now holds a value nesting `depth - 1` deep (BUILD's state): refused past MAX_DEPTH."""
        if depth > MAX_DEPTH:
            raise too_deep(member=self.member, what="the pickled values are")
        self._deeper(container, depth)

    def called(self, value: Any) -> Any:
        """Charge and record what a call built (a container: its depth from what it holds); returns it.
        One that holds nothing yet (a tensor, an empty OrderedDict) is not recorded: it counts as
        holding nothing until items are added to it (then `grow` records it), one level less than the
        exact walk of value_graph counts for an empty container."""
        self.spent += built_size(value)
        if self.spent > self.limit:
            raise self.refusal()
        kids = children(value)
        if kids:
            self.made(value, self.holding(kids))
        return value
