"""A zarchive opened for reading: browse the object tree and load single values without loading the
rest (the browsing and two-phase loading it shares with other formats: zarchive.engine.planned_archive),
plus what is particular to a zarchive: its manifest and members, exports, a full read that checksums
or prefetches members on other cores, and verify()."""

from __future__ import annotations

import copy
from typing import Any

from ..container.archive_reader import ArchiveReader
from ..container.budget import ReadBudget
from ..container.parallel_verify import Prefetch, start_verifying
from ..container.source import LocalFileSource
from ..deploy.runtime import load_torchscript, onnx_session
from ..errors import MemberNotFoundError, UnsafeArchiveError
from ..nodes.classes import ConfiguredModelSchema
from ..nodes.exports import EXPORTS_KEY, ExportsSchema, export_entries
from ..options import Settings
from .audit_report import AuditReport, export_audit
from .objpath import split_path
from .plan import Planner, ReadPolicy
from .planned_archive import PlannedArchive
from .registry import HandlerRegistry
from .verify_result import VerifyResult


class LazyArchive(PlannedArchive):
    """A zarchive opened for reading. Values taken from it stay valid after it is closed.

    Every load runs in two phases: a plan of the subtree (see zarchive.engine.plan: checked, classes
    resolved and trusted, limits applied, nothing constructed), then construction."""

    format = "zarchive"
    _reader: ArchiveReader

    def __init__(
        self, reader: ArchiveReader, registry: HandlerRegistry, settings: Settings, policy: ReadPolicy | None = None
    ) -> None:
        super().__init__(reader, registry, settings, policy)
        node = reader.manifest.get(EXPORTS_KEY)
        self._exports: dict[str, dict[str, Any]] = {}
        if node is not None:  # checked now: its members exist, with the sizes it records, uncompressed
            Planner(registry, reader, self._policy).run_section(EXPORTS_KEY, ExportsSchema(), node)
            self._exports = export_entries(node)

    # --- what is in it ---
    @property
    def manifest(self) -> dict[str, Any]:
        return self._reader.manifest

    @property
    def budget(self) -> ReadBudget:
        """This open file's read budget (max_read_bytes), the JSON parsed to open it already charged."""
        return self._reader.budget

    @property
    def meta(self) -> dict[str, Any]:
        return self._reader.metadata

    metadata = meta

    @property
    def members(self) -> dict[str, dict[str, Any]]:
        """Member name -> its metadata entry (codec, sizes, checksums)."""
        return dict(self._reader.metadata["members"])

    def entries(self, member: str) -> dict[str, dict[str, Any]]:
        """A member's checksum entries (its header, each tensor), label -> {"offset", "size", "crc32"},
        validated: the same shape whichever format version wrote them."""
        if member not in self._reader.metadata["members"]:
            raise MemberNotFoundError("no such member", member=str(member)[:200])
        return self._reader.checked_entries(member)

    def member_size(self, name: str) -> int:
        """The stored size of any zip member, metadata.json included."""
        info = self._reader.zip.members.get(name)
        if info is None:
            raise MemberNotFoundError("no such member", member=str(name)[:200])
        return info.size

    def _root_node(self) -> Any:
        return self._reader.manifest["root"]

    # --- exports (format 1.3) ---
    @property
    def exports(self) -> dict[str, dict[str, Any]]:
        """The model's exports saved with it ("onnx", "torchscript"): name -> what the save recorded
        (member, size, exporter, opset, inputs, outputs, dynamic_axes, max_abs_diff, max_rel_diff,
        rtol, atol, warnings, torch). Empty when the archive has none."""
        return copy.deepcopy(self._exports)

    def export_bytes(self, name: str) -> bytes:
        """The bytes of the export `name` (the file `unzip` gives), checked against its checksum."""
        self._check_open()
        entry = self._exports.get(name)
        if entry is None:
            have = ", ".join(map(repr, self._exports)) or "none"
            raise MemberNotFoundError(f"the archive has no {str(name)[:60]!r} export (it has: {have})")
        return bytes(self._reader.member_bytes(entry["member"], expected_size=entry["size"]))

    def onnx_session(self, **ort_kwargs: Any) -> Any:
        """An onnxruntime.InferenceSession of the ONNX export, made from its bytes (nothing written
        to disk); `ort_kwargs` go to InferenceSession (e.g. providers=, sess_options=). Needs the
        `deploy` extra. The export is checked first to refer to nothing outside itself (external
        data, execution-provider context files: deploy.onnx_check); UnsafeArchiveError otherwise."""
        data = self.export_bytes("onnx")
        return onnx_session(data, member=self._exports["onnx"]["member"], **ort_kwargs)

    def load_torchscript(self, *, trusted: bool = False, map_location: Any = None) -> Any:
        """The TorchScript export, loaded with torch.jit.load. A TorchScript file holds code that
        runs when it is loaded and called, so this refuses unless `trusted=True`: pass it only for
        archives you trust as you would trust a pickle. zarchive.read never loads this member."""
        if trusted is not True:
            raise UnsafeArchiveError(
                "loading a TorchScript export runs the code stored in the file: pass trusted=True only for an "
                "archive you trust (the ONNX export, arc.onnx_session(), runs no Python code)",
                member=self._exports["torchscript"]["member"] if "torchscript" in self._exports else None,
            )
        return load_torchscript(self.export_bytes("torchscript"), map_location=map_location)

    def audit(self, path: str = "") -> AuditReport:
        """As PlannedArchive.audit; for the whole archive (`path` ""), `.exports` of the result lists
        its exports too (member, kind, and what opening it runs: a read never does)."""
        found = super().audit(path)
        if not split_path(path):
            found.exports = export_audit(self._exports)
        return found

    def model_tag(self, path: str = "") -> str | None:
        """The class tag of the ConfiguredModel at `path`, or None when the value there is not one."""
        node = self.node(path)
        if isinstance(node, dict) and self._tag(node) == ConfiguredModelSchema.name:
            tag = node.get("class")
            return tag if isinstance(tag, str) else None
        return None

    # --- loading ---
    def load(self, *, map_location: Any = None, dtype: Any = None, root_class: type | None = None) -> Any:
        """Everything, the same as read()."""
        self._check_open()
        source = self._reader.source
        if isinstance(source, LocalFileSource):
            # all will be read: read each member whole on the other cores (checksummed as it lands)
            # while the objects are built from those copies; hand them out once every member passed
            prefetch = Prefetch(self._reader, source, skip=self._export_members())
            self._reader.whole_member = prefetch.member
            try:
                try:
                    value = self._get("", map_location=map_location, dtype=dtype, root_class=root_class, ahead=True)
                except BaseException:
                    prefetch.finish()  # damage or a truncated file found meanwhile explains a failure best
                    raise
                prefetch.finish()
            finally:
                self._reader.whole_member = None
                prefetch.close()
            return value
        if not (self._settings.verify and source.mapped):
            return self._get("", map_location=map_location, dtype=dtype, root_class=root_class, ahead=True)
        # all will be read: checksum on the other cores while the objects are built; hand them out
        # only once every checksum passed (damage found meanwhile explains a failed load best)
        pending = start_verifying(self._reader, skip=self._export_members())
        try:
            value = self._get("", map_location=map_location, dtype=dtype, root_class=root_class, ahead=True)
        except BaseException:
            pending.wait()
            raise
        pending.wait()
        return value

    def _export_members(self) -> set[str]:
        """Members a full read leaves alone: the exports are not part of the object tree."""
        return {entry["member"] for entry in self._exports.values()}

    def verify(self) -> VerifyResult:
        """Check every member against every recorded checksum: a list of (member, problem), truthy
        when there is none (see zarchive.engine.verify_result)."""
        self._check_open()
        return VerifyResult(self._reader.verify_all(), members=len(self._reader.zip.members))

    def __repr__(self) -> str:  # members counted as `unzip -l`, `zarchive ls` and verify() count them
        return f"<zarchive {len(self._reader.zip.members)} members, root: {self.summary()}>"


__all__ = ["LazyArchive"]
