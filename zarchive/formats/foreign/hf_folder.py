"""A Hugging Face sharded checkpoint folder read as one mapping of every tensor.

`save_pretrained(..., max_shard_size=...)` writes `model.safetensors.index.json` (`{"metadata":
{...}, "weight_map": {tensor name: shard file name}}`) beside the shards (`model-00001-of-00002
.safetensors`, ...). `zarchive.open(folder)` (or of the index file) opens every shard lazily: the
shards are one byte source (container.concat_source), each shard's header is parsed and checked as
a lone .safetensors file's is, and the index must agree with the shards exactly (every name in one
shard, in the shard the index names; shard names plain file names in the folder, regular files).
Reading one tensor reads only its bytes from its shard.
"""

from __future__ import annotations

import os
from typing import Any

from ...container.budget import ReadBudget
from ...container.concat_source import ConcatSource
from ...container.jsontext import loads_strict
from ...container.open_gate import open_regular, regular_file
from ...container.source import ByteSource, open_local
from ...errors import FormatError, UnsafeArchiveError
from .formats import ForeignLayout, safetensors_layout
from .reader import Region

__all__ = ["INDEX_SUFFIX", "find_index", "hf_folder_layout"]

INDEX_SUFFIX = ".safetensors.index.json"
MAX_INDEX_BYTES = 64 << 20  # a model of 100,000 tensors has an index of a few MB


def find_index(path: str) -> str | None:
    """The index file of the sharded folder `path` (or `path` itself when it is an index file)."""
    if path.endswith(INDEX_SUFFIX) and regular_file(path):
        return path
    if not os.path.isdir(path):
        return None
    found = sorted(n for n in os.listdir(path) if n.endswith(INDEX_SUFFIX))
    if not found:
        return None
    if len(found) > 1:
        raise FormatError(
            f"the folder {path!r} holds {len(found)} sharded-checkpoint indexes ({', '.join(found[:4])}): "
            "open the index file of the one you want"
        )
    return os.path.join(path, found[0])


def _read_index(index: str, max_read_bytes: int | None) -> tuple[bytes, dict[str, str], dict[str, Any]]:
    label = os.path.basename(index)
    with open_regular(index, what="sharded-checkpoint index") as f:
        text = f.read(MAX_INDEX_BYTES + 1)
    if len(text) > MAX_INDEX_BYTES:
        raise UnsafeArchiveError(f"the index is over {MAX_INDEX_BYTES:,} bytes", member=label)
    ReadBudget(max_read_bytes, len(text)).charge_json(text, member=label)  # before parsing it
    doc = loads_strict(text, member=label)
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise FormatError("a sharded-checkpoint index needs a 'weight_map' of tensor name -> shard file", member=label)
    meta = doc.get("metadata", {})
    if not isinstance(meta, dict):
        raise FormatError("the index's 'metadata' must be an object", member=label)
    for shard in set(weight_map.values()):
        if not shard or shard in (".", "..") or "/" in shard or "\\" in shard or "\x00" in shard:
            raise UnsafeArchiveError(
                f"the index names the shard {shard[:80]!r}, not a file name in its folder", member=label
            )
    return text, weight_map, meta


def hf_folder_layout(index: str, max_read_bytes: int | None) -> tuple[ConcatSource, ForeignLayout, ReadBudget]:
    """The shards of the index file `index` as one source, the layout of every tensor in it, and the
    read's budget (max_read_bytes, by default from the size of all shards together)."""
    text, weight_map, meta = _read_index(index, max_read_bytes)
    folder = os.path.dirname(os.path.abspath(index))
    shards = sorted(set(weight_map.values()))
    parts: list[ByteSource] = []
    try:
        for shard in shards:
            parts.append(open_local(os.path.join(folder, shard)))
        source = ConcatSource(parts)
    except FileNotFoundError as e:
        for part in parts:
            part.close()
        raise FormatError(
            f"the index names the shard {os.path.basename(str(e.filename))!r}, which is not in the folder",
            member=os.path.basename(index),
        ) from None
    except BaseException:
        for part in parts:
            part.close()
        raise
    try:
        budget = ReadBudget(max_read_bytes, source.size)
        budget.charge_json(text, member=os.path.basename(index))
        root: dict[str, Any] = {}
        regions: dict[str, Region] = {}
        for shard, part, base in zip(shards, parts, source.bases, strict=True):
            layout = safetensors_layout(part, budget, label=shard)
            for name, node in layout.root.items():
                if weight_map.get(name) != shard:
                    where = f"in {weight_map[name]!r}" if name in weight_map else "nowhere"
                    raise FormatError(f"the shard holds {name!r}, which the index places {where}", member=shard)
                root[name] = node
                region = layout.regions[name]
                regions[name] = Region(region.size, offset=base + (region.offset or 0))
        missing = [n for n in weight_map if n not in root]
        if missing:
            raise FormatError(
                f"the index names {len(missing)} tensors no shard holds, e.g. {missing[0]!r} (in {weight_map[missing[0]]!r})",
                member=os.path.basename(index),
            )
        ordered = {name: root[name] for name in weight_map}  # the index's order, as save_pretrained wrote it
        info = {"metadata": {k: v for k, v in meta.items() if isinstance(v, (str, int, float, bool))}, "shards": shards}
        return source, ForeignLayout("safetensors-sharded", ordered, regions, meta=info), budget
    except BaseException:
        source.close()
        raise
