"""Array and tensor shapes as the manifest and member headers give them: checked before any size is
computed from them."""

from __future__ import annotations

import math

from ..errors import FormatError, UnsafeArchiveError

MAX_DIMS = 64
MAX_DIM = 1 << 62  # no dimension of a real array is larger; bounds the work of multiplying 64 of them


def check_shape(shape: object, *, member: str | None = None, path: str | None = None) -> tuple[int, ...]:
    if not isinstance(shape, (tuple, list)) or len(shape) > MAX_DIMS:  # checked before looking at any size
        raise FormatError("shape must be a list of at most 64 sizes", member=member, path=path)
    for s in shape:
        if type(s) is not int or not 0 <= s <= MAX_DIM:
            raise FormatError(f"bad dimension {_short(s)} in shape", member=member, path=path)
    if math.prod(shape) > 1 << 62:
        raise UnsafeArchiveError("shape asks for more elements than any file holds", member=member, path=path)
    return tuple(shape)


def _short(value: object) -> str:
    """A dimension for an error message: never the repr of a huge int (which may exceed Python's digit
    limit for int-to-str conversion, and raise)."""
    if type(value) is int and value.bit_length() > 64:
        return f"of {value.bit_length()} bits"
    text = repr(value) if type(value) is not int else str(value)
    return text if len(text) <= 40 else text[:37] + "..."
