"""Hostile-corpus cases about the zip layer: duplicate and overlapping entries, headers that lie,
unsupported zip features, and member names that would escape an extraction directory."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any

from hostile.craft import CDRecord, Parts, ZEntry, build_zip, pack

CaseTuple = tuple[str, Callable[[], bytes], str | None, str]


def zip_cases(base: Callable[[], Parts], valid_entries: Callable[[], list[ZEntry]]) -> list[CaseTuple]:
    cases: list[CaseTuple] = []

    def case(name: str, error: str, match: str) -> Callable[[Callable[[], bytes]], Callable[[], bytes]]:
        def register(fn: Callable[[], bytes]) -> Callable[[], bytes]:
            cases.append((name, fn, error, match))
            return fn

        return register

    # --- zip structure ------------------------------------------------------------------------------------
    case("duplicate_exact", "UnsafeArchiveError", "duplicate member name")(
        lambda: build_zip([*valid_entries(), ZEntry("arr.npy", b"second copy")])
    )
    case("duplicate_nfc", "UnsafeArchiveError", "duplicate member name")(
        lambda: build_zip([*valid_entries(), ZEntry("caf\u00e9.bin", b"1"), ZEntry("cafe\u0301.bin", b"2")])
    )
    case("duplicate_casefold", "UnsafeArchiveError", "duplicate member name")(
        lambda: build_zip([*valid_entries(), ZEntry("Arr.npy", b"shadow")])
    )

    @case("overlap_nested", "UnsafeArchiveError", "overlaps")
    def _overlap_nested() -> bytes:
        # 'outer.bin' holds a whole local header + data; a second directory record points inside it
        inner = build_zip([ZEntry("inner.bin", b"payload", align=1)])
        inner_local = inner[: inner.index(b"payload") + 7]
        entries = [*valid_entries(), ZEntry("outer.bin", inner_local, align=1)]
        where = build_zip(entries).index(inner_local)
        return build_zip(entries, extra_cd=[CDRecord(b"inner.bin", where, 7, zlib.crc32(b"payload"))])

    @case("overlap_shared_header", "UnsafeArchiveError", "local header names a different member")
    def _overlap_shared() -> bytes:
        def tamper(records: list[CDRecord]) -> list[CDRecord]:
            r = records[-1]
            return [*records, CDRecord(b"alias.npy", r.offset, r.size, r.crc)]

        return build_zip(valid_entries(), tamper_cd=tamper)

    def _lie(index_name: str, **fields: Any) -> Callable[[], bytes]:
        def build() -> bytes:
            entries = valid_entries()
            for e in entries:
                if e.name == index_name:
                    for k, v in fields.items():
                        setattr(e, k, v)
            return build_zip(entries)

        return build

    case("local_header_size_lies", "UnsafeArchiveError", "local header sizes or CRC disagree")(
        _lie("arr.npy", local_size=100)
    )
    case("local_header_crc_lies", "UnsafeArchiveError", "local header sizes or CRC disagree")(
        _lie("arr.npy", local_crc=0x12345678)
    )
    case("local_header_other_name", "UnsafeArchiveError", "local header names a different member")(
        _lie("arr.npy", local_name=b"arx.npy")
    )
    case("sizes_overrun_next_member", "UnsafeArchiveError", "overlaps|runs into")(_lie("arr.npy", size=100_000))
    case("compressed_uncompressed_differ", "UnsafeArchiveError", "sizes differ")(_lie("arr.npy", cd_usize=7))
    case("method_deflate", "UnsafeArchiveError", "compression method 8")(_lie("arr.npy", method=8))
    case("flag_encrypted", "UnsafeArchiveError", "encryption")(_lie("arr.npy", flags=0x1))
    case("flag_data_descriptor", "UnsafeArchiveError", "data descriptors")(_lie("arr.npy", flags=0x8))
    case("name_not_utf8", "UnsafeArchiveError", "not UTF-8")(
        lambda: build_zip([*valid_entries(), ZEntry(b"\xff\xfe.bin", b"x")])
    )

    @case("zip_crc_lies_everywhere", "IntegrityError", "do not match")
    def _crc_lies() -> bytes:
        p = base()
        bad = 0x0BADC0DE

        def meta(m: dict[str, Any]) -> None:
            m["members"]["blob.bin"]["crc32"] = f"{bad:08x}"

        data = pack(p, meta_edit=meta)
        good = zlib.crc32(p.members["blob.bin"]).to_bytes(4, "little")
        return data.replace(good, bad.to_bytes(4, "little"))  # in the local header and the directory

    @case("zip64_marker_without_locator", "NotAZipError", "zip64")
    def _zip64_no_locator() -> bytes:
        data = bytearray(pack(base()))
        at = data.rfind(b"PK\x05\x06")
        data[at + 8 : at + 12] = b"\xff\xff\xff\xff"
        return bytes(data)

    @case("member_count_over_limit", "UnsafeArchiveError", "more than the limit")
    def _too_many() -> bytes:
        data = pack(base())
        at = data.rfind(b"PK\x05\x06")
        _, _, _, _, _, cd_size, cd_offset, _ = struct.unpack_from("<IHHHHIIH", data, at)
        z64 = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, 5_000_000, 5_000_000, cd_size, cd_offset)
        loc = struct.pack("<IIQI", 0x07064B50, 0, at, 1)
        end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
        return data[:at] + z64 + loc + end

    @case("directory_count_lies", "NotAZipError", "too small|truncated")
    def _count_lies() -> bytes:
        return build_zip(valid_entries(), count=60)

    @case("directory_trailing_bytes", "NotAZipError", "trailing bytes")
    def _cd_trailing() -> bytes:
        return build_zip(valid_entries(), count=4)

    @case("multi_disk", "NotAZipError", "multi-disk")
    def _multi_disk() -> bytes:
        data = bytearray(pack(base()))
        at = data.rfind(b"PK\x05\x06")
        data[at + 4 : at + 6] = b"\x01\x00"
        return bytes(data)

    # --- member names that would escape an extraction directory ------------------------------------------
    _BAD_NAMES = {
        "name_parent": ("../evil.npy", "'\\.\\.' path component"),
        "name_parent_inner": ("a/../../evil.npy", "'\\.\\.' path component"),
        "name_absolute": ("/tmp/evil.npy", "absolute path"),
        "name_backslash": ("..\\..\\evil.npy", "backslash"),
        "name_nul": ("evil.npy\x00.txt", "control character"),
        "name_drive_letter": ("C:/Windows/evil.npy", "drive letter"),
        "name_drive_relative": ("C:evil.npy", "drive letter"),
        "name_colon_component": ("a/C:/evil.npy", "colon"),
        "name_ntfs_stream": ("arr.npy:hidden", "colon"),
        "name_dot_component": ("./arr2.npy", "'\\.' path component"),
        "name_empty_component": ("a//b.npy", "'empty' path component"),
        "name_trailing_slash": ("dir/", "'empty' path component"),
    }
    for _case, (_name, _match) in _BAD_NAMES.items():

        def _bad_name(n: str = _name) -> bytes:
            p = base()
            p.members[n] = b"payload"
            return pack(p)

        case(_case, "UnsafeArchiveError", _match)(_bad_name)

    return cases
