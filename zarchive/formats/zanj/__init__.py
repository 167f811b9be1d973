"""Reading files written by ZANJ (https://github.com/mivanit/ZANJ), zarchive's predecessor.

`zarchive.read("old.zanj")` and `zarchive.open("old.zanj")` come here when the file is a ZANJ zip
(recognised by its `__zanj__.json` member, not by its name). The reader is written from the on-disk
format alone: it shares no code with ZANJ and needs no ZANJ installed. It reads with zarchive's own
machinery and rules (a plan, then construction; the same read policy, limits and model budgets as a
.zarc): nothing is unpickled, nothing is imported, classes are matched by name among those already here.
`zarchive convert old.zanj new.zarc` turns one into a zarchive.
"""

from __future__ import annotations

import os
from typing import Any

from ...container.source import ByteSource, BytesSource, open_local
from ...engine.plan import ReadPolicy
from ...errors import ArchiveNotFoundError, FormatError
from ...options import ErrorMode
from .archive import DEFAULT_MAX_MEMBER_BYTES, ZanjArchive
from .container import MAIN_NAME, META_NAME, looks_like_zanj
from .nodes import nbytes_of, node_kind

__all__ = [
    "MAIN_NAME",
    "META_NAME",
    "ZanjArchive",
    "is_zanj_file",
    "looks_like_zanj",
    "nbytes_of",
    "node_kind",
    "open_if_zanj",
    "open_zanj",
    "read_zanj",
]


def open_zanj(
    file_path: str | os.PathLike[str] | bytes | ByteSource,
    *,
    error_mode: Any = ErrorMode.WARN,
    max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES,
    unknown: str = "error",
    policy: ReadPolicy | None = None,
) -> ZanjArchive:
    """Open a ZANJ file. unknown="dict" reads dataclasses and models whose class is not here (and
    formats this reader does not know) as plain dicts instead of raising UnknownTypeError.
    `policy`: trusted=, unresolved=, tensors= and limits, as zarchive.open takes them."""
    source = _source(file_path)
    try:
        return ZanjArchive(
            source,
            error_mode=ErrorMode.parse(error_mode),
            max_member_bytes=max_member_bytes,
            unknown=unknown,
            policy=policy,
        )
    except BaseException:
        source.close()
        raise


def read_zanj(
    file_path: str | os.PathLike[str] | bytes, *, map_location: Any = None, dtype: Any = None, **options: Any
) -> Any:
    """Everything a ZANJ file holds, as Python objects."""
    with open_zanj(file_path, **options) as arc:
        return arc.load(map_location=map_location, dtype=dtype)


def open_if_zanj(source: ByteSource, za: Any, policy: ReadPolicy | None = None) -> ZanjArchive | None:
    """A ZanjArchive over `source` if it holds a ZANJ file, else None; used by ZArchive.open (with
    its read policy) when the zarchive reader rejected the file. The source is closed if reading it
    as ZANJ fails."""
    if not looks_like_zanj(source):
        return None
    try:
        return ZanjArchive(
            source, error_mode=za.settings.error_mode, max_member_bytes=za.max_decompressed, policy=policy
        )
    except BaseException:
        source.close()
        raise


def is_zanj_file(file_path: str | os.PathLike[str]) -> bool:
    """Whether a local file is a ZANJ zip (by content)."""
    try:
        source = open_local(os.fspath(file_path))
    except OSError:
        return False
    try:
        return looks_like_zanj(source)
    finally:
        source.close()


def _source(file_path: Any) -> ByteSource:
    if isinstance(file_path, (bytes, bytearray)):
        return BytesSource(bytes(file_path))
    if hasattr(file_path, "view") and hasattr(file_path, "size"):
        return file_path
    path = os.fspath(file_path)
    try:
        return open_local(path)
    except FileNotFoundError:
        raise ArchiveNotFoundError(f"no file at {path!r}") from None
    except IsADirectoryError:
        if not os.path.isdir(path):  # a FIFO, socket or device: the open gate's own refusal
            raise
        raise FormatError(f"{path!r} is a directory, not a ZANJ file") from None
