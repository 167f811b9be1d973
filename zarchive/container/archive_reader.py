"""Opens an archive: validates the zip, the metadata and the manifest, then serves members on demand.

Opening reads only the zip directory, `metadata.json` and `manifest.json`. Member bytes are read when
asked for, checked against the checksums the metadata records (unless verification is switched off),
and compressed members are decompressed one at a time, bounded by their declared size.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..errors import FormatError, IntegrityError, MemberNotFoundError, UnsafeArchiveError
from . import byte_groups, codecs
from .archive_writer import HEADER_LABEL, MANIFEST_NAME, METADATA_NAME
from .budget import ReadBudget, holds_json, json_memory_floor
from .chunk_reader import ChunkCache, ChunkedMember
from .crc import crc32, crc_hex
from .jsontext import loads_strict
from .member_checks import MemberChecks
from .member_verify import verify_members
from .metadata_table import EntryTables, check_metadata
from .pieces import Pieces
from .source import ByteSource
from .zipreader import DEFAULT_MAX_MEMBERS, ZipReader

MAX_JSON_MEMBER_BYTES = 512 << 20
DEFAULT_MAX_DECOMPRESSED = codecs.DEFAULT_MAX_DECOMPRESSED


class ArchiveReader:
    """The validated structure of one archive, and checked access to its members."""

    def __init__(
        self,
        source: ByteSource,
        *,
        verify: bool = True,
        max_members: int = DEFAULT_MAX_MEMBERS,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
        max_read_bytes: int | None = None,
    ) -> None:
        self.source = source
        # this open file's memory budget: the JSON parsed here is charged now, reads plan the rest
        self.budget = ReadBudget(max_read_bytes, source.size)
        self.verify = verify
        self.max_decompressed = max_decompressed
        self.zip = ZipReader(source, max_members=max_members)
        # (offset, length) -> (bytes, their CRC-32) in one pass, where the source reads (not maps) them
        self._view_crc: Callable[[int, int], tuple[memoryview, int]] | None = getattr(source, "view_crc", None)
        self._decoded: dict[str, memoryview] = {}
        # members' parsed format headers, shared by every load from this open archive (read-only)
        self.parsed: dict[tuple[str, str], Any] = {}
        self._chunked: dict[str, ChunkedMember] = {}
        self._chunk_cache = ChunkCache()  # (chunks of bgzstd members read in part, for all of them)
        self.verified_bytes = 0  # bytes verify_all() ran through a CRC (at most twice the members' sizes)
        self.on_read: Callable[[str, int], None] | None = None  # (member, bytes) per read, for progress bars
        # during a full read of an unmapped local file: a member's whole bytes, read and checked
        # (parallel_verify.Prefetch.member), or None when it does not hold that member
        self.whole_member: Callable[[str], memoryview | Pieces | None] | None = None
        # during a full read: compressed members being decompressed on worker threads (DecodeAhead)
        self.decoding: dict[str, Future[memoryview | Pieces]] = {}
        for required in (MANIFEST_NAME, METADATA_NAME):
            if required not in self.zip.members:
                raise FormatError(f"the archive has no {required!r}: not a zarchive file", member=required)
        self.metadata = self._read_json(METADATA_NAME, check_listed=False)
        check_metadata(self.metadata, self.zip.members)
        self.entries = EntryTables(self.metadata["members"])
        self.checks = MemberChecks(self.zip, self.entries, self.budget, verify=verify)
        self.manifest = self._read_json(MANIFEST_NAME)
        if not isinstance(self.manifest, dict) or "root" not in self.manifest:
            raise FormatError("the manifest has no 'root' node", member=MANIFEST_NAME)

    # --- structure checks ---
    def _read_json(self, name: str, *, check_listed: bool = True) -> Any:
        info = self.zip.members[name]
        if info.size > MAX_JSON_MEMBER_BYTES:
            raise UnsafeArchiveError(f"{info.size} bytes of JSON is over the limit", member=name)
        data = self.zip.read_checked(name)
        if check_listed:
            self._check_member_crc(name, data)
        self.budget.charge_json(data, member=name)
        return loads_strict(data, member=name)

    def checked_entry(self, name: str, label: str) -> dict[str, Any] | None:
        """The metadata's checksum entry `label` of member `name`, validated; None if there is none."""
        return self.entries.checked_entry(name, label)

    def entry_range(self, name: str, label: str, *, path: str | None = None) -> tuple[int, int] | None:
        """Bytes [begin, end) of member `name` that its checksum entry `label` records, for a reader
        that finds a tensor by its entry rather than by its member's header (spec section 6); None
        where the member is stored compressed or records no such entry (its header says where)."""
        if self.member_entry(name, path=path)["codec"] != "none" or label == HEADER_LABEL:
            return None
        placed = self.entries.placed(name, label)
        return None if placed is None else (placed[0], placed[0] + placed[1])

    def checked_entries(self, name: str) -> dict[str, dict[str, Any]]:
        """All checksum entries of a member, validated (and refused if two overlap)."""
        return self.entries.checked_entries(name)

    def _check_member_crc(self, name: str, data: memoryview) -> None:
        entry = self.metadata["members"][name]
        if entry["crc32"] != crc_hex(self.zip.members[name].crc):
            raise IntegrityError("checksum mismatch", member=name)

    def chunked(self, name: str) -> ChunkedMember:
        """Decoded access to a `bgzstd` member, its chunk index validated on first use."""
        member = self._chunked.get(name)
        if member is None:
            entry = self.metadata["members"][name]
            if entry["size"] > self.max_decompressed:
                raise UnsafeArchiveError(
                    f"declares {entry['size']} decompressed bytes, over the limit of {self.max_decompressed} "
                    "(raise max_decompressed to read it)",
                    member=name,
                )
            chunks = byte_groups.parse_index(entry, member=name)
            offset = self.zip.members[name].data_offset
            member = ChunkedMember(
                name,
                chunks,
                lambda at, n: self.source.view(offset + at, n),
                verify=self.verify,
                cache=self._chunk_cache,
                stored_into=_reader_into(self.source, offset),
            )
            self._chunked[name] = member
        return member

    @property
    def format_version(self) -> str:
        """The format version the metadata declares ("major.minor", checked on opening)."""
        return str(self.metadata.get("format_version", "1.0"))

    # --- member access ---
    def is_checked(self, name: str) -> bool:
        """Whether member `name`'s bytes were checked against its CRC already (or are being checked)."""
        return self.checks.is_checked(name)

    def mark_checked(self, names: list[str]) -> None:
        """Record that these whole members are checked (by a caller that checks them itself and
        fails the read if one is damaged, e.g. parallel_verify)."""
        self.checks.mark_checked(names)

    def unmark_checked(self, names: list[str]) -> None:
        """Take back mark_checked for these members (their check failed, or will not happen)."""
        self.checks.unmark_checked(names)

    def has_member(self, name: str) -> bool:
        return name in self.zip.members and name != METADATA_NAME

    def member_entry(self, name: str, *, path: str | None = None) -> dict[str, Any]:
        if name in (METADATA_NAME, MANIFEST_NAME):
            raise MemberNotFoundError(
                f"{name!r} is the archive's own description, not a data member", member=name, path=path
            )
        if not isinstance(name, str) or name not in self.zip.members:
            raise MemberNotFoundError(
                "the manifest refers to a member the archive does not have", member=str(name)[:200], path=path
            )
        return self.metadata["members"][name]

    def member_bytes(self, name: str, *, path: str | None = None, expected_size: int | None = None) -> memoryview:
        """A member's decoded bytes, verified."""
        entry = self.member_entry(name, path=path)
        if expected_size is not None and entry["size"] != expected_size:
            raise UnsafeArchiveError(
                f"the metadata declares {entry['size']} bytes, the manifest needs {expected_size}",
                member=name,
                path=path,
            )
        cached = self._decoded.get(name)
        if cached is not None:
            return cached
        if entry["codec"] == byte_groups.CODEC:  # decoded afresh for each caller: the bytes are its own
            self.fits_decoded(name, path=path)
            view = self._chunked_range(name, 0, entry["size"], path)
            if self.on_read is not None:
                self.on_read(name, view.nbytes)
            return view
        if entry["codec"] == "none":
            whole = self.whole_member(name) if self.whole_member is not None else None
            data = whole[:] if whole is not None else self.zip.view(name)
            if self.verify and not self.checks.is_checked(name):
                if crc32(data) != self.zip.members[name].crc:
                    raise IntegrityError(
                        "member bytes do not match their checksum (damaged file)", member=name, path=path
                    )
                self.checks.mark_checked([name])
            if self.on_read is not None:
                self.on_read(name, data.nbytes)
            if holds_json(name):  # its caller parses it next
                self.budget.charge_json(data, member=name)
            return data
        if entry["size"] > self.max_decompressed:
            raise UnsafeArchiveError(
                f"declares {entry['size']} decompressed bytes, over the limit of {self.max_decompressed} "
                "(raise max_decompressed to read it)",
                member=name,
                path=path,
            )
        ahead = self.decoding.pop(name, None)
        done = ahead.result() if ahead is not None else self.decode(name, path=path)
        view = done if isinstance(done, memoryview) else done[:]  # (zstd members decode to one buffer)
        if self.on_read is not None:
            self.on_read(name, view.nbytes)
        return view

    def _chunked_range(self, name: str, begin: int, end: int, path: str | None) -> memoryview:
        """Bytes [begin, end) of a `bgzstd` member: sliced from the whole member where a full read is
        decoding it ahead (DecodeAhead), else decoded from the chunks that hold them."""
        ahead = self.decoding.get(name)  # (kept, not popped: every tensor of the member slices it)
        if ahead is not None:
            return ahead.result()[begin:end]
        return self.chunked(name).read(begin, end, path=path)

    def decode_chunked(self, name: str) -> Pieces:
        """A whole `bgzstd` member decoded (its chunks on every core) into pieces, for DecodeAhead."""
        return self.chunked(name).read_pieces()

    def is_decoded(self, name: str) -> bool:
        return name in self._decoded

    def decodes_whole(self, name: str) -> bool:
        """Whether member `name` is decompressed whole (by `decode`) before any of it is read: zstd
        members are; uncompressed ones are read in ranges, and `bgzstd` ones chunk by chunk."""
        entry = self.metadata["members"].get(name)
        return isinstance(entry, dict) and entry.get("codec") not in (None, "none", byte_groups.CODEC)

    def decode(self, name: str, *, path: str | None = None) -> memoryview:
        """A compressed member's bytes, decompressed (bounded by its declared size) and verified, kept
        for later loads. Thread-safe (decode_ahead.DecodeAhead calls it on worker threads)."""
        entry = self.metadata["members"][name]
        if not self.decodes_whole(name):
            raise FormatError(f"a {entry.get('codec')!r} member is not decoded whole", member=name, path=path)
        self.fits_decoded(name, path=path)
        raw = self.zip.view(name)
        if self.verify and crc32(raw) != self.zip.members[name].crc:
            raise IntegrityError("compressed bytes do not match their checksum (damaged file)", member=name, path=path)
        out = codecs.decompress_bounded(raw, entry["size"], member=name)
        if self.verify and crc_hex(crc32(out)) != entry.get("content_crc32"):
            raise IntegrityError("decompressed bytes do not match their checksum", member=name, path=path)
        view = memoryview(out)
        if holds_json(name):  # its caller parses it next
            self.budget.charge_json(view, member=name)
        self._decoded[name] = view
        return view

    def fits_decoded(self, name: str, *, path: str | None = None) -> None:
        """Refuse, before a byte is decompressed, a member whose declared decoded size (and, for JSON,
        the least its parse is charged) does not fit the read's budget beside what the open file
        holds. The decoder is bounded by that size: a frame that declares none, or more, stops there."""
        size = self.metadata["members"][name]["size"]
        cost = size + (json_memory_floor(size) if holds_json(name) else 0)
        self.budget.fits(cost, f"decompressing it (declared {size:,} bytes)", member=name, path=path)

    def forget(self, name: str) -> None:
        """Drop a member's decoded bytes from this reader's cache (a caller that reads each member
        once, such as extract, keeps memory to one member)."""
        self._decoded.pop(name, None)

    def member_prefix(self, name: str, n: int, *, path: str | None = None) -> bytes | memoryview:
        """Up to `n` leading bytes of a member, NOT verified: only for sanity checks made before a
        compressed member is decompressed whole (which then verifies it). Decompresses only that far."""
        entry = self.member_entry(name, path=path)
        n = min(n, entry["size"])
        cached = self._decoded.get(name)
        if cached is not None:
            return cached[:n]
        if entry["codec"] == "none":
            return self.source.view(self.zip.members[name].data_offset, n)
        if entry["codec"] == byte_groups.CODEC:  # (only the chunks that hold them, checked)
            return self._chunked_range(name, 0, n, path)
        return codecs.decompress_prefix(self.zip.view(name), n, member=name)

    def member_range(
        self,
        name: str,
        begin: int,
        end: int,
        label: str,
        *,
        path: str | None = None,
        own: Callable[[memoryview], memoryview] | None = None,
        via: ByteSource | None = None,
    ) -> memoryview:
        """Bytes [begin, end) of a member, verified by the entry checksum `label` when it is stored
        uncompressed (so one tensor is checked without reading its neighbours); no check is needed
        once the whole member has been checked.

        own: turns this reader's view into the caller's own view of the same bytes (another private
        mapping of the file); the check then runs on the bytes returned, so their pages are read once.
        via: the caller's own source of the same file (its private mapping), to take the bytes of an
        uncompressed member from directly, rather than through a view of this reader's: `own` then
        gets bytes of that source."""
        entry = self.member_entry(name, path=path)
        if not (0 <= begin <= end <= entry["size"]):
            raise FormatError("range outside the member", member=name, path=path)
        if entry["codec"] == byte_groups.CODEC:  # decoded from its own chunks, each checked by its CRC
            data = self._chunked_range(name, begin, end, path)
            if self.on_read is not None:
                self.on_read(name, data.nbytes)
            return own(data) if own is not None else data
        if entry["codec"] != "none":
            data = self.member_bytes(name, path=path)[begin:end]
            return own(data) if own is not None else data
        info = self.zip.members[name]
        whole = self.whole_member(name) if self.whole_member is not None else None
        source = self.source if via is None else via
        crc: int | None = None
        read = end - begin
        held = self.checks.held(name, source) if whole is None else None
        if whole is not None:
            data = whole[begin:end]
        elif held is not None or self.checks.checks_whole(name, label):
            member = held if held is not None else self.checks.checked_member(name, source, path)
            data, read = member[begin:end], 0 if held is not None else member.nbytes
            if not source.mapped:  # the range's own copy: it holds neither the rest of the member nor the
                data = memoryview(bytearray(data))  # bytes kept for the next read (checks.held)
        elif self._view_crc is not None and self.checks.needs_check(name, label):  # (a source that reads, not maps)
            data, crc = self._view_crc(info.data_offset + begin, end - begin)  # read and checked in one pass
        else:
            data = source.view(info.data_offset + begin, end - begin)
        if own is not None:
            data = own(data)
        self.checks.check_entry(name, label, begin, data, path, crc)
        if self.on_read is not None:
            self.on_read(name, read)
        return data

    def member_range_into(self, name: str, begin: int, label: str, out: memoryview, *, path: str | None = None) -> None:
        """Fill `out` (writable bytes of the caller's) with bytes [begin, begin + len(out)) of a member,
        checked as member_range checks them: read from the file straight into `out` where the source
        copies, decoded into it from their chunks where the member is `bgzstd`. On an error, what
        `out` holds is undefined."""
        end = begin + out.nbytes
        entry = self.member_entry(name, path=path)
        if not (0 <= begin <= end <= entry["size"]):
            raise FormatError("range outside the member", member=name, path=path)
        if entry["codec"] == byte_groups.CODEC:
            ahead = self.decoding.get(name)
            if ahead is not None:
                out[:] = ahead.result()[begin:end]
            else:
                self.chunked(name).read_into(begin, out, path=path)
        elif entry["codec"] != "none":
            out[:] = self.member_bytes(name, path=path)[begin:end]
        else:
            whole = self.whole_member(name) if self.whole_member is not None else None
            at = self.zip.members[name].data_offset + begin
            fill = _reader_into(self.source, 0)
            fill_crc = getattr(self.source, "read_into_crc", None) if fill is not None else None
            crc: int | None = None
            if whole is not None:
                out[:] = whole[begin:end]
            elif self.checks.checks_whole(name, label):
                out[:] = self.checks.checked_member(name, self.source, path)[begin:end]
            elif fill_crc is not None and self.checks.needs_check(name, label):
                crc = fill_crc(out, at)  # read and checked in one pass
            elif fill is not None:
                fill(out, at)
            else:
                out[:] = self.source.view(at, out.nbytes)
            self.checks.check_entry(name, label, begin, out, path, crc)
        if self.on_read is not None:
            self.on_read(name, out.nbytes)

    def header_range(self, name: str, end: int, *, path: str | None = None) -> memoryview:
        """The first `end` bytes of a member (its format header), verified like an entry."""
        return self.member_range(name, 0, end, HEADER_LABEL, path=path)

    def verify_all(self) -> list[tuple[str, str]]:
        """Check every member against every recorded checksum; (member, problem) for each failure
        (zarchive.container.member_verify)."""
        return verify_members(self)

    def close(self) -> None:
        self.checks.release()
        self._decoded.clear()
        self._chunked.clear()
        self._chunk_cache.clear()
        self.parsed.clear()
        self.source.close()


def _reader_into(source: ByteSource, base: int) -> Callable[[memoryview, int], None] | None:
    """`fill(buf, at)`: read bytes from `base + at` into `buf`, where the source copies (reads) its
    bytes rather than mapping them; None where views are free (a mapping)."""
    read_into = getattr(source, "read_into", None)
    if read_into is None or source.mapped:
        return None
    return lambda buf, at: read_into(buf, base + at)
