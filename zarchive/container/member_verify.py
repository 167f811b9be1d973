"""verify(): every member of an opened archive checked against every checksum its metadata records,
each failure reported as (member, problem) rather than raised, with the damaged entries (tensors,
header) named where the member's CRC fails. Uncompressed members are checked a chunk at a time, so a
huge member is never read whole."""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import FormatError
from . import byte_groups, codecs
from .chunk_reader import ChunkedMember
from .crc import crc32, crc_hex
from .member_plan import HEADER_LABEL
from .pieces import Pieces
from .safetensors_layout import header_length, parse_header
from .source import ByteSource, SourceChangedError
from .zipreader import ZipReader


class VerifiedArchive(Protocol):
    """What the checks need of an opened archive (zarchive.container.archive_reader.ArchiveReader)."""

    zip: ZipReader
    source: ByteSource
    metadata: dict[str, Any]
    max_decompressed: int
    verified_bytes: int  # bytes run through a CRC, counted here

    def chunked(self, name: str) -> ChunkedMember: ...
    def checked_entries(self, name: str) -> dict[str, dict[str, Any]]: ...


def verify_members(reader: VerifiedArchive) -> list[tuple[str, str]]:
    """Check every member against every recorded checksum; (member, problem) for each failure."""
    problems: list[tuple[str, str]] = []
    for name, entry in reader.metadata["members"].items():
        try:
            reader.verified_bytes += reader.zip.members[name].size
            if entry["codec"] == byte_groups.CODEC:  # every chunk: its CRC, then its decoding
                problems += [(name, p) for p in reader.chunked(name).problems()]
                continue
            if entry["codec"] == "none" and stored_crc(reader, name) == reader.zip.members[name].crc:
                raw = None  # checked in chunks: a huge member is never read whole
            else:
                raw = reader.zip.view(name)
            if raw is not None and crc32(raw) != reader.zip.members[name].crc:
                damaged = damaged_entries(reader, name, raw)
                if damaged:  # name the tensors (or header) that are damaged, not only the member
                    problems += [(name, f"entry {label!r} does not match its checksum") for label in damaged]
                else:
                    problems.append((name, "stored bytes do not match the CRC"))
                continue
            if raw is not None and entry["codec"] == "zstd":
                if entry["size"] > reader.max_decompressed:
                    problems.append((name, f"declares {entry['size']} decompressed bytes, over the limit"))
                    continue
                content_crc = codecs.decompressed_crc(raw, entry["size"], member=name)
                if crc_hex(content_crc) != entry.get("content_crc32"):
                    problems.append((name, "decompressed bytes do not match content_crc32"))
                continue
            entries = reader.checked_entries(name)
            for label, e in entries.items():
                reader.verified_bytes += e["size"]
                if stored_crc(reader, name, e["offset"], e["size"]) != int(e["crc32"], 16):
                    problems.append((name, f"entry {label!r} does not match its checksum"))
            if entries and entry["codec"] == "none" and name.endswith(".safetensors"):
                problems += [(name, p) for p in header_disagreements(reader, name, entries)]
        except SourceChangedError:
            raise  # the file itself changed under the check: no member's fault
        except FormatError as e:
            problems.append((name, e.message))
    return problems


def header_disagreements(reader: VerifiedArchive, name: str, entries: dict[str, dict[str, Any]]) -> list[str]:
    """Where an uncompressed `.safetensors` member's header and its checksum entries disagree: a fetch
    of one tensor finds it by its entry, a full read (and any safetensors reader) by the header, so
    both must say the same of every tensor."""
    size = reader.zip.members[name].size
    hlen = header_length(stored_bytes(reader, name, 0, min(8, size)), size, member=name)
    # (parsed as a full read parses it: within the 100,000,000-byte limit of every header, no budget)
    slots = parse_header(memoryview(stored_bytes(reader, name, 0, hlen)), size, member=name)
    found = []
    recorded = entries.get(HEADER_LABEL)
    if recorded is not None and (recorded["offset"], recorded["size"]) != (0, hlen):
        found.append(f"entry {HEADER_LABEL!r} is not the header (bytes 0..{hlen})")
    for key in slots:
        slot, e = slots[key], entries.get(key)
        if e is None:
            found.append(f"tensor {key!r} of the header has no checksum entry")
        elif (e["offset"], e["offset"] + e["size"]) != (slot.begin, slot.end):
            found.append(f"entry {key!r} disagrees with the header on where the tensor lies")
    found += [
        f"entry {label!r} names no tensor of the header"
        for label in entries
        if label != HEADER_LABEL and label not in slots
    ]
    return found


def stored_bytes(reader: VerifiedArchive, name: str, begin: int, length: int) -> bytes:
    """Bytes [begin, begin + length) of a stored member (a header's: small)."""
    info = reader.zip.members[name]
    return bytes(reader.source.view(info.data_offset + begin, length))


def damaged_entries(reader: VerifiedArchive, name: str, raw: memoryview | Pieces) -> list[str]:
    """Labels of the member's checksum entries whose bytes in `raw` (the whole member) do not match."""
    damaged = []
    for label, e in reader.checked_entries(name).items():
        reader.verified_bytes += e["size"]
        if crc_hex(crc32(raw[e["offset"] : e["offset"] + e["size"]])) != e["crc32"]:
            damaged.append(label)
    return damaged


def stored_crc(
    reader: VerifiedArchive, name: str, begin: int = 0, length: int | None = None, chunk: int = 16 << 20
) -> int:
    """CRC-32 of bytes [begin, begin+length) of a stored member, read a chunk at a time."""
    info = reader.zip.members[name]
    length = info.size - begin if length is None else length
    if not (0 <= begin and begin + length <= info.size):
        raise FormatError("range outside the member", member=name)
    crc = 0
    for at in range(begin, begin + length, chunk):
        crc = crc32(reader.source.view(info.data_offset + at, min(chunk, begin + length - at)), crc)
    return crc


__all__ = ["VerifiedArchive", "damaged_entries", "header_disagreements", "stored_crc", "verify_members"]
