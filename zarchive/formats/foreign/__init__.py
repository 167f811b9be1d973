"""Reading files other tools write: torch.save (`.pt`/`.pth`/`.ckpt`, torch's zip format), `.safetensors`,
`.npy` and `.npz`, recognised by their bytes (not their names), read-only, through the same lazy
interface as a .zarc (`zarchive.open(path)[key]` reads only that value's bytes).

torch.save's `data.pkl` is never unpickled: a restricted opcode reader (foreign.restricted_pickle)
builds plain values and accepts only the globals a weights file needs (foreign.torch_pickle); any
other is refused with RefusedPickleError before anything runs.
"""

from __future__ import annotations

from typing import Any

from ...container.budget import ReadBudget
from ...container.source import ByteSource
from ...engine.plan import ReadPolicy
from .archive import ForeignArchive
from .formats import read_layout

__all__ = ["ForeignArchive", "open_hf_folder", "open_if_foreign"]


def open_if_foreign(source: ByteSource, za: Any, policy: ReadPolicy | None = None) -> ForeignArchive | None:
    """A ForeignArchive over `source` if its bytes are a file of a kind read here, else None (the
    source is then left open); used by ZArchive.open, with its settings and read policy, when the
    zarchive reader rejected the file. The source is closed if reading it as such a file fails."""
    try:
        budget = ReadBudget(policy.max_read_bytes if policy is not None else za.max_read_bytes, source.size)
        layout = read_layout(source, max_member_bytes=za.max_decompressed, budget=budget)
        if layout is None:
            return None
        return ForeignArchive(
            source, layout, settings=za.settings, max_member_bytes=za.max_decompressed, budget=budget, policy=policy
        )
    except BaseException:
        source.close()
        raise


def open_hf_folder(path: str, za: Any, policy: ReadPolicy | None = None) -> ForeignArchive | None:
    """A ForeignArchive over the shards of a Hugging Face sharded checkpoint, when `path` is such a
    folder or its `*.safetensors.index.json`; else None."""
    from .hf_folder import find_index, hf_folder_layout

    index = find_index(path)
    if index is None:
        return None
    source, layout, budget = hf_folder_layout(index, policy.max_read_bytes if policy is not None else za.max_read_bytes)
    try:
        return ForeignArchive(
            source, layout, settings=za.settings, max_member_bytes=za.max_decompressed, budget=budget, policy=policy
        )
    except BaseException:
        source.close()
        raise
