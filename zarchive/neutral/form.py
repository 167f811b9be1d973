"""The class-free neutral form of an opened archive or sharded checkpoint directory
(spec/neutral.md): `{"format": "zarchive-generic-1", "value": DESC}`, by the walk that fits it."""

from __future__ import annotations

from ..errors import FormatError
from .describe import Describer
from .encode import FORM_NAME, D
from .sharded import ShardedDescriber
from .walker import NodeSource


def neutral_form(arc: NodeSource) -> D:
    """The class-free neutral form of an opened archive (or sharded checkpoint directory):
    `{"format": "zarchive-generic-1", "value": DESC}`. Open it with `unresolved="generic"` (as
    `neutral_form_of` and the command do), or a class tag this process cannot resolve is refused by
    the plan; nothing is constructed either way."""
    from ..dcp.view import ShardedCheckpoint
    from ..engine.lazy import LazyArchive

    if isinstance(arc, ShardedCheckpoint):
        return {"format": FORM_NAME, "value": ShardedDescriber(arc).run()}
    if not isinstance(arc, LazyArchive):
        raise FormatError(
            "the class-free neutral form is defined for zarchive archives and sharded checkpoint directories "
            "(spec/neutral.md), not for this file's format: convert it first (zarchive convert FILE out.zarc)"
        )
    return {"format": FORM_NAME, "value": Describer(arc).run()}


__all__ = ["neutral_form"]
