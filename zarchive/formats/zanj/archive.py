"""An opened ZANJ file, with the same interface as an opened zarchive (browse.OpenedArchive).

`zarchive.open("old.zanj")` returns one of these, so code (and the command line) that browses an
archive works on ZANJ files too: `keys(path)`, `arc[path]`, `load()`, `summary(path)`, `audit()`,
`plan()`, `verify()`. Reading goes through the same two phases as a .zarc (planned_archive.PlannedArchive): a
plan (every node checked, every class the file names found and checked against `trusted=`, limits
applied), then construction, with ZANJ's node types as the handler set (zanj.registry). Opening
reads the zip directory and ZANJ's two JSON members; `.npy` and `.jsonl` members are read when a
value needs them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...container.source import ByteSource
from ...engine.plan import ReadPolicy
from ...engine.planned_archive import PlannedArchive
from ...engine.verify_result import VerifyResult
from ...errors import FormatError, MemberNotFoundError
from ...options import ErrorMode, Settings
from .container import MAIN_NAME, META_NAME, ZanjZip
from .nodes import Unknown, model_for, node_kind
from .registry import ZanjHandlers

DEFAULT_MAX_MEMBER_BYTES = 4 << 30


class ZanjArchive(PlannedArchive):
    """A ZANJ file opened for reading. Values taken from it stay valid after it is closed.

    `policy`: the read policy (trusted=, unresolved=, tensors=, limits), as for a .zarc.
    `unknown="dict"`: dataclasses and models whose class is not here, and formats this reader does
    not know, are read as plain dicts (for converting files whose classes are gone)."""

    format = "zanj"
    _reader: ZanjZip

    def __init__(
        self,
        source: ByteSource,
        *,
        error_mode: ErrorMode = ErrorMode.WARN,
        max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES,
        unknown: Unknown = "error",
        policy: ReadPolicy | None = None,
    ) -> None:
        handlers = ZanjHandlers(unknown)
        policy = policy if policy is not None else ReadPolicy()
        if unknown == "dict":
            policy = dataclasses.replace(policy, unresolved="generic")
        zip_ = ZanjZip(source, max_member_bytes=max_member_bytes, max_read_bytes=policy.max_read_bytes)
        try:
            if MAIN_NAME not in zip_.members:
                raise FormatError(f"the zip has no {MAIN_NAME!r}: not a ZANJ file", member=MAIN_NAME)
            self._main = zip_.read_json(MAIN_NAME)
            self._meta = zip_.read_json(META_NAME) if META_NAME in zip_.members else {}
            if not isinstance(self._meta, dict):
                raise FormatError("ZANJ metadata is not a JSON object", member=META_NAME)
        except BaseException:
            zip_.close()
            raise
        super().__init__(zip_, handlers, Settings(error_mode=error_mode), policy)

    # --- what is in it ---
    @property
    def manifest(self) -> Any:
        """ZANJ's object tree (`__zanj__.json`), as stored."""
        return self._main

    @property
    def meta(self) -> dict[str, Any]:
        """ZANJ's metadata (`__zanj_meta__.json`): its settings, system info, externals, timestamp."""
        return self._meta

    metadata = meta

    @property
    def members(self) -> dict[str, dict[str, Any]]:
        """Member name -> codec, sizes and CRC, like a zarchive metadata entry."""
        return {name: self._reader.entry(name) for name in self._reader.members}

    def member_size(self, name: str) -> int:
        """The stored size of a zip member."""
        info = self._reader.members.get(name)
        if info is None:
            raise MemberNotFoundError("no such member", member=str(name)[:200])
        return int(info.compress_size)

    def _root_node(self) -> Any:
        return self._main

    def model_tag(self, path: str = "") -> str | None:
        """The class tag of the ConfiguredModel at `path` ('module:QualName' of the class here that
        the file's class name matches, else that name), or None when the value there is not a model."""
        node = self.node(path)
        if node_kind(node) != "model":
            return None
        return model_for(node, self._policy.given, path)[0]

    def verify(self) -> VerifyResult:
        """Inflate every member and check it against its zip CRC: a list of (member, problem), truthy
        when there is none."""
        self._check_open()
        return VerifyResult(self._reader.verify_all(), members=len(self._reader.members))

    def __repr__(self) -> str:
        return f"<ZANJ file, {len(self._reader.members)} members, root: {self.summary()}>"
