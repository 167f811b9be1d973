"""A streaming zip writer made for zarchive's needs.

Why not `zipfile`: we need (1) every member's data to start at a chosen alignment, so tensors can be
mapped straight from the file; (2) the central directory in an order of our choosing (manifest and
metadata listed first, though metadata is written last); (3) CRCs computed by the caller while data
streams, never a second pass; (4) fixed timestamps, so the same object gives the same bytes.

Every entry is STORED (method 0): compression, where used, is a zstd frame inside the member, so that
`unzip` then `zstd -d` restores the original file. Entries of 4 GiB and more, and archives past 4 GiB,
use zip64 records.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import FormatError
from .crc import crc32

LOCAL_SIG = 0x04034B50
CENTRAL_SIG = 0x02014B50
EOCD_SIG = 0x06054B50
ZIP64_EOCD_SIG = 0x06064B50
ZIP64_LOCATOR_SIG = 0x07064B50
ZIP64_EXTRA_ID = 0x0001
PAD_EXTRA_ID = 0xD935  # the id Android's zipalign uses for alignment padding
DOS_DATE_1980 = (0 << 9) | (1 << 5) | 1  # 1980-01-01: fixed so archives are reproducible
DOS_TIME_0 = 0
FLAG_UTF8 = 0x0800
MAX_U32 = 0xFFFFFFFF
MAX_U16 = 0xFFFF
LOCAL_HEADER_SIZE = 30
ZIP64_SLOT = 20  # bytes reserved in every local header for a zip64 extra, if one is needed
MAX_NAME_BYTES = 4096
DIRECT_WRITE = 256 << 10  # bytes from which a write goes to the file descriptor directly


@dataclass
class Entry:
    """One written member: where it is and what the headers say of it."""

    name: str
    header_offset: int
    data_offset: int
    size: int = 0
    crc: int = 0


class EntryWriter:
    """A file-like sink for one member's bytes; tracks size and (optionally) the CRC."""

    def __init__(self, owner: ZipWriter, entry: Entry) -> None:
        self._owner = owner
        self.entry = entry
        self._crc = 0
        self.track_crc = True

    def write(self, data: bytes | bytearray | memoryview) -> int:
        n = len(data) if not isinstance(data, memoryview) else data.nbytes
        if n == 0:
            return 0
        if self.track_crc:
            self._crc = crc32(data, self._crc)
        self._owner._raw_write(data)  # noqa: SLF001 - the writer's own entry stream (this module)
        self.entry.size += n
        return n

    def write_untracked(self, data: bytes | bytearray | memoryview) -> int:
        """Write bytes whose CRC the caller folds in itself (see `close(crc=...)`)."""
        n = len(data) if not isinstance(data, memoryview) else data.nbytes
        if n:
            self._owner._raw_write(data)  # noqa: SLF001 - the writer's own entry stream (this module)
            self.entry.size += n
        return n

    def close(self, crc: int | None = None) -> Entry:
        self.entry.crc = self._crc if crc is None else crc
        self._owner._finish_entry(self.entry)  # noqa: SLF001 - the writer's own entry stream (this module)
        return self.entry

    # file-like protocol pieces that zstandard's stream_writer expects
    def flush(self) -> None:
        pass

    def tell(self) -> int:
        return self.entry.size


class ZipWriter:
    """Writes entries one after another into a seekable binary file, then the central directory."""

    def __init__(self, fileobj: BinaryIO) -> None:
        self._f = fileobj
        self._fd = fileobj.fileno()
        self._pos = fileobj.tell()
        self._entries: dict[str, Entry] = {}
        self._open = False

    def _raw_write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
        n = len(view)
        if n < DIRECT_WRITE:
            self._f.write(view)
        else:  # straight to the file: the file object's buffer would only add a copy of every byte
            self._f.flush()
            with memoryview(view) as rest:
                while rest:
                    rest = rest[os.write(self._fd, rest) :]
            self._f.seek(self._pos + n)  # (the file object learns where the file now ends)
        self._pos += n

    def open_entry(self, name: str, align: int = 1) -> EntryWriter:
        """Start a member; its data begins at a file offset that is a multiple of `align`."""
        if self._open:
            raise FormatError("internal: an entry is already open", member=name)
        if name in self._entries:
            raise FormatError("duplicate member name", member=name)
        raw_name = name.encode("utf-8")
        if len(raw_name) > MAX_NAME_BYTES:
            raise FormatError(f"member name longer than {MAX_NAME_BYTES} bytes", member=name)
        header_offset = self._pos
        base = header_offset + LOCAL_HEADER_SIZE + len(raw_name) + ZIP64_SLOT
        if align != 1 and (align < 4 or align & (align - 1)):
            raise ValueError("align must be 1 or a power of two >= 4")
        pad = (-base) % align
        if 0 < pad < 4:  # an extra field needs 4 bytes of header: go to the next boundary
            pad += align
        extra = struct.pack("<HH", PAD_EXTRA_ID, ZIP64_SLOT + pad - 4) + bytes(ZIP64_SLOT + pad - 4)
        header = _local_header(raw_name, extra, crc=0, size=0, zip64=False)
        self._raw_write(header)
        entry = Entry(name=name, header_offset=header_offset, data_offset=self._pos)
        self._open = True
        return EntryWriter(self, entry)

    def write_entry(self, name: str, data: bytes, align: int = 1) -> Entry:
        w = self.open_entry(name, align)
        w.write(data)
        return w.close()

    def _finish_entry(self, entry: Entry) -> None:
        raw_name = entry.name.encode("utf-8")
        zip64 = entry.size >= MAX_U32
        extra_len = entry.data_offset - entry.header_offset - LOCAL_HEADER_SIZE - len(raw_name)
        if zip64:
            extra = struct.pack("<HHQQ", ZIP64_EXTRA_ID, 16, entry.size, entry.size)
            rest = extra_len - ZIP64_SLOT
            if rest:
                extra += struct.pack("<HH", PAD_EXTRA_ID, rest - 4) + bytes(rest - 4)
        else:
            extra = struct.pack("<HH", PAD_EXTRA_ID, extra_len - 4) + bytes(extra_len - 4)
        header = _local_header(raw_name, extra, crc=entry.crc, size=entry.size, zip64=zip64)
        self._f.flush()  # the buffered bytes must reach the file before we patch under them
        os.pwrite(self._fd, header, entry.header_offset)
        self._entries[entry.name] = entry
        self._open = False

    def finish(self, order: list[str]) -> int:
        """Write the central directory listing `order` first, then the rest; return the file size."""
        if self._open:
            raise FormatError("internal: finish() with an entry still open")
        names = [n for n in order if n in self._entries]
        names += [n for n in self._entries if n not in set(order)]
        cd_offset = self._pos
        for name in names:
            self._raw_write(_central_header(self._entries[name]))
        cd_size = self._pos - cd_offset
        count = len(names)
        if count >= MAX_U16 or cd_offset >= MAX_U32 or cd_size >= MAX_U32:
            z64_offset = self._pos
            self._raw_write(
                struct.pack("<IQHHIIQQQQ", ZIP64_EOCD_SIG, 44, 45, 45, 0, 0, count, count, cd_size, cd_offset)
            )
            self._raw_write(struct.pack("<IIQI", ZIP64_LOCATOR_SIG, 0, z64_offset, 1))
            self._raw_write(struct.pack("<IHHHHIIH", EOCD_SIG, 0, 0, MAX_U16, MAX_U16, MAX_U32, MAX_U32, 0))
        else:
            self._raw_write(struct.pack("<IHHHHIIH", EOCD_SIG, 0, 0, count, count, cd_size, cd_offset, 0))
        self._f.flush()
        return self._pos


def _flags(raw_name: bytes) -> int:
    return FLAG_UTF8 if any(b >= 0x80 for b in raw_name) else 0


def _local_header(raw_name: bytes, extra: bytes, *, crc: int, size: int, zip64: bool) -> bytes:
    version = 45 if zip64 else 20
    stored = MAX_U32 if zip64 else size
    return (
        struct.pack(
            "<IHHHHHIIIHH",
            LOCAL_SIG,
            version,
            _flags(raw_name),
            0,  # method: stored
            DOS_TIME_0,
            DOS_DATE_1980,
            crc,
            stored,
            stored,
            len(raw_name),
            len(extra),
        )
        + raw_name
        + extra
    )


def _central_header(e: Entry) -> bytes:
    raw_name = e.name.encode("utf-8")
    z64 = b""
    size_field = e.size
    offset_field = e.header_offset
    if e.size >= MAX_U32:
        z64 += struct.pack("<QQ", e.size, e.size)
        size_field = MAX_U32
    if e.header_offset >= MAX_U32:
        z64 += struct.pack("<Q", e.header_offset)
        offset_field = MAX_U32
    extra = struct.pack("<HH", ZIP64_EXTRA_ID, len(z64)) + z64 if z64 else b""
    version = 45 if z64 else 20
    return (
        struct.pack(
            "<IHHHHHHIIIHHHHHII",
            CENTRAL_SIG,
            (3 << 8) | version,  # made by: unix, so unzip applies the permission bits below
            version,
            _flags(raw_name),
            0,
            DOS_TIME_0,
            DOS_DATE_1980,
            e.crc,
            size_field,
            size_field,
            len(raw_name),
            len(extra),
            0,  # comment length
            0,  # disk number
            0,  # internal attributes
            (0o100644 << 16),  # regular file, rw-r--r--
            offset_field,
        )
        + raw_name
        + extra
    )
