"""Several files read as one byte source: file k occupies bytes [base_k, base_k + size_k) of it.

For checkpoints stored as several files (a Hugging Face folder of `.safetensors` shards): each
value's bytes lie inside one file, so every range a reader asks for lies inside one part; a range
that crosses from one part into the next is refused (FormatError), never stitched.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from ..errors import FormatError
from .source import ByteSource

__all__ = ["ConcatSource"]


class ConcatSource:
    """The parts, one after another (the parts are closed with it)."""

    def __init__(self, parts: Sequence[ByteSource]) -> None:
        self.parts = list(parts)
        self.bases: list[int] = []
        at = 0
        for part in self.parts:
            self.bases.append(at)
            at += part.size
        self.size = at
        self.mapped = bool(self.parts) and all(p.mapped for p in self.parts)

    def view(self, offset: int, length: int) -> memoryview:
        k = bisect.bisect_right(self.bases, offset) - 1
        if k < 0 or offset < 0 or length < 0:
            raise FormatError(f"range {offset}+{length} outside the files ({self.size} bytes)")
        inner = offset - self.bases[k]
        if inner + length > self.parts[k].size:
            raise FormatError(f"range {offset}+{length} crosses the end of file {k + 1} of {len(self.parts)}")
        return self.parts[k].view(inner, length)

    def close(self) -> None:
        for part in self.parts:
            part.close()
