"""An opened foreign file, with the same interface as an opened zarchive (browse.OpenedArchive).

`zarchive.open("model.pt")` returns one of these for a torch.save zip, a .safetensors, an .npy or an
.npz file (recognised by content), read-only. Opening reads the file's layout (the zip directory and
`data.pkl`, or the safetensors / npy headers); the tree of values it describes is written as a
manifest in zarchive's node vocabulary (see foreign.handlers), so browsing, `plan()`, `audit()`,
`arc[path]`, `load()` and the command line work as on a .zarc, through the same two-phase read
(planned_archive.PlannedArchive) and read policy. A tensor's bytes are read when it is loaded, and only its own.
"""

from __future__ import annotations

from typing import Any

from ...container.budget import ReadBudget
from ...container.source import ByteSource
from ...engine.context import SaveContext
from ...engine.plan import ReadPolicy
from ...engine.planned_archive import PlannedArchive
from ...engine.registry import HandlerRegistry
from ...engine.verify_result import VerifyResult
from ...errors import FormatError, SaveError
from ...options import Settings
from .formats import ForeignLayout, storage_member
from .handlers import ForeignArrayHandler, ForeignTensorHandler, ForeignValues
from .reader import ForeignReader
from .torch_pickle import TensorRef

KIND_NAMES = {
    "torch": "torch.save",
    "safetensors": "safetensors",
    "safetensors-sharded": "sharded safetensors",
    "npy": "npy",
    "npz": "npz",
}


def manifest_root(layout: ForeignLayout) -> Any:
    """The layout's tree of values as manifest nodes (written by the built-in handlers)."""

    def member_of(t: TensorRef) -> str:
        return storage_member(layout, t)

    def shared(t: TensorRef) -> bool:
        return t.storage.users > 1

    registry = HandlerRegistry([ForeignValues(member_of, shared)])
    # no value may go to a member of its own: lists stay inline however long
    ctx = SaveContext(registry, Settings(external_list_threshold=1 << 62, external_array_threshold=1 << 62))
    try:
        root = ctx.save(layout.root)
        ctx.finalize()
    except SaveError as e:
        raise FormatError(f"the file holds a value zarchive cannot represent: {e.message}", path=e.path) from None
    if ctx.members:  # (nothing above plans one; kept as a guard)
        raise FormatError("the file's values would need members of their own")
    return root


class ForeignArchive(PlannedArchive):
    """A torch.save, .safetensors, .npy or .npz file opened for reading (read-only). Values taken
    from it stay valid after it is closed."""

    _reader: ForeignReader

    def __init__(
        self,
        source: ByteSource,
        layout: ForeignLayout,
        *,
        settings: Settings,
        max_member_bytes: int,
        budget: ReadBudget,
        policy: ReadPolicy | None = None,
    ) -> None:
        self.format = layout.kind
        self._layout_meta = layout.meta
        root = manifest_root(layout)
        self._manifest = {"format": KIND_NAMES[layout.kind], "root": root}
        reader = ForeignReader(
            source,
            layout.regions,
            zip_=layout.zip,
            verify=settings.verify,
            max_member_bytes=max_member_bytes,
            budget=budget,
        )
        registry = HandlerRegistry([ForeignTensorHandler(), ForeignArrayHandler()])
        super().__init__(reader, registry, settings, policy)

    @property
    def manifest(self) -> dict[str, Any]:
        """The file's values as a zarchive manifest (built when it was opened; not stored in the file)."""
        return self._manifest

    @property
    def meta(self) -> dict[str, Any]:
        """What the file says about itself (safetensors' text metadata, torch's archive name and version)."""
        return {"format": KIND_NAMES[self.format], **self._layout_meta}

    metadata = meta

    @property
    def members(self) -> dict[str, dict[str, Any]]:
        """Member name (a storage, a tensor, an array) -> codec and sizes."""
        return {name: self._reader.member_entry(name) for name in self._reader.regions}

    def member_size(self, name: str) -> int:
        """The stored size of a member."""
        return int(self._reader.member_entry(name)["stored_size"])

    def _root_node(self) -> Any:
        return self._manifest["root"]

    def model_tag(self, path: str = "") -> str | None:
        """None: foreign files hold no ConfiguredModel."""
        self.node(path)
        return None

    def verify(self) -> VerifyResult:
        """Check every member the file records a CRC for (zip members); safetensors and npy files
        record none, so only their layout (checked when opened) is verified."""
        self._check_open()
        return VerifyResult(self._reader.verify_all(), members=len(self._reader.regions))

    def __repr__(self) -> str:
        return f"<{KIND_NAMES[self.format]} file, {len(self._reader.regions)} members, root: {self.summary()}>"
