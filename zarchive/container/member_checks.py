"""What one open archive has checked of its members, and the checks a read of part of a member runs.

A read of part of an uncompressed member is checked by the member's checksum entry for that part
(spec section 6), once per entry, and not at all once the whole member was checked. A member that
records no entries (format 1.6 writers leave them out of members of at most 1 MiB) is checked whole,
once, and the part is taken from the bytes checked. Whole members are marked checked by whoever
checked them (a member read whole, or parallel_verify during a full read).
"""

from __future__ import annotations

from ..errors import IntegrityError
from .budget import ReadBudget
from .crc import crc32, crc_hex
from .metadata_table import EntryTables
from .source import ByteSource
from .zipreader import ZipReader


class MemberChecks:
    """The checks of one open archive's members (the whole member is label "")."""

    def __init__(self, zip: ZipReader, entries: EntryTables, budget: ReadBudget, *, verify: bool) -> None:
        self._zip = zip
        self._entries = entries
        self._budget = budget
        self.verify = verify
        self._done: set[tuple[str, str]] = set()  # (member, entry label); label "": the whole member
        # the member checked whole last, with the source it was read from: the parts that the same
        # fetch reads next (a tensor after its member's header) come from the bytes checked, with no
        # second read (one request, not two, from a remote store)
        self._held: tuple[str, ByteSource, memoryview] | None = None

    def is_checked(self, name: str) -> bool:
        """Whether member `name`'s bytes were checked against its CRC already (or are being checked)."""
        return (name, "") in self._done

    def mark_checked(self, names: list[str]) -> None:
        self._done.update((name, "") for name in names)

    def unmark_checked(self, names: list[str]) -> None:
        for name in names:
            self._done.discard((name, ""))

    def needs_check(self, name: str, label: str) -> bool:
        """Whether entry `label` of member `name` is still to be checked when it is read."""
        return self.verify and (name, label) not in self._done and (name, "") not in self._done

    def checks_whole(self, name: str, label: str) -> bool:
        """Whether a read of entry `label` of uncompressed member `name` must check the whole member
        first: the member records no checksum entries and has not been checked yet."""
        return self.needs_check(name, label) and not self._entries.records(name)

    def held(self, name: str, source: ByteSource) -> memoryview | None:
        """Member `name` as checked whole last, if it was read from `source` (a load's own mapping
        serves that load only)."""
        held = self._held
        return held[2] if held is not None and held[0] == name and held[1] is source else None

    def release(self) -> None:
        self._held = None

    def checked_member(self, name: str, source: ByteSource, path: str | None) -> memoryview:
        """All of uncompressed member `name`, read from `source` (within the read budget) and checked
        against its CRC, then marked checked: the bytes a read of part of it takes that part from."""
        info = self._zip.members[name]
        self._budget.fits(
            info.size, "reading the member whole to check it (it records no entries)", member=name, path=path
        )
        member = source.view(info.data_offset, info.size)
        if crc32(member) != info.crc:
            raise IntegrityError("member bytes do not match their checksum (damaged file)", member=name, path=path)
        self._done.add((name, ""))
        self._held = (name, source, member)
        return member

    def check_entry(
        self, name: str, label: str, begin: int, data: memoryview, path: str | None, crc: int | None = None
    ) -> None:
        """Check `data`, the bytes of entry `label` of an uncompressed member, against its CRC (once
        per entry, and not at all once the whole member was checked); `crc`: theirs where the read
        that brought them took it already."""
        if not self.needs_check(name, label):
            return
        e = self._entries.checked_entry(name, label)
        if e is None or e["offset"] != begin or e["size"] != data.nbytes:
            raise IntegrityError(f"no checksum recorded for entry {label!r}", member=name, path=path)
        if crc_hex(crc32(data) if crc is None else crc) != e["crc32"]:
            raise IntegrityError(f"entry {label!r} does not match its checksum (damaged file)", member=name, path=path)
        self._done.add((name, label))
