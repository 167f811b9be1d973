"""The metadata's table of members (spec section 5): checked whole when an archive is opened (every
zip member listed, with a known codec, sizes and a CRC that agree with the zip), and each member's
checksum entries (one per tensor or part) validated when first used: opening an archive of
thousands of tensors must not validate thousands of entries it may never read."""

from __future__ import annotations

import itertools
import operator
import re
from typing import Any

from ..engine.protocol import FORMAT_MAJOR, FORMAT_MINOR, FORMAT_NAME
from ..errors import FormatError, IntegrityError, UnsafeArchiveError, VersionError
from . import byte_groups, codecs
from .archive_writer import METADATA_NAME
from .crc import crc_hex
from .zipreader import MemberInfo

_HEX8 = re.compile(r"^[0-9a-f]{8}$")
_ABSENT = object()
VERSION = re.compile(r"^(\d{1,6})\.(\d{1,6})$")
CODECS = ("none", "zstd", byte_groups.CODEC)


def check_metadata(meta: Any, zip_members: dict[str, MemberInfo]) -> None:
    """Refuse metadata that does not describe this zip: the format, its version, and one valid
    entry for each member (and none for a member the zip lacks)."""
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise FormatError("the metadata does not describe a zarchive file", member=METADATA_NAME)
    version = meta.get("format_version")
    match = VERSION.match(version) if isinstance(version, str) else None
    if not match:
        raise FormatError(f"bad format_version {version!r}", member=METADATA_NAME)
    if int(match.group(1)) > FORMAT_MAJOR:
        raise VersionError(
            f"written with format version {version}; this zarchive reads major version "
            f"{FORMAT_MAJOR} and older: upgrade zarchive to read it",
            member=METADATA_NAME,
        )
    members = meta.get("members")
    if not isinstance(members, dict):
        raise FormatError("the metadata has no 'members' table", member=METADATA_NAME)
    for name, info in zip_members.items():
        if name == METADATA_NAME:
            continue
        entry = members.get(name)
        if entry is None:
            raise UnsafeArchiveError("member is not listed in the metadata", member=name)
        _check_member_entry(str(version), name, entry, info.size, info.crc)
    for name in members:
        if name == METADATA_NAME:  # it cannot hold its own checksum; verify() would trip on it
            raise FormatError("the metadata lists itself as a member", member=name)
        if name not in zip_members:
            raise FormatError("the metadata lists a member the zip does not have", member=name)


def _check_member_entry(version: str, name: str, entry: Any, stored: int, crc: int) -> None:
    if not isinstance(entry, dict):
        raise FormatError("bad metadata entry", member=name)
    codec = entry.get("codec")
    if codec not in CODECS:
        match = VERSION.match(version)
        if match and int(match.group(1)) == FORMAT_MAJOR and int(match.group(2)) > FORMAT_MINOR:
            raise VersionError(
                f"codec {str(codec)[:40]!r} is newer than this reader (the file is format "
                f"{version}): upgrade zarchive to read it",
                member=name,
            )
        raise FormatError(f"unknown codec {str(codec)[:40]!r}", member=name)
    if codec == "zstd" and not name.endswith(codecs.ZSTD_SUFFIX):
        raise FormatError("a zstd member's name must end in .zst", member=name)
    if codec == byte_groups.CODEC and not name.endswith(byte_groups.SUFFIX):
        raise FormatError(f"a {byte_groups.CODEC} member's name must end in {byte_groups.SUFFIX}", member=name)
    for key in ("size", "stored_size"):
        if type(entry.get(key)) is not int or entry[key] < 0:
            raise FormatError(f"bad {key!r} in the metadata", member=name)
    if entry["stored_size"] != stored:
        raise IntegrityError(
            f"the metadata says {entry['stored_size']} stored bytes, the zip holds {stored}", member=name
        )
    if codec == "none" and entry["size"] != stored:
        raise IntegrityError("size and stored_size differ for an uncompressed member", member=name)
    if not isinstance(entry.get("crc32"), str) or not _HEX8.match(entry["crc32"]):
        raise FormatError("bad crc32 in the metadata", member=name)
    if entry["crc32"] != crc_hex(crc):
        raise IntegrityError("the metadata and the zip header disagree on the CRC", member=name)
    entries = entry.get("entries", {})
    if not isinstance(entries, (dict, list)):  # format 1.0 wrote an object, 1.1 writes rows
        raise FormatError("bad 'entries' in the metadata", member=name)
    # Each entry is checked when it is first used (see EntryTables.checked_entry).


def _column(rows: list[Any], i: int) -> list[Any]:
    """Item `i` of every row, at C speed (TypeError/IndexError/KeyError from a row without one)."""
    return list(map(operator.itemgetter(i), rows))


class EntryTables:
    """The checksum entries of every member of one archive, indexed and validated on first use."""

    def __init__(self, members: dict[str, Any]) -> None:
        self._members = members
        self._tables: dict[str, dict[str, Any]] = {}
        self._disjoint: set[str] = set()  # members whose entries were checked not to overlap (placed())

    def _table(self, name: str) -> dict[str, Any]:
        """Label -> raw checksum entry of a member: an {"offset", "size", "crc32"} object (format 1.0)
        or an [label, offset, size, crc32] row (1.1); indexed once, on first use."""
        table = self._tables.get(name)
        if table is None:
            entries = self._members[name].get("entries", {})
            if isinstance(entries, dict):
                table = entries
            else:
                try:
                    labels = _column(entries, 0)
                except (TypeError, IndexError, KeyError):
                    raise FormatError("bad checksum entry row", member=name) from None
                if set(map(type, labels)) - {str}:
                    raise FormatError("bad checksum entry row", member=name)
                table = dict(zip(labels, entries))
                if len(table) != len(entries):
                    raise FormatError("a checksum entry label is listed twice", member=name)
            self._tables[name] = table
        return table

    def records(self, name: str) -> bool:
        """Whether member `name` records checksum entries (format 1.6 writers leave them out of small
        members, which are checked whole)."""
        return bool(self._members[name].get("entries"))

    def ranges(self, name: str) -> list[tuple[int, int]]:
        """(offset, size) of a member's entries, for planning only: not validated (rows that are not
        well formed are left out; overlaps and ranges past the member's end are kept, and the caller
        must tolerate them). Cheap: a read of 5,000 small tensors in 20 members spent 4 ms
        validating every entry before this, for nothing, when the members' own checksums pass."""
        entries = self._members[name].get("entries")
        rows = entries.values() if isinstance(entries, dict) else entries if isinstance(entries, list) else ()
        out: list[tuple[int, int]] = []
        for e in rows:
            if type(e) is list and len(e) == 4:
                offset, size = e[1], e[2]
            elif type(e) is dict:
                offset, size = e.get("offset"), e.get("size")
            else:
                continue
            if type(offset) is int and type(size) is int:
                out.append((offset, size))
        return out

    def checked_entry(self, name: str, label: str) -> dict[str, Any] | None:
        """The checksum entry `label` of member `name`, validated; None if there is none."""
        entry = self._members[name]
        e = self._table(name).get(label, _ABSENT)
        if e is _ABSENT:
            return None
        if isinstance(e, list):  # may be anything, null included: checked here
            e = {"offset": e[1], "size": e[2], "crc32": e[3]} if len(e) == 4 else None
        if (
            not isinstance(e, dict)
            or type(e.get("offset")) is not int
            or type(e.get("size")) is not int
            or e["offset"] < 0
            or e["size"] < 0
            or e["offset"] + e["size"] > entry["size"]
            or not isinstance(e.get("crc32"), str)
            or not _HEX8.match(e["crc32"])
        ):
            raise FormatError(f"bad checksum entry {label!r}", member=name)
        return e

    def placed(self, name: str, label: str) -> tuple[int, int] | None:
        """(offset, size) of entry `label` of member `name`, to find its bytes by (a tensor's, without
        its member's header); None where the member records no such entry. The member's entries are
        checked first, once, to lie inside it without overlapping each other, as a header's tiling
        would be: no two values read from one member share bytes, and reading them all costs at
        most the member's size."""
        if name not in self._disjoint:
            self._check_disjoint(name)
            self._disjoint.add(name)
        e = self.checked_entry(name, label)
        return None if e is None else (e["offset"], e["size"])

    def _check_disjoint(self, name: str) -> None:
        """Refuse overlapping entries: in one pass at C speed where the rows are in data order (as
        writers record them, format 1.1), else by checked_entries (which sorts them)."""
        rows = self._members[name].get("entries")
        self._table(name)  # (rows that can be indexed, labels unique)
        if isinstance(rows, list) and rows and set(map(type, rows)) == {list} and set(map(len, rows)) == {4}:
            offsets, sizes = _column(rows, 1), _column(rows, 2)
            ends = list(map(operator.add, offsets, sizes)) if set(map(type, offsets + sizes)) == {int} else None
            if (
                ends is not None
                and min(offsets) >= 0
                and min(sizes) >= 0
                and ends[-1] <= self._members[name]["size"]
                and all(map(operator.le, itertools.islice(ends, len(ends) - 1), itertools.islice(offsets, 1, None)))
            ):
                return
        self.checked_entries(name)  # (raises on what is wrong; passes disjoint rows listed out of order)

    def checked_entries(self, name: str) -> dict[str, dict[str, Any]]:
        """All checksum entries of a member, validated, and refused if two of them overlap: a writer
        records disjoint ranges (the parts it wrote one after another), and overlapping ones would
        make checking every entry cost more than the member's size (thousands of entries each
        covering the whole member: quadratic). So verifying entries reads each byte at most once."""
        out: dict[str, dict[str, Any]] = {}
        for label in self._table(name):
            out[label] = self.checked_entry(name, label)  # type: ignore[assignment]  # listed: never None
        end = 0
        for e in sorted(out.values(), key=lambda e: (e["offset"], e["size"])):
            if e["offset"] < end:
                raise FormatError("checksum entries overlap", member=name)
            end = e["offset"] + e["size"]
        return out
