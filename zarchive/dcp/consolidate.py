"""A sharded checkpoint as one `.zarc` archive (`zarchive convert DIR out.zarc`)."""

from __future__ import annotations

import os
from typing import Any

from ..api import ZArchive
from ..container.remote import is_url
from ..errors import FormatError
from .location import Location
from .view import ShardedCheckpoint


def consolidate(
    directory: str,
    dst: str,
    *,
    compress: Any = True,
    max_read_bytes: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> int:
    """Read every value of the checkpoint in `directory` (a local directory, or a folder URL with its
    storage_options; checked as read) and save the nested state dict to the local file `dst`; return
    the number of keys. Needs memory for the whole state dict, within the read's budget
    (`max_read_bytes`; None: the default for the checkpoint's size)."""
    if not is_url(directory) and os.path.abspath(dst).startswith(os.path.abspath(directory) + os.sep):
        raise ValueError(f"{dst} is inside the checkpoint directory {directory}")
    at = Location(directory, storage_options)
    with ZArchive(max_read_bytes=max_read_bytes).open(at.folder_target, **at.open_settings) as arc:
        if not isinstance(arc, ShardedCheckpoint):
            raise FormatError(f"{directory} is not a sharded checkpoint directory")
        state = arc.load()
        count = len(arc.index.entries)
    ZArchive(compress=compress).save(state, dst)
    return count
