"""The byte layer of a foreign file (torch.save zip, .safetensors, .npy, .npz): its values' bytes as
members of a `plan.MemberReader`, so a read plans and builds them like a .zarc's.

A member here is one region of values: a torch storage (`<archive>/data/<key>`), one tensor of a
.safetensors file (its key), the data of an .npy file ("array"), or of one array of an .npz (its
zip member name). Stored regions are read as byte ranges of the file, only the range a value needs
(mapped copy-on-write per load with ZArchive(mmap=True), else read into memory of its own); a
compressed .npz member is inflated (bounded by the reader's size cap, checked against its CRC).
Regions a zip lists with a CRC are checked against it when read whole (verify=True) and by verify(),
which streams them (one piece at a time, compressed members within the read's budget).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...container.budget import ReadBudget
from ...container.crc import crc32
from ...container.source import ByteSource
from ...errors import IntegrityError, MemberNotFoundError, UnsafeArchiveError
from ..zanj.container import ZanjZip
from ..zanj.zip_stream import PIECE

_BAD_CRC = "the member's bytes do not match the zip's CRC (damaged file)"


@dataclass(frozen=True)
class Region:
    """Where one member's bytes are: `offset` in the file (stored), or inside zip member `zip_name`
    after `skip` bytes (compressed); `crc` is the zip's CRC of the whole zip member, when known and
    the region is all of it."""

    size: int
    offset: int | None = None
    zip_name: str | None = None
    skip: int = 0
    codec: str = "none"
    crc: int | None = None
    stored_size: int | None = None


class ForeignReader:
    """The members of one foreign file (a plan.MemberReader)."""

    format_version = "1.0"  # no zarchive node types of a newer version

    def __init__(
        self,
        source: ByteSource,
        regions: dict[str, Region],
        *,
        zip_: ZanjZip | None = None,
        verify: bool = True,
        max_member_bytes: int,
        budget: ReadBudget,
    ) -> None:
        self._source = source
        self.budget = budget  # the open file's read budget (headers and pickle parsed charged)
        self.regions = regions
        self.zip = zip_
        self.verify = verify
        self.max_member_bytes = max_member_bytes
        self.on_read: Callable[[str, int], None] | None = None

    @property
    def source(self) -> ByteSource:
        return self._source

    def member_entry(self, name: str, *, path: str | None = None) -> dict[str, Any]:
        region = self.regions.get(name) if isinstance(name, str) else None
        if region is None:
            raise MemberNotFoundError("the file has no such member", member=str(name)[:200], path=path)
        if region.codec != "none" and region.size > self.max_member_bytes:
            raise UnsafeArchiveError(
                f"declares {region.size:,} uncompressed bytes, over the limit of {self.max_member_bytes:,}",
                member=name,
                path=path,
            )
        stored = region.stored_size if region.stored_size is not None else region.size
        return {"codec": region.codec, "size": region.size, "stored_size": stored}

    def member_bytes(self, name: str, *, path: str | None = None, expected_size: int | None = None) -> memoryview:
        entry = self.member_entry(name, path=path)
        if expected_size is not None and entry["size"] != expected_size:
            raise UnsafeArchiveError(
                f"the member holds {entry['size']} bytes, the node needs {expected_size}", member=name, path=path
            )
        return self.read_range(name, 0, entry["size"], path=path)

    def read_range(
        self, name: str, begin: int, end: int, *, path: str | None = None, mapping: ByteSource | None = None
    ) -> memoryview:
        """Bytes [begin, end) of a member, writable and the caller's own (`mapping`: a private
        copy-on-write mapping of the file to view them from instead of copying)."""
        self.member_entry(name, path=path)
        region = self.regions[name]
        if not 0 <= begin <= end <= region.size:
            raise UnsafeArchiveError(
                f"bytes {begin}..{end} lie outside the member's {region.size}", member=name, path=path
            )
        if region.offset is not None:
            data = (mapping if mapping is not None else self._source).view(region.offset + begin, end - begin)
            if not mapping and self._source.mapped:
                data = memoryview(bytearray(data))  # the shared mapping's views: not the caller's own
            if self.verify and region.crc is not None and begin == 0 and end == region.size:
                self._check_crc(name, data, region.crc, path)
        else:
            assert self.zip is not None and region.zip_name is not None
            whole = self.zip.read(region.zip_name, path=path)  # inflated, never past its size, CRC checked
            data = memoryview(whole)[region.skip + begin : region.skip + end]
        if self.on_read is not None:
            self.on_read(name, end - begin)
        return data

    def _check_crc(self, name: str, data: memoryview, crc: int, path: str | None) -> None:
        if crc32(data) != crc:
            raise IntegrityError(_BAD_CRC, member=name, path=path)

    def verify_all(self) -> list[tuple[str, str]]:
        """(member, problem) for every region whose bytes do not match the CRC the zip records,
        checked piece by piece (one piece of PIECE bytes held at a time; compressed members decoded
        within the open file's budget, see ZanjZip.verify_members)."""
        problems: list[tuple[str, str]] = []
        zip_members = self.zip.members if self.zip is not None else {}
        in_zip = {r.zip_name or name: name for name, r in self.regions.items() if (r.zip_name or name) in zip_members}
        if self.zip is not None and in_zip:  # the whole zip member: an .npz's .npy header too
            found = self.zip.verify_members(in_zip, budget=self.budget)
            problems += [(in_zip[zip_name], problem) for zip_name, problem in found]
        checked = set(in_zip.values())
        for name, region in self.regions.items():
            if region.crc is None or region.offset is None or name in checked:
                continue
            value = 0
            for start in range(0, region.size, PIECE):
                value = crc32(self._source.view(region.offset + start, min(PIECE, region.size - start)), value)
            if value != region.crc:
                problems.append((name, _BAD_CRC))
        return problems

    def close(self) -> None:
        if self.zip is not None:
            self.zip.close()  # (closes the source too)
        else:
            self._source.close()
