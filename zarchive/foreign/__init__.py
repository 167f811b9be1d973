"""Reading files other tools write: torch.save (`.pt`/`.pth`/`.ckpt`, torch's zip format), `.safetensors`,
`.npy` and `.npz`, recognised by their bytes (not their names), read-only, through the same lazy
interface as a .zarc (`zarchive.open(path)[key]` reads only that value's bytes).

torch.save's `data.pkl` is never unpickled: a restricted opcode reader (foreign.restricted_pickle)
builds plain values and accepts only the globals a weights file needs (foreign.torch_pickle); any
other is refused with RefusedPickleError before anything runs.
"""

from __future__ import annotations

from typing import Any

from ..container.budget import ReadBudget
from ..container.source import ByteSource
from ..plan import ReadPolicy
from .archive import ForeignArchive
from .formats import read_layout

__all__ = ["ForeignArchive", "open_if_foreign"]


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
