"""A strict zip reader: parses the central directory itself and trusts nothing it has not checked.

Python's `zipfile` accepts overlapping entries, silently cuts names at a NUL, returns the last of two
equal names and inflates without a bound. This reader instead checks every entry before anything is
read: known signatures, STORED entries only, names that are safe to extract, no duplicates (also after
Unicode and case folding), local headers that agree with the central directory, and entries that lie
inside the file without overlapping each other or the directory.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import IntegrityError, NotAZipError, UnsafeArchiveError
from .crc import crc32
from .names import check_name, collision_key
from .source import ByteSource
from .zipwriter import (
    CENTRAL_SIG,
    EOCD_SIG,
    LOCAL_HEADER_SIZE,
    LOCAL_SIG,
    MAX_U16,
    MAX_U32,
    ZIP64_EOCD_SIG,
    ZIP64_EXTRA_ID,
    ZIP64_LOCATOR_SIG,
)

DEFAULT_MAX_MEMBERS = 1_000_000
FRONT_BYTES = 64 << 10  # read ahead at the start of a file: local headers, JSON members, a first header
TAIL_BYTES = 8 << 10  # and at its end: the end record and (up to ~100 members) the central directory
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_LOCAL = struct.Struct("<IHHHHHIIIHH")
_ALLOWED_FLAGS = 0x0800  # UTF-8 names; no encryption, no data descriptors, nothing else


@dataclass(frozen=True, slots=True)
class MemberInfo:
    name: str
    header_offset: int
    data_offset: int
    size: int
    crc: int


def _sniff(head: bytes) -> str | None:
    """A human explanation for common not-an-archive files, or None."""
    text = head.lstrip()[:64].lower()
    if text.startswith(b"version https://git-lfs"):
        return "this is a git-LFS pointer file, not the archive itself (run `git lfs pull`)"
    if text.startswith((b"<!doctype html", b"<html", b"<?xml", b"<head", b"<body")):
        return "this is an HTML/XML page (an error page saved by a failed download?), not an archive"
    return None


class ZipReader:
    """The validated table of members of one zip file."""

    def __init__(self, source: ByteSource, *, max_members: int = DEFAULT_MAX_MEMBERS) -> None:
        self.source = source
        size = source.size
        if size == 0:
            raise NotAZipError("the file is empty: not an archive")
        read_ahead = getattr(source, "read_ahead", None)
        if read_ahead is not None:  # the start (local headers, the JSON members) and the end (directory)
            read_ahead(0, FRONT_BYTES)
            read_ahead(size - TAIL_BYTES, TAIL_BYTES)
        head = bytes(source.view(0, min(size, 64)))
        hint = _sniff(head)
        if hint:
            raise NotAZipError(hint)
        if not head.startswith(b"PK\x03\x04"):
            raise NotAZipError(f"not a zip archive (the file starts with {head[:8]!r})")
        cd_offset, cd_size, count, _ = self._find_directory(size)
        if count > max_members:
            raise UnsafeArchiveError(f"the archive lists {count} members, more than the limit of {max_members}")
        if cd_size < 46 * count:
            raise NotAZipError("the central directory is too small for the entries it declares")
        self.members: dict[str, MemberInfo] = {}
        self._parse_directory(bytes(source.view(cd_offset, cd_size)), count, cd_offset)
        self._check_layout(cd_offset)

    # --- end of central directory ---
    def _find_directory(self, size: int) -> tuple[int, int, int, int]:
        # The end record is the last one whose comment reaches the file's end. Looked for in the last
        # TAIL_BYTES first (zarchive writes no comment), then in all the last 64 KiB a comment allows:
        # the candidates are tried from the end backwards either way, so both find the same one.
        for tail_len in (min(size, TAIL_BYTES), min(size, 22 + 0xFFFF)):
            tail = bytes(self.source.view(size - tail_len, tail_len))
            pos = _end_record(tail)
            if pos >= 0 or tail_len == size:
                break
        if pos < 0:
            raise NotAZipError("no zip end-of-directory record: the file is truncated or not a zip archive")
        eocd_at = size - tail_len + pos
        (_, disk, cd_disk, n_disk, n_total, cd_size, cd_offset, _) = struct.unpack_from("<IHHHHIIH", tail, pos)
        if disk != 0 or cd_disk != 0 or n_disk != n_total:
            raise NotAZipError("multi-disk (split) zip archives are not supported")
        cd_end = eocd_at
        if n_total == MAX_U16 or cd_size == MAX_U32 or cd_offset == MAX_U32:
            if eocd_at < 20:
                raise NotAZipError("zip64 markers without a zip64 locator")
            loc = bytes(self.source.view(eocd_at - 20, 20))
            sig, _, z64_at, _ = struct.unpack("<IIQI", loc)
            if sig != ZIP64_LOCATOR_SIG:
                raise NotAZipError("zip64 markers without a zip64 locator")
            if z64_at + 56 > eocd_at - 20:
                raise NotAZipError("zip64 end record outside the file")
            rec = bytes(self.source.view(z64_at, 56))
            (sig, _, _, _, _, _, n_disk64, n_total, cd_size, cd_offset) = struct.unpack("<IQHHIIQQQQ", rec)
            if sig != ZIP64_EOCD_SIG or n_disk64 != n_total:
                raise NotAZipError("bad zip64 end-of-directory record")
            cd_end = z64_at
        if cd_offset + cd_size != cd_end:
            raise NotAZipError(
                "the central directory does not end where the end record says "
                "(truncated file, or data appended/prepended)"
            )
        return cd_offset, cd_size, n_total, cd_end

    # --- central directory ---
    def _parse_directory(self, cd: bytes, count: int, cd_offset: int) -> None:
        # one pass, kept tight: an archive may list up to max_members entries
        seen: set[str] = set()
        unpack = _CENTRAL.unpack_from
        p = 0
        for _ in range(count):
            if p + 46 > len(cd):
                raise NotAZipError("the central directory is truncated")
            (sig, _, _, flags, method, _, _, crc, csize, usize, n, m, k, disk, _, _, offset) = unpack(cd, p)
            if sig != CENTRAL_SIG:
                raise NotAZipError("bad signature in the central directory")
            if p + 46 + n + m + k > len(cd):
                raise NotAZipError("the central directory is truncated")
            raw_name = cd[p + 46 : p + 46 + n]
            extra = cd[p + 46 + n : p + 46 + n + m]
            p += 46 + n + m + k
            try:
                name = raw_name.decode("utf-8")
            except UnicodeDecodeError:
                raise UnsafeArchiveError(f"member name is not UTF-8: {raw_name[:80]!r}") from None
            check_name(name)
            if flags & ~_ALLOWED_FLAGS:
                raise UnsafeArchiveError(
                    f"unsupported zip flags 0x{flags:04x} (encryption or data descriptors)", member=name
                )
            if method != 0:
                raise UnsafeArchiveError(
                    f"zip compression method {method}: zarchive members are stored (method 0)",
                    member=name,
                )
            if disk != 0:
                raise NotAZipError("member on another disk", member=name)
            if usize == MAX_U32 or csize == MAX_U32 or offset == MAX_U32:
                usize, csize, offset = _apply_zip64(extra, usize, csize, offset, name)
            if usize != csize:
                raise UnsafeArchiveError("stored member whose compressed and uncompressed sizes differ", member=name)
            key = collision_key(name)
            if key in seen:
                first = next(n for n in self.members if collision_key(n) == key)
                raise UnsafeArchiveError(
                    f"duplicate member name (same as {first!r} after case/Unicode folding)", member=name
                )
            seen.add(key)
            data_offset = self._data_offset(name, raw_name, offset, crc, usize, cd_offset)
            self.members[name] = MemberInfo(name, offset, data_offset, usize, crc)
        if p != len(cd):
            raise NotAZipError("the central directory has trailing bytes")

    def _data_offset(self, name: str, raw_name: bytes, offset: int, crc: int, size: int, cd_offset: int) -> int:
        if offset + LOCAL_HEADER_SIZE > cd_offset:
            raise NotAZipError("local header outside the data area", member=name)
        # the header and the name it should hold, in one read (the name's length from the directory)
        head = self.source.view(offset, min(LOCAL_HEADER_SIZE + len(raw_name), cd_offset - offset))
        (sig, _, flags, method, _, _, lcrc, lcsize, lusize, n, m) = _LOCAL.unpack_from(head)
        if sig != LOCAL_SIG:
            raise NotAZipError("bad local header signature", member=name)
        if method != 0 or flags & ~_ALLOWED_FLAGS:
            raise UnsafeArchiveError("local header disagrees with the directory", member=name)
        if offset + LOCAL_HEADER_SIZE + n + m > cd_offset:
            raise NotAZipError("local header runs into the central directory", member=name)
        if n != len(raw_name) or head[LOCAL_HEADER_SIZE:] != raw_name:
            raise UnsafeArchiveError("local header names a different member", member=name)
        if lcrc != crc or (lusize != MAX_U32 and (lusize != size or lcsize != size)):
            raise UnsafeArchiveError("local header sizes or CRC disagree with the directory", member=name)
        return offset + LOCAL_HEADER_SIZE + n + m

    def _check_layout(self, cd_offset: int) -> None:
        spans = sorted((m.header_offset, m.data_offset + m.size, m.name) for m in self.members.values())
        end_prev, prev = 0, None
        for start, end, name in spans:
            if start < end_prev:
                raise UnsafeArchiveError(f"member overlaps member {prev!r}", member=name)
            end_prev, prev = end, name
        if end_prev > cd_offset:
            raise UnsafeArchiveError("member data runs into the central directory", member=prev)

    # --- data ---
    def view(self, name: str) -> memoryview:
        info = self.members[name]
        return self.source.view(info.data_offset, info.size)

    def read_checked(self, name: str) -> memoryview:
        """The member's bytes, after checking them against the zip CRC."""
        data = self.view(name)
        if crc32(data) != self.members[name].crc:
            raise IntegrityError("member bytes do not match the zip CRC (damaged file)", member=name)
        return data


def _end_record(tail: bytes) -> int:
    """Where in `tail` (the file's last bytes) the end-of-directory record starts: the last signature
    whose comment length reaches exactly to the end; -1 if there is none."""
    sig = struct.pack("<I", EOCD_SIG)
    pos = tail.rfind(sig)
    while pos >= 0:
        if pos + 22 <= len(tail) and pos + 22 + struct.unpack_from("<H", tail, pos + 20)[0] == len(tail):
            return pos
        pos = tail.rfind(sig, 0, pos)
    return -1


def _apply_zip64(extra: bytes, usize: int, csize: int, offset: int, name: str) -> tuple[int, int, int]:
    need = (usize == MAX_U32, csize == MAX_U32, offset == MAX_U32)
    if not any(need):
        return usize, csize, offset
    p = 0
    while p + 4 <= len(extra):
        hid, hlen = struct.unpack_from("<HH", extra, p)
        if hid == ZIP64_EXTRA_ID:
            body = extra[p + 4 : p + 4 + hlen]
            vals = []
            for i in range(len(body) // 8):
                vals.append(struct.unpack_from("<Q", body, 8 * i)[0])
            it = iter(vals)
            try:
                if need[0]:
                    usize = next(it)
                if need[1]:
                    csize = next(it)
                if need[2]:
                    offset = next(it)
            except StopIteration:
                raise NotAZipError("zip64 extra field too short", member=name) from None
            return usize, csize, offset
        p += 4 + hlen
    raise NotAZipError("zip64 sizes without a zip64 extra field", member=name)
