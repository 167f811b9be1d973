"""Array and tensor shapes as the manifest and member headers give them: checked before any size is
computed from them."""

from __future__ import annotations

import math

from ..errors import FormatError, UnsafeArchiveError

MAX_DIMS = 64
MAX_ELEMENTS = 1 << 62
MAX_DIM = MAX_ELEMENTS  # no dimension of a real array is larger; bounds the work of multiplying 64 of them


def check_shape(shape: object, *, member: str | None = None, path: str | None = None) -> tuple[int, ...]:
    if not isinstance(shape, (tuple, list)) or len(shape) > MAX_DIMS:  # checked before looking at any size
        raise FormatError(f"shape must be a list of at most {MAX_DIMS} sizes", member=member, path=path)
    for s in shape:
        if type(s) is not int or not 0 <= s <= MAX_DIM:
            raise FormatError(f"bad dimension {_short(s)} in shape", member=member, path=path)
    if math.prod(shape) > MAX_ELEMENTS:
        raise UnsafeArchiveError("shape asks for more elements than any file holds", member=member, path=path)
    return tuple(shape)


def _short(value: object) -> str:
    """A dimension for an error message: never the repr of a huge int (which may exceed Python's digit
    limit for int-to-str conversion, and raise)."""
    if type(value) is int and value.bit_length() > 64:
        return f"of {value.bit_length()} bits"
    text = repr(value) if type(value) is not int else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def shape_problem(shape: tuple[int, ...]) -> str | None:
    """Why a reader would refuse an array or tensor of `shape` (None: it would not), for a writer
    to refuse it before producing any of its bytes."""
    if len(shape) > MAX_DIMS:
        return f"{len(shape)} dimensions, more than the {MAX_DIMS} a reader accepts"
    count = math.prod(shape)
    if count > MAX_ELEMENTS:
        return f"{count:,} elements, more than the {MAX_ELEMENTS:,} (2**62) a reader accepts"
    return None
