"""The zip layer of a ZANJ file, read defensively.

ZANJ files are ordinary zips written by Python's `zipfile`, usually deflated, so zarchive's own strict
reader (stored members only) cannot open them. This module lets `zipfile` read the central directory
and checks it first: member names must be safe, unique, the same in each local header, and not
overlapping; encryption is refused; every member's declared size is capped. Members are decoded by
zanj.zip_stream in bounded pieces, never past their declared size, so a hostile file cannot make a
reader inflate without bound, and `verify` checks each CRC holding one piece at a time (the compressed
members' declared sizes, what checking them decodes, within the read's budget). Everything is read
from a zarchive ByteSource (a mapped local file, bytes, or a remote file object).
"""

from __future__ import annotations

import io
import itertools
import json
import struct
import zipfile
from collections.abc import Callable, Iterable
from typing import Any

from ...container.budget import ReadBudget, holds_json, json_memory_estimate
from ...container.crc import crc32
from ...container.jsontext import check_depth
from ...container.names import collision_key, name_problem
from ...container.source import ByteSource
from ...errors import FormatError, IntegrityError, MemberNotFoundError, NotAZipError, UnsafeArchiveError
from .zip_stream import decoder_memory, member_pieces

MAIN_NAME = "__zanj__.json"
META_NAME = "__zanj_meta__.json"
MAX_MEMBERS = 1_000_000
MAX_JSON_BYTES = 512 << 20
_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")
_LOCAL_SIG = 0x04034B50
_ALLOWED_METHODS = {
    zipfile.ZIP_STORED: "none",
    zipfile.ZIP_DEFLATED: "deflate",
    zipfile.ZIP_BZIP2: "bzip2",
    zipfile.ZIP_LZMA: "lzma",
}


class _SourceFile(io.RawIOBase):
    """A seekable, read-only file object over a ByteSource, for `zipfile`."""

    def __init__(self, source: ByteSource) -> None:
        self._src = source
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._src.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buf: Any) -> int:
        n = max(0, min(len(buf), self._src.size - self._pos))
        if n:
            buf[:n] = self._src.view(self._pos, n)
            self._pos += n
        return n


def loads_json(data: str | bytes | bytearray | memoryview, *, member: str) -> Any:
    """JSON as ZANJ writes it: standard JSON plus the NaN/Infinity tokens Python emits.

    Duplicate keys are refused (two readers could disagree on which wins); depth is bounded by the
    interpreter's recursion limit, and running into it is a FormatError, not a crash.
    """

    def no_dupes(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) != len(pairs):
            raise ValueError("duplicate key in a JSON object")
        return out

    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
        check_depth(text, member=member)
        return json.loads(text, object_pairs_hook=no_dupes)
    except RecursionError:
        raise FormatError("JSON nested too deeply", member=member) from None
    except MemoryError:
        raise UnsafeArchiveError("not enough memory to parse this JSON", member=member) from None
    except FormatError:
        raise
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError(f"invalid JSON: {str(e)[:200]}", member=member) from None


_BAD_CRC = "the member's bytes do not match the zip's CRC (damaged file)"


class ZanjZip:
    """The checked member table of a ZANJ zip, and bounded, checksummed member reads (the
    plan.MemberReader a read of a ZANJ file goes through)."""

    format_version = "1.0"  # no zarchive node types of a newer version: every node is ZANJ's

    def __init__(
        self,
        source: ByteSource,
        *,
        max_member_bytes: int,
        max_members: int = MAX_MEMBERS,
        max_read_bytes: int | None = None,
        budget: ReadBudget | None = None,
    ) -> None:
        self.source = source
        # the open file's budget (`budget`, where the caller keeps one, e.g. a foreign file's; else one
        # made of max_read_bytes): JSON parsed charged here; reads plan the rest
        self.budget = budget if budget is not None else ReadBudget(max_read_bytes, source.size)
        self.max_member_bytes = max_member_bytes
        try:
            self._zf = zipfile.ZipFile(_SourceFile(source))
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, struct.error) as e:
            raise NotAZipError(f"not a readable zip file: {e}") from None
        infos = self._zf.infolist()
        if len(infos) > max_members:
            raise UnsafeArchiveError(f"the zip lists {len(infos)} members, more than the limit of {max_members}")
        self.members: dict[str, zipfile.ZipInfo] = {}
        seen: dict[str, str] = {}
        for info in infos:
            name = info.orig_filename  # zipfile cuts names at a NUL; judge the name as stored
            if name.endswith("/") and info.file_size == 0:  # (ZipInfo.is_dir fails on an empty name)
                continue
            problem = name_problem(name)
            if problem:
                raise UnsafeArchiveError(problem, member=name[:200])
            key = collision_key(name)
            if key in seen:
                raise UnsafeArchiveError(f"duplicate member name (same as {seen[key]!r})", member=name)
            seen[key] = name
            if info.flag_bits & 0x1:
                raise UnsafeArchiveError("encrypted zip members are not supported", member=name)
            if info.compress_type not in _ALLOWED_METHODS:
                raise UnsafeArchiveError(f"unsupported zip compression method {info.compress_type}", member=name)
            self.members[name] = info
        self._check_layout()
        self.on_read: Callable[[str, int], None] | None = None  # (member, bytes) per read, for progress bars

    def _check_layout(self) -> None:
        """Refuse members whose bytes overlap: the classic way to make a small zip inflate to terabytes."""
        spans = []
        for name, info in self.members.items():
            start = info.header_offset
            if start < 0 or start + _LOCAL_HEADER.size > self.source.size:
                raise NotAZipError("local header outside the file", member=name)
            fields = _LOCAL_HEADER.unpack(bytes(self.source.view(start, _LOCAL_HEADER.size)))
            if fields[0] != _LOCAL_SIG:
                raise NotAZipError("bad local header signature", member=name)
            end = start + _LOCAL_HEADER.size + fields[9] + fields[10] + info.compress_size
            if end > self.source.size:
                raise NotAZipError("member data runs past the end of the file (truncated?)", member=name)
            local = bytes(self.source.view(start + _LOCAL_HEADER.size, fields[9]))
            if local.decode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace") != name:
                raise UnsafeArchiveError("its local header names another member: readers would disagree", member=name)
            spans.append((start, end, name))
        spans.sort()
        for (_, end_a, a), (start_b, _, b) in itertools.pairwise(spans):
            if start_b < end_a:
                raise UnsafeArchiveError(f"member overlaps member {a!r}", member=b)

    def codec(self, name: str) -> str:
        return _ALLOWED_METHODS[self.members[name].compress_type]

    def entry(self, name: str) -> dict[str, Any]:
        """The member in the shape of a zarchive metadata entry (codec, sizes, crc32)."""
        info = self.members[name]
        return {
            "codec": self.codec(name),
            "size": info.file_size,
            "stored_size": info.compress_size,
            "crc32": f"{info.CRC:08x}",
        }

    def member_entry(self, name: str, *, path: str | None = None) -> dict[str, Any]:
        """A data member's entry (codec, sizes, CRC): refused if it is missing, one of ZANJ's own
        JSON members, or larger than the reader's size cap."""
        info = self.members.get(name) if isinstance(name, str) else None
        if info is None or name in (MAIN_NAME, META_NAME):
            what = "one of the file's own JSON members" if info is not None else "a member it does not have"
            raise MemberNotFoundError(f"the ZANJ file refers to {what}", member=str(name)[:200], path=path)
        if info.file_size > self.max_member_bytes:
            raise UnsafeArchiveError(
                f"declares {info.file_size} uncompressed bytes, over the limit of {self.max_member_bytes}",
                member=name,
                path=path,
            )
        return self.entry(name)

    def member_bytes(self, name: str, *, path: str | None = None, expected_size: int | None = None) -> memoryview:
        """A data member's bytes, inflated and checked; every call gets bytes of its own (writable)."""
        entry = self.member_entry(name, path=path)
        if expected_size is not None and entry["size"] != expected_size:
            raise UnsafeArchiveError(
                f"the zip declares {entry['size']} bytes, the node needs {expected_size}", member=name, path=path
            )
        data = memoryview(self.read(name, path=path))
        if holds_json(name):  # its caller parses it next
            self.budget.charge_json(data, member=name)
        return data

    def read(self, name: str, *, path: str | None = None, limit: int | None = None) -> bytearray:
        """A member's bytes, inflated (never past its declared size) and checked against its CRC.
        `limit` replaces the reader's size cap (the JSON members have their own)."""
        info = self.members.get(name)
        if info is None:
            raise MemberNotFoundError("the ZANJ file refers to a member it does not have", member=name, path=path)
        cap = self.max_member_bytes if limit is None else limit
        if info.file_size > cap:
            raise UnsafeArchiveError(
                f"declares {info.file_size} uncompressed bytes, over the limit of {cap}", member=name, path=path
            )
        self.budget.fits(decoder_memory(info), "decoding the member", member=name, path=path)
        out = bytearray()
        value = 0
        for piece in member_pieces(self.source, info, member=name, path=path):
            value = crc32(piece, value)
            out += piece
        if value != info.CRC:
            raise IntegrityError(_BAD_CRC, member=name, path=path)
        if self.on_read is not None:
            self.on_read(name, len(out))
        return out

    def read_json(self, name: str) -> Any:
        """One of ZANJ's own JSON members, parsed. What parsing it builds is estimated piece by piece
        (the estimate is a sum over the text) and charged before the member is inflated whole."""
        info = self.members[name]
        if info.file_size > MAX_JSON_BYTES:
            raise UnsafeArchiveError(
                f"declares {info.file_size} uncompressed bytes, over the limit of {MAX_JSON_BYTES}", member=name
            )
        cost = sum(json_memory_estimate(piece) for piece in member_pieces(self.source, info, member=name))
        self.budget.charge(cost, "parsing this JSON", member=name)
        data = self.read(name, limit=MAX_JSON_BYTES)
        return loads_json(data, member=name)

    def verify_all(self) -> list[tuple[str, str]]:
        """Check every member against its CRC; (member, problem) for each failure (see verify_members)."""
        return self.verify_members(self.members)

    def verify_members(self, names: Iterable[str], *, budget: ReadBudget | None = None) -> list[tuple[str, str]]:
        """Decode members `names` piece by piece and check each against its zip CRC, holding one piece
        (1 MiB) at a time; (member, problem) for each failure. What the compressed members declare,
        the bytes checking them decodes, must be within the read's budget (`budget`, else the file's
        own): a file declaring more is refused whole (UnsafeArchiveError), as a read of it is."""
        budget = budget if budget is not None else self.budget
        infos = {name: self.members[name] for name in names}
        decoded = sum(int(i.file_size) for i in infos.values() if i.compress_type != zipfile.ZIP_STORED)
        if decoded > budget.limit:
            largest = max(
                infos, key=lambda n: infos[n].file_size if infos[n].compress_type != zipfile.ZIP_STORED else -1
            )
            raise budget.refusal(
                f"checking the CRCs of its compressed members decodes {decoded:,} bytes (this member "
                f"{infos[largest].file_size:,})",
                member=largest,
            )
        problems: list[tuple[str, str]] = []
        for name, info in infos.items():
            if info.file_size > self.max_member_bytes:
                problems.append(
                    (name, f"declares {info.file_size} uncompressed bytes, over the limit of {self.max_member_bytes}")
                )
                continue
            budget.fits(decoder_memory(info), "decoding the member to check its CRC", member=name)
            try:
                value = 0
                for piece in member_pieces(self.source, info, member=name):
                    value = crc32(piece, value)
            except IntegrityError as e:
                problems.append((name, e.message))
                continue
            if value != info.CRC:
                problems.append((name, _BAD_CRC))
            if self.on_read is not None:
                self.on_read(name, int(info.file_size))
        return problems

    def close(self) -> None:
        self._zf.close()
        self.source.close()


def looks_like_zanj(source: ByteSource) -> bool:
    """Whether the bytes are a zip that holds ZANJ's main JSON member (decided by content, not name)."""
    if source.size < 22 or bytes(source.view(0, 4)) != b"PK\x03\x04":
        return False
    try:
        with zipfile.ZipFile(_SourceFile(source)) as zf:
            return any(i.orig_filename == MAIN_NAME for i in zf.infolist())
    except Exception:  # noqa: BLE001  # any failure to parse means: not something we can read as ZANJ
        return False
