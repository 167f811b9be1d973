"""A sharded checkpoint as one `.zarc` archive (`zarchive convert DIR out.zarc`)."""

from __future__ import annotations

import os
from typing import Any

from ..api import ZArchive
from ..errors import FormatError
from .view import ShardedCheckpoint


def consolidate(directory: str, dst: str, *, compress: Any = True, max_read_bytes: int | None = None) -> int:
    """Read every value of the checkpoint in `directory` (checked as read) and save the nested
    state dict to `dst`; return the number of keys. Needs memory for the whole state dict, within
    the read's budget (`max_read_bytes`; None: the default for the directory's size)."""
    if os.path.abspath(dst).startswith(os.path.abspath(directory) + os.sep):
        raise ValueError(f"{dst} is inside the checkpoint directory {directory}")
    with ZArchive(max_read_bytes=max_read_bytes).open(directory) as arc:
        if not isinstance(arc, ShardedCheckpoint):
            raise FormatError(f"{directory} is not a sharded checkpoint directory")
        state = arc.load()
        count = len(arc.index.entries)
    ZArchive(compress=compress).save(state, dst)
    return count
