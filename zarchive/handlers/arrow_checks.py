"""The checks a reader makes on an `arrow.array`'s buffers before building anything on them, with numpy
alone (spec/pandas.md 5.4): bitmaps hold as many set bits as values present, offsets start at 0, never
decrease and end at the length of what they index, dictionary indices of present values point into the
dictionary. Costs a pass over the buffers in C; no per-row Python. UTF-8 of text is checked by whoever
builds strings (pyarrow's full validation, or container/utf8_column.py).
"""

from __future__ import annotations

import numpy as np

from ..errors import FormatError


def present_bits(bitmap: np.ndarray, length: int) -> np.ndarray:
    """The bitmap's first `length` bits as bools (bit i: byte i // 8, least significant bit first)."""
    return np.unpackbits(bitmap, count=length, bitorder="little").view(np.bool_)


def check_validity(bitmap: np.ndarray | None, length: int, null_count: int, *, member: str | None) -> None:
    if bitmap is None:
        if null_count:
            raise FormatError(f"{null_count} values are missing but the array has no validity bitmap", member=member)
        return
    present = int(np.count_nonzero(present_bits(bitmap, length)))
    if present != length - null_count:
        raise FormatError(
            f"the validity bitmap marks {length - present} values missing, 'null_count' says {null_count}",
            member=member,
        )


def check_offsets(offsets: np.ndarray, end: int | None, *, member: str | None) -> int:
    """The last offset, after checking that the offsets start at 0, never decrease and (when `end` is
    given) end at `end`, the size of what they index."""
    if len(offsets) == 0 or int(offsets[0]) != 0:
        raise FormatError("offsets must start at 0", member=member)
    if len(offsets) > 1 and bool((offsets[1:] < offsets[:-1]).any()):
        at = int(np.argmax(offsets[1:] < offsets[:-1]))
        raise FormatError(f"offsets decrease at value {at}", member=member)
    last = int(offsets[-1])
    if end is not None and last != end:
        raise FormatError(f"offsets end at {last}, what they index holds {end}", member=member)
    return last


def check_indices(
    indices: np.ndarray, bitmap: np.ndarray | None, count: int, length: int, *, member: str | None
) -> None:
    """Every present value's index lies in 0..count-1 (a missing value's index is never read)."""
    used = indices if bitmap is None else indices[present_bits(bitmap, length)]
    if used.size and (int(used.min()) < 0 or int(used.max()) >= count):
        raise FormatError(f"a dictionary index is outside the dictionary's {count} values", member=member)
