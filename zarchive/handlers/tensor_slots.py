"""Where a tensor lies in its `.safetensors` member, for the torch and the numpy tensor handlers.

A fetch of one value finds its tensor by the checksum entry an uncompressed member records for each
key (spec section 6: offset, size, CRC-32), in the metadata that opening the archive parsed already:
nothing is read before the tensor's own bytes. The slot is then what the manifest says the member
stores, once the entry's size agrees with the node's dtype and shape and the member's entries are
known not to overlap. A full read (it reads every member whole), a compressed or chunked member (no
entries) and an archive whose member lacks the entry go by the member's own header instead: parsed
and checked once per opened archive (its entries tile the data exactly; each entry's dtype, shape
and size agree with the node). That a header agrees with its member's entries is `verify`'s to check,
and a full read's.

Nothing here may import torch (the numpy handler reads tensors without it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..container.byte_groups import CODEC as BYTE_GROUPS_CODEC
from ..container.safetensors_layout import ITEMSIZE, TensorSlot, header_length, parse_header
from ..errors import FormatError

if TYPE_CHECKING:
    from ..engine.context import LoadContext


# (safetensors dtype code, shape) the node says its member stores under its key: for a whole tensor
# its own code and shape (or U8 bytes, for dtypes safetensors has no code for); for views of a shared
# storage, U8 bytes of any length (shape None)
Stored = tuple[str, "tuple[int, ...] | None"]


def find_slot(name: Any, key: str, stored: Stored, ctx: LoadContext) -> TensorSlot:
    """Where tensor `key` lies in member `name`: by its checksum entry in a fetch of one value, else
    by the member's header (see the module docstring). A FormatError where neither holds the key, or
    the entry's size is not what the node stores."""
    placed = None if ctx.whole or not isinstance(name, str) else ctx.archive.entry_range(name, key, path=ctx.path_str)
    if placed is None:
        return header_slot(name, key, ctx)
    code, shape = stored
    begin, end = placed
    if shape is None:
        return TensorSlot(key, code, (end - begin,), begin, end)
    nbytes = math.prod(shape) * ITEMSIZE[code]
    if nbytes != end - begin:
        raise FormatError(
            f"the member's entry {key!r} holds {end - begin} bytes, the manifest's {code}{list(shape)[:8]} "
            f"takes {nbytes}",
            member=name,
            path=ctx.path_str,
        )
    return TensorSlot(key, code, shape, begin, end)


def header_slot(name: Any, key: str, ctx: LoadContext) -> TensorSlot:
    """Where tensor `key` lies in member `name`, from the member's own header (parsed and checked once
    per opened archive, so fetching one tensor after another does not parse it again)."""
    slots = ctx.archive.parsed.get(("safetensors", name)) if isinstance(name, str) else None
    if slots is None:
        slots = member_slots(name, ctx)
    slot = slots.get(key)
    if slot is None:
        raise FormatError(f"tensor {key!r} is not in the member", member=name, path=ctx.path_str)
    return slot  # type: ignore[no-any-return]


def member_slots(name: Any, ctx: LoadContext) -> Mapping[str, TensorSlot]:
    """The parsed, checked header of safetensors member `name`; parsed once per opened archive."""
    entry = ctx.member_entry(name)  # (checks that `name` is a member name)
    size = entry["size"]
    archive = ctx.archive
    hlen = header_length(archive.member_prefix(name, 8, path=ctx.path_str), size, member=name)
    if entry["codec"] in ("none", BYTE_GROUPS_CODEC):  # the header alone (chunks: the chunks holding it)
        head = archive.header_range(name, hlen, path=ctx.path_str)
    else:  # compressed: the header must tile the declared size before the whole member is decompressed
        parse_header(memoryview(archive.member_prefix(name, hlen, path=ctx.path_str)), size, member=name)
        head = ctx.member_bytes(name, shared=True)
    slots = parse_header(head, size, member=name)
    archive.parsed[("safetensors", name)] = slots
    return slots


__all__ = ["Stored", "find_slot", "header_slot", "member_slots"]
