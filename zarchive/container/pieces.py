"""A member read whole, held as separate buffers ("pieces") so that each value owns its own memory.

A full read fetches a member whole (a state dict's safetensors member, compressed weights) and builds
every value on a slice of it. Were the member one buffer, one small tensor kept from the read would
keep the whole member's memory alive (498 MB for the "big" benchmark state dict, after the rest was
dropped). So the member is cut where its values begin and end: every entry of ALONE_FROM bytes or
more gets a buffer of its own, and the small ones between (a header, biases, layer norms) share
buffers of at most RUN_BYTES. Keeping one tensor keeps its own bytes, or at most a RUN_BYTES run.

`cuts` plans the pieces from a member's entries (uncompressed members: their checksum entries;
compressed weights: their chunks); `Pieces` holds them. Slicing a `Pieces` object as one slices a
memoryview (`pieces[begin:end]`) gives a zero-copy view where the range lies in one piece (every
value does) and a copy where it spans several.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable

from .fresh_memory import new_buffer

ALONE_FROM = 256 << 10  # entries this big get a buffer of their own
RUN_BYTES = 1 << 20  # smaller entries share buffers of up to this many bytes


def cuts(size: int, entries: Iterable[tuple[int, int]]) -> list[int]:
    """Where to cut a member of `size` bytes whose values lie at `entries` ((offset, size) pairs,
    disjoint): ascending offsets from 0 to `size`, cutting around every entry of ALONE_FROM bytes or
    more and between smaller entries once a run would pass RUN_BYTES. Entries outside the member
    or overlapping an earlier one are ignored (they are refused where they are checked)."""
    out = [0]
    for offset, n in sorted(entries):
        end = offset + n
        if n <= 0 or offset < out[-1] or end > size:
            continue
        if n >= ALONE_FROM:
            if offset > out[-1]:
                out.append(offset)
            out.append(end)
        elif end - out[-1] > RUN_BYTES and offset > out[-1]:
            out.append(offset)
    if out[-1] != size:
        out.append(size)
    return out


class Pieces:
    """A member's bytes [0, nbytes) held in one buffer per piece (see `cuts`), writable."""

    def __init__(self, cut_at: list[int]) -> None:
        if not cut_at or cut_at[0] != 0 or any(a >= b for a, b in itertools.pairwise(cut_at)):
            raise ValueError(f"cuts must rise from 0, not {cut_at[:8]}")
        self._cuts = cut_at
        self.nbytes = cut_at[-1]
        self.buffers = [new_buffer(b - a) for a, b in itertools.pairwise(cut_at)]

    def __getitem__(self, item: slice) -> memoryview:
        if len(self.buffers) == 1:  # (kept tight: a read of 5,000 small tensors slices 5,000 times)
            return self.buffers[0][item]
        begin, end, step = item.indices(self.nbytes)
        if step != 1:
            raise ValueError("pieces are sliced with step 1")
        end = max(begin, end)
        i = bisect.bisect_right(self._cuts, begin) - 1
        if i < len(self.buffers) and end <= self._cuts[i + 1]:
            lo = self._cuts[i]
            return self.buffers[i][begin - lo : end - lo]
        views = self.views(begin, end)
        if not views:
            return memoryview(bytearray())
        out = new_buffer(end - begin)
        at = 0
        for v in views:
            out[at : at + v.nbytes] = v
            at += v.nbytes
        return out

    def views(self, begin: int, end: int) -> list[memoryview]:
        """Views of the pieces' buffers that together hold bytes [begin, end), in order."""
        if not 0 <= begin <= end <= self.nbytes:
            raise ValueError(f"range {begin}..{end} outside {self.nbytes} bytes")
        i = bisect.bisect_right(self._cuts, begin) - 1
        out: list[memoryview] = []
        while begin < end:
            lo, hi = self._cuts[i], self._cuts[i + 1]
            stop = min(end, hi)
            out.append(self.buffers[i][begin - lo : stop - lo])
            begin, i = stop, i + 1
        return out
