"""Where an archive's bytes come from: a local file, or any seekable file object.

A local file is opened only if it is a regular file, checked without blocking (container.open_gate:
a FIFO named like an archive must not hang the reader). It is read with `pread` into memory of the reader's own (`LocalFileSource`, the default):
values built on it are plain anonymous memory, which nothing another process does to the file can
take away. `MappedSource` (opt-in: `ZArchive(mmap=True)`) hands out zero-copy `memoryview`s of a
private (copy-on-write) mapping instead: arrays and tensors built on them are writable, writing never
reaches the file, and the mapping lives as long as any view of it does. But a mapping is the file:
when another process truncates the file, Linux removes every page past the new end from every
mapping of it, copied-on-write pages included, and touching one kills the process with SIGBUS.
No prefaulting helps (tested: MADV_POPULATE_READ-style reads and write-faulted copies both die), so
only a copy is safe. Both sources check the file's size on every read and raise SourceChangedError
(an IntegrityError) when it shrank, rather than read past its end.
"""

from __future__ import annotations

import io
import mmap
import os
import threading
import weakref
from typing import BinaryIO, Protocol

from ..errors import FormatError, IntegrityError
from .crc import crc32
from .fresh_memory import new_buffer, populate
from .open_gate import open_regular, open_regular_fd
from .thread_pools import worker_count

PARALLEL_FROM = 64 << 20  # reads this big are split over threads (pread releases the GIL)
PARALLEL_PART = 32 << 20
MAX_READ_AHEAD = 1 << 20  # the most a read_ahead range holds (the views it serves are at most this)
CRC_PIECE = 1 << 20  # read_into_crc: checksummed a piece at a time as it lands (fits the CPU's L2 cache)


class SourceChangedError(IntegrityError):
    """The file shrank (another process truncated it, or rewrote it in place) while it was open."""


class ByteSource(Protocol):
    size: int
    mapped: bool

    def view(self, offset: int, length: int) -> memoryview:
        """`length` bytes at `offset` (a zero-copy view where the source is mapped)."""
        ...

    def close(self) -> None: ...


def _check_range(offset: int, length: int, size: int) -> None:
    if offset < 0 or length < 0 or offset + length > size:
        raise FormatError(f"range {offset}+{length} outside the file ({size} bytes)")


def _shrunk(fd: int, offset: int, length: int, size: int) -> SourceChangedError:
    try:
        now: int | str = os.fstat(fd).st_size
    except OSError:
        now = "?"
    return SourceChangedError(
        f"the file is {now} bytes now, {size} when it was opened: it was truncated or rewritten "
        f"while open (bytes {offset}..{offset + length} are gone)"
    )


def _pread_into(fd: int, buf: memoryview, offset: int) -> int:
    """Read into all of `buf` from `offset`; the count read (short only at the file's end)."""
    got = 0
    while got < buf.nbytes:
        n = os.preadv(fd, [buf[got:]], offset + got)
        if n <= 0:
            break
        got += n
    return got


class ReadAhead:
    """Small ranges of a file read ahead in one pread each (read_ahead), to serve the views that lie
    inside them without a system call each."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, memoryview]] = []  # (offset, bytes)

    def read(self, fd: int, offset: int, length: int, size: int) -> int:
        """Read [offset, offset + length) of the file (clipped to it; at most MAX_READ_AHEAD bytes,
        else nothing) unless a range read already holds it; the count of bytes read."""
        offset = max(0, offset)
        length = min(length, size - offset)
        if length <= 0 or length > MAX_READ_AHEAD or self.inside(offset, length) is not None:
            return 0
        buf = memoryview(bytearray(length))
        if _pread_into(fd, buf, offset) != length:
            raise _shrunk(fd, offset, length, size)
        self.ranges.append((offset, buf))
        return length

    def inside(self, offset: int, length: int) -> memoryview | None:
        """The bytes at [offset, offset + length) where one range read holds them all, else None."""
        for at, data in self.ranges:
            if at <= offset and offset + length <= at + data.nbytes:
                return data[offset - at : offset - at + length]
        return None


class LocalFileSource:
    """A local file read with `pread` into new memory for every range (the default for local paths).

    Thread-safe without a lock (pread has no shared file position); big ranges are read on several
    threads. Reading past the file's current end raises SourceChangedError."""

    mapped = False

    def __init__(self, path: str | os.PathLike[str], *, what: str = "file") -> None:
        fd, st = open_regular_fd(path, what=what)  # a FIFO, device or directory: refused without blocking
        self.size = st.st_size
        self.bytes_read = 0
        self._fd: int | None = fd
        self._close_fd = weakref.finalize(self, _close_fd, fd)
        self._ahead = ReadAhead()

    def read_ahead(self, offset: int, length: int) -> None:
        """Read a small range now, in one pread, and serve later views that lie inside it from it (each
        view still a copy of its own). Opening an archive reads its zip directory, local headers and
        JSON members (and a full read its members' headers): a dozen small reads near the file's start
        and end, each a system call and a buffer, that two reads ahead make two."""
        if self._fd is not None:
            self.bytes_read += self._ahead.read(self._fd, offset, length, self.size)

    def _inside(self, offset: int, length: int) -> memoryview | None:
        return self._ahead.inside(offset, length)

    def view(self, offset: int, length: int) -> memoryview:
        _check_range(offset, length, self.size)
        fd = self._fd
        if fd is None:
            raise ValueError("the source is closed")
        if self._ahead.ranges and length <= MAX_READ_AHEAD:
            known = self._inside(offset, length)
            if known is not None:
                return memoryview(bytearray(known))  # (a copy: the caller's own memory, as always)
        buf = new_buffer(length)
        if length < PARALLEL_FROM:
            populate(buf)
            got = _pread_into(fd, buf, offset)
        else:
            parts = [(p, min(PARALLEL_PART, length - p)) for p in range(0, length, PARALLEL_PART)]
            counts = [0] * len(parts)

            def work(first: int, step: int) -> None:
                for i in range(first, len(parts), step):
                    p, n = parts[i]
                    populate(buf[p : p + n])
                    counts[i] = _pread_into(fd, buf[p : p + n], offset + p)

            workers = min(worker_count(4), len(parts))
            threads = [threading.Thread(target=work, args=(w, workers), daemon=True) for w in range(1, workers)]
            for t in threads:
                t.start()
            try:
                work(0, workers)
            finally:
                for t in threads:
                    t.join()
            got = sum(counts)
        if got != length:
            raise _shrunk(fd, offset, length, self.size)
        self.bytes_read += length
        return buf

    def read_into(self, buf: memoryview, offset: int) -> None:
        """Fill `buf` from `offset` on the calling thread (for callers that spread a read themselves)."""
        _check_range(offset, buf.nbytes, self.size)
        fd = self._fd
        if fd is None:
            raise ValueError("the source is closed")
        if _pread_into(fd, buf, offset) != buf.nbytes:
            raise _shrunk(fd, offset, buf.nbytes, self.size)
        self.bytes_read += buf.nbytes

    def read_into_crc(self, buf: memoryview, offset: int) -> int:
        """Fill `buf` from `offset` on the calling thread and return the CRC-32 of what was read, taken
        a piece at a time right after each piece lands (while it is in the CPU's cache): one pass over
        the bytes where a read, then a checksum of the whole, makes two."""
        _check_range(offset, buf.nbytes, self.size)
        fd = self._fd
        if fd is None:
            raise ValueError("the source is closed")
        value = 0
        for at in range(0, buf.nbytes, CRC_PIECE):
            piece = buf[at : at + CRC_PIECE]
            if _pread_into(fd, piece, offset + at) != piece.nbytes:
                raise _shrunk(fd, offset + at, piece.nbytes, self.size)
            value = crc32(piece, value)
        self.bytes_read += buf.nbytes
        return value

    def view_crc(self, offset: int, length: int) -> tuple[memoryview, int]:
        """`view(offset, length)` and the CRC-32 of its bytes, in one pass (read_into_crc). Ranges of
        PARALLEL_FROM bytes or more are read on several threads by view(), then checksummed."""
        if length >= PARALLEL_FROM or (self._ahead.ranges and self._inside(offset, length) is not None):
            data = self.view(offset, length)
            return data, crc32(data)
        _check_range(offset, length, self.size)
        buf = new_buffer(length)
        populate(buf)
        return buf, self.read_into_crc(buf, offset)

    def close(self) -> None:
        self._fd = None
        self._close_fd()


class MappedSource:
    """A private, copy-on-write mapping of a local file (opt-in: see the module's docstring).

    The file is mapped when a view of more than MAX_READ_AHEAD bytes first needs it: until then small
    views (the zip directory, the JSON members, a header) are read with pread, read-only, and a load
    takes the bytes of its values from a mapping of its own (private_copy), so opening an archive
    and fetching one value maps the file once. Every view is preceded by an
    fstat: a read of a range past the file's current end raises SourceChangedError instead of
    touching pages that are gone. Values handed out earlier are not protected: touching them after
    another process truncated the file raises SIGBUS."""

    mapped = True

    def __init__(self, path: str | os.PathLike[str], *, what: str = "file") -> None:
        fd, st = open_regular_fd(path, what=what)  # a FIFO, device or directory: refused without blocking
        self.size = st.st_size
        self._fd: int | None = fd  # (also for private_copy(): the same inode, even once replaced)
        self._close_fd = weakref.finalize(self, _close_fd, fd)
        self._map: mmap.mmap | None = None
        self._view: memoryview | None = None
        self._ahead = ReadAhead()

    def _mapping(self) -> memoryview:
        if self._fd is None:
            raise ValueError("the source is closed")
        if self._view is None:
            self._map = mmap.mmap(self._fd, 0, access=mmap.ACCESS_COPY)
            self._view = memoryview(self._map)
        return self._view

    def read_ahead(self, offset: int, length: int) -> None:
        """Read a small range with one pread and serve views inside it from that copy (read-only)."""
        if self._fd is not None:
            self._ahead.read(self._fd, offset, length, self.size)

    def private_copy(self) -> MappedSource:
        """Another copy-on-write mapping of the same file. A private mapping is private to the mapping,
        not to each view of it: values written through one load's views would show in the next load
        from the same mapping, so each load takes its own."""
        if self._fd is None or self.size == 0:
            raise ValueError("the source is closed (or empty)")
        fd = os.dup(self._fd)
        # another instance of this class, set up by the class itself
        other = MappedSource.__new__(MappedSource)
        other.size, other._fd, other._ahead = self.size, fd, ReadAhead()  # noqa: SLF001
        other._close_fd = weakref.finalize(other, _close_fd, fd)  # noqa: SLF001
        other._map = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)  # noqa: SLF001
        other._view = memoryview(other._map)  # noqa: SLF001
        return other

    def view(self, offset: int, length: int) -> memoryview:
        _check_range(offset, length, self.size)
        fd = self._fd
        if fd is None:
            raise ValueError("the source is closed")
        if not length:
            return memoryview(b"")
        if length <= MAX_READ_AHEAD and self._view is None:  # (small: read, rather than map the file for it)
            known = self._ahead.inside(offset, length) if self._ahead.ranges else None
            if known is None:
                known = memoryview(bytearray(length))
                if _pread_into(fd, known, offset) != length:
                    raise _shrunk(fd, offset, length, self.size)
            return known.toreadonly()
        if os.fstat(fd).st_size < offset + length:
            raise _shrunk(fd, offset, length, self.size)
        return self._mapping()[offset : offset + length]

    def advise_sequential(self, offset: int, length: int) -> None:
        """Ask the kernel to read ahead a range we are about to scan in full."""
        if self._fd is None or not self.size or not hasattr(mmap, "MADV_WILLNEED"):
            return
        self._mapping()
        page = mmap.PAGESIZE
        start = offset - offset % page
        try:
            if self._map is not None:
                self._map.madvise(mmap.MADV_WILLNEED, start, min(length + offset - start, self.size - start))
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        # Views handed out keep the mapping alive; dropping our references is all that is safe.
        self._view = None
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
        _check_range(offset, length, self.size)
        with self._lock:
            self._f.seek(offset)
            data = self._f.read(length)
        if len(data) != length:
            raise SourceChangedError(
                f"short read: {len(data)} of {length} bytes at {offset} (the file shrank while open, "
                f"from {self.size} bytes)"
            )
        self.bytes_read += length
        return memoryview(bytearray(data))  # writable, like the mapped case

    def close(self) -> None:
        if self._owns:
            self._f.close()


class BytesSource(FileSource):
    """An archive held in memory."""

    def __init__(self, data: bytes | bytearray) -> None:
        super().__init__(io.BytesIO(data), owns=True)


def open_local(path: str | os.PathLike[str], *, mmap: bool = False, what: str = "file") -> ByteSource:
    """The source for a local file: read into memory of our own (default), or mapped (`mmap=True`).

    Only a regular file is opened, checked without blocking (container.open_gate): a FIFO, socket,
    device or directory raises NotARegularFileError (a FormatError, and an IsADirectoryError)."""
    if mmap:
        return MappedSource(path, what=what)
    if not hasattr(os, "preadv"):  # Windows: a file object behind a lock
        f = open_regular(path, what=what)
        try:
            return FileSource(f, owns=True)
        except BaseException:
            f.close()
            raise
    return LocalFileSource(path, what=what)
