"""The open gate: every file a read, a listing or a store opens is a regular file, checked without
blocking.

A path read from a folder (a model store's versions, a DCP checkpoint's shards, a sharded checkpoint's
files, a sidecar beside a file) can name a FIFO, a socket, a device or a directory. Opening a FIFO for
reading blocks until a writer appears, so `open()` followed by a check would hang before checking. The
gate opens with `O_NONBLOCK` (which makes opening a FIFO return at once), checks the open descriptor
with `fstat` (`S_ISREG`: no race between a check and the open), and only then clears `O_NONBLOCK` for
the reads that follow. Listings use `regular_file` (a `stat`, which never blocks) to skip what is not
a file.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from ..errors import FormatError

__all__ = ["NotARegularFileError", "open_regular", "open_regular_fd", "regular_file"]

_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


class NotARegularFileError(FormatError, IsADirectoryError):
    """A path that a read was asked to open (or found in a folder it reads) is not a regular file: a
    directory, a FIFO, a socket or a device. (Also an IsADirectoryError, as the OS would say for one.)"""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_regular_fd(path: str | os.PathLike[str], *, what: str = "file") -> tuple[int, os.stat_result]:
    """Open `path` for reading if it is a regular file, without blocking on a FIFO: (descriptor, stat).

    Raises NotARegularFileError for anything else, and the OS's own error (FileNotFoundError,
    PermissionError, ...) where the path cannot be opened at all."""
    fd = os.open(path, _FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFileError(
                f"{what} {os.fspath(path)!r} is {_kind(st.st_mode)}, not a regular file: zarchive reads regular files only"
            )
        if _FLAGS & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def open_regular(path: str | os.PathLike[str], *, what: str = "file") -> BinaryIO:
    """`open(path, "rb")` for regular files only, checked without blocking (see open_regular_fd)."""
    fd, _ = open_regular_fd(path, what=what)
    try:
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def regular_file(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a regular file (following links), by a `stat` that never blocks: for listings
    that skip what is not a file. A file found this way is still opened through `open_regular`."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False
