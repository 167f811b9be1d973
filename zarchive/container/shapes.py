"""Array and tensor shapes as the manifest and member headers give them: checked before any size is
computed from them."""

from __future__ import annotations

import math

from ..errors import FormatError, UnsafeArchiveError

MAX_DIMS = 64
MAX_ELEMENTS = 1 << 62


def check_shape(shape: object, *, member: str | None = None, path: str | None = None) -> tuple[int, ...]:
    if not isinstance(shape, (tuple, list)) or len(shape) > MAX_DIMS:
        raise FormatError(f"shape must be a list of at most {MAX_DIMS} sizes", member=member, path=path)
    for s in shape:
        if type(s) is not int or s < 0:
            raise FormatError(f"bad dimension {s!r} in shape", member=member, path=path)
    if math.prod(shape) > MAX_ELEMENTS:
        raise UnsafeArchiveError("shape asks for more elements than any file holds", member=member, path=path)
    return tuple(shape)


def shape_problem(shape: tuple[int, ...]) -> str | None:
    """Why a reader would refuse an array or tensor of `shape` (None: it would not), for a writer
    to refuse it before producing any of its bytes."""
    if len(shape) > MAX_DIMS:
        return f"{len(shape)} dimensions, more than the {MAX_DIMS} a reader accepts"
    count = math.prod(shape)
    if count > MAX_ELEMENTS:
        return f"{count:,} elements, more than the {MAX_ELEMENTS:,} (2**62) a reader accepts"
    return None
