"""Where an archive's bytes come from: a memory-mapped local file, or any seekable file object.

A mapped source hands out zero-copy `memoryview`s of a private (copy-on-write) mapping: arrays and
tensors built on them are writable, writing never reaches the file, and the mapping lives as long as
any view of it does, so values outlive the archive object that produced them.
"""

from __future__ import annotations

import io
import mmap
import os
import threading
import weakref
from typing import BinaryIO, Protocol


class ByteSource(Protocol):
    size: int
    mapped: bool

    def view(self, offset: int, length: int) -> memoryview:
        """`length` bytes at `offset` (a zero-copy view where the source is mapped)."""
        ...

    def close(self) -> None: ...


class MappedSource:
    """A private, copy-on-write mapping of a local file."""

    mapped = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._fd: int | None = None
        with open(path, "rb") as f:
            self.size = os.fstat(f.fileno()).st_size
            if self.size == 0:
                self._map: mmap.mmap | None = None
                self._view = memoryview(b"")
            else:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
                self._view = memoryview(self._map)
                self._fd = os.dup(f.fileno())  # for private_copy(): the same inode, even once replaced
        self._close_fd = weakref.finalize(self, _close_fd, self._fd)

    def private_copy(self) -> MappedSource:
        """Another copy-on-write mapping of the same file. A private mapping is private to the mapping,
        not to each view of it: values written through one load's views would show in the next load
        from the same mapping, so each load takes its own."""
        if self._fd is None:
            raise ValueError("the source is closed (or empty)")
        other = MappedSource.__new__(MappedSource)
        other.size, other._fd = self.size, None
        other._map = mmap.mmap(self._fd, 0, access=mmap.ACCESS_COPY)
        other._view = memoryview(other._map)
        other._close_fd = weakref.finalize(other, _close_fd, None)
        return other

    def view(self, offset: int, length: int) -> memoryview:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ValueError("range outside the file")
        return self._view[offset : offset + length]

    def advise_sequential(self, offset: int, length: int) -> None:
        """Ask the kernel to read ahead a range we are about to scan in full."""
        if self._map is not None and hasattr(mmap, "MADV_WILLNEED"):
            page = mmap.PAGESIZE
            start = offset - offset % page
            try:
                self._map.madvise(mmap.MADV_WILLNEED, start, min(length + offset - start, self.size - start))
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        # Views handed out keep the mapping alive; dropping our references is all that is safe.
        self._view = memoryview(b"")
        self._map = None
        self._fd = None
        self._close_fd()


def _close_fd(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


class FileSource:
    """Reads ranges from a seekable binary file object (e.g. an fsspec remote file)."""

    mapped = False

    def __init__(self, fileobj: BinaryIO, *, owns: bool = False) -> None:
        self._f = fileobj
        self._owns = owns
        self._lock = threading.Lock()
        fileobj.seek(0, io.SEEK_END)
        self.size = fileobj.tell()
        self.bytes_read = 0

    def view(self, offset: int, length: int) -> memoryview:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ValueError("range outside the file")
        with self._lock:
            self._f.seek(offset)
            data = self._f.read(length)
        if len(data) != length:
            raise ValueError("short read")
        self.bytes_read += length
        return memoryview(bytearray(data))  # writable, like the mapped case

    def close(self) -> None:
        if self._owns:
            self._f.close()


class BytesSource(FileSource):
    """An archive held in memory."""

    def __init__(self, data: bytes | bytearray) -> None:
        super().__init__(io.BytesIO(data), owns=True)
