"""Array and tensor shapes as the manifest and member headers give them: checked before any size is
computed from them."""

from __future__ import annotations

import math

from ..errors import FormatError, UnsafeArchiveError

MAX_DIMS = 64


def check_shape(shape: object, *, member: str | None = None, path: str | None = None) -> tuple[int, ...]:
    if not isinstance(shape, (tuple, list)) or len(shape) > MAX_DIMS:
        raise FormatError("shape must be a list of at most 64 sizes", member=member, path=path)
    for s in shape:
        if type(s) is not int or s < 0:
            raise FormatError(f"bad dimension {s!r} in shape", member=member, path=path)
    if math.prod(shape) > 1 << 62:
        raise UnsafeArchiveError("shape asks for more elements than any file holds", member=member, path=path)
    return tuple(shape)
