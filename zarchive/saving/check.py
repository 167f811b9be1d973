"""Before a save writes a byte: the reader's own checks, run on what the save is about to write.

A save must never produce a file its reader refuses. Rather than a second copy of every limit the
reader applies, the manifest the save built is encoded as it will be written, parsed back with the
reader's strict JSON parser, and walked by the reader's planner (phase one of every read: nesting
depth, node count, shapes and element counts, node fields, the `.jsonl` lists of nodes), with the
save's planned members standing in for the file's. Anything the reader would refuse is a SaveError
that names the object path and the reader's reason, raised before the target is touched.

Limits that depend on the bytes written (how far compressed members expand, how much JSON they hold: see `check_read_budget`) are
checked by the writer once those bytes exist, still before the file is moved into place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..container.archive_reader import MAX_JSON_MEMBER_BYTES
from ..container.archive_writer import MANIFEST_NAME, MemberPlan
from ..container.budget import default_read_budget
from ..container.jsontext import dumps_pretty, loads_strict
from ..container.zipreader import DEFAULT_MAX_MEMBERS
from ..engine.plan import Planner, ReadPolicy
from ..engine.protocol import FORMAT_VERSION
from ..errors import SaveError, ZArchiveError
from ..nodes.base import SchemaSource
from ..nodes.exports import EXPORTS_KEY, ExportsSchema

__all__ = ["CheckedManifest", "check_read_budget", "check_readable"]


@dataclass
class CheckedManifest:
    """The manifest's bytes as they will be written, and what reading it allocates besides members."""

    data: bytes
    inline_bytes: int


@dataclass
class _NoFile:
    """The planner's view of the file's bytes: none yet (every member counts as mapped)."""

    size: int = 0
    mapped: bool = True


class _Planned:
    """The members a save will write, as the planner asks a file for them."""

    def __init__(self, members: list[MemberPlan]) -> None:
        self.members = {m.name: m for m in members}
        self.source = _NoFile()
        self.budget = None  # the planner runs in audit mode: it checks no budget

    @property
    def format_version(self) -> str:
        return FORMAT_VERSION


class _SavePlanner(Planner):
    """The reader's planner over a save's planned members: sizes the writer fixes by construction
    (a list's `nbytes` is its member's length) are not recomputed, so nothing is produced twice."""

    def __init__(self, registry: SchemaSource, planned: _Planned) -> None:
        super().__init__(registry, planned, ReadPolicy(), audit=True)  # type: ignore[arg-type]  # reads no bytes
        self.planned = planned

    def member(self, name: Any, *, expected_size: int | None = None) -> dict[str, Any]:
        if not isinstance(name, str):
            raise self.error(f"'$ref' must be a member name, not {type(name).__name__}")
        m = self.planned.members.get(name)
        if m is None:
            raise self.error("a node names a member the save does not write", member=name)
        return {"codec": m.codec, "size": expected_size or 0}

    def member_bytes(self, name: str, expected_size: int | None = None) -> memoryview:
        self.member(name, expected_size=expected_size)
        m = self.planned.members[name]
        return memoryview(b"".join(bytes(buf) for _, buf in m.parts()))


def check_readable(manifest: dict[str, Any], members: list[MemberPlan], registry: SchemaSource) -> CheckedManifest:
    """The manifest's bytes, after checking that the reader accepts them (module docstring)."""
    if len(members) + 2 > DEFAULT_MAX_MEMBERS:
        raise SaveError(
            f"the archive would have {len(members) + 2:,} members, over the {DEFAULT_MAX_MEMBERS:,} a reader "
            "accepts: store many small arrays or byte strings as fewer, bigger ones"
        )
    data = dumps_pretty(manifest)
    if len(data) > MAX_JSON_MEMBER_BYTES:
        raise SaveError(
            f"the manifest would be {len(data):,} bytes of JSON, over the {MAX_JSON_MEMBER_BYTES:,} a reader "
            "accepts: store long lists and texts as arrays or bytes (members), or lower external_list_threshold"
        )
    try:
        parsed = loads_strict(data, member=MANIFEST_NAME)
    except ZArchiveError as e:
        raise SaveError(f"a reader would refuse the manifest: {e.message}") from None
    planner = _SavePlanner(registry, _Planned(members))
    try:
        planner.run(parsed["root"], [])
        if EXPORTS_KEY in parsed:
            planner.run_section(EXPORTS_KEY, ExportsSchema(), parsed[EXPORTS_KEY])
    except ZArchiveError as e:
        raise SaveError(f"a reader would refuse this: {e.message}", path=e.path, member=e.member) from None
    return CheckedManifest(data, planner.plan.inline_bytes)


def check_read_budget(read_cost: int, file_size: int) -> None:
    """Refuse a file whose full default read allocates more than a default read may: `read_cost`
    (see archive_writer.write_archive) against container.budget.default_read_budget(file_size)."""
    limit = default_read_budget(file_size)
    if read_cost > limit:
        raise SaveError(
            f"reading this file back would allocate up to {read_cost:,} bytes (compressed members that "
            f"expand that far, JSON, inline data), over the {limit:,} a default read allows for a file of "
            f"{file_size:,} bytes: save it with compress=False, or with fewer, bigger values (arrays "
            "instead of long lists of small ones)"
        )
