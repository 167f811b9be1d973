"""`ZArchiveWriter`: torch.distributed.checkpoint's StorageWriter for sharded `.zarc` checkpoints.

Every rank writes its items to its own shard, `shard-<save id>-<rank>.zarc`, through ZArchive.save
(atomic, aligned, checksummed); non-tensor values go through the handler chain like any value, never
through torch.save. The coordinator then writes `index.zarc` (spec/distributed.md) atomically under
its final name: that rename (on an object store, the index's single upload) is the commit. Shard
names are new for every save, so a save killed on any rank before the commit leaves the previous
index and the shards it names untouched; shards no index names any more are removed only after the
new index is in place.

The checkpoint may be a local directory or an fsspec URL (`s3://bucket/ckpt/`, with storage_options
for its filesystem): each file is then written locally and uploaded whole (zarchive.container.remote),
the index last (dcp.location.Location).
"""

from __future__ import annotations

import dataclasses
import os
import re
import uuid
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItemType
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult

from ..api import ZArchive
from ..container import old_file
from ..container.remote import is_url
from ..errors import SaveError
from .assemble import dtype_name
from .index import INDEX_NAME, SHARD_NAME, Chunk, Index, ObjectEntry, TensorEntry, parse, shard_name
from .location import Location

TMP_SHARD = re.compile(r"\.shard-([0-9a-f]{8,64})-[0-9]{5,9}\.zarc\..+\.zarc-tmp")  # see atomic_write
MEMORY_FORMATS = {
    torch.contiguous_format: "contiguous_format",
    torch.channels_last: "channels_last",
    torch.channels_last_3d: "channels_last_3d",
    torch.preserve_format: "preserve_format",
}


class ZArchiveWriter(StorageWriter):
    """Writes a sharded checkpoint into the directory `path` (created if needed), or into the folder
    an fsspec URL names (`s3://bucket/ckpt/`; storage_options: its filesystem's options).

    settings: those of zarchive.ZArchive (durable, ...), used for every shard and the index; compress
    defaults to False here: a compressed member is read whole, an uncompressed one chunk by chunk
    (what a rank loading part of a tensor needs), and DCP's own writer does not compress either.
    Use it as `dcp.save(state_dict, storage_writer=ZArchiveWriter(path))` or with dcp.async_save."""

    def __init__(
        self, path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None, **settings: Any
    ) -> None:
        super().__init__()
        self.path: str = str(path) if is_url(path) else os.fspath(path)
        self.storage_options = storage_options
        self._archive = ZArchive(**{"compress": False, **settings})
        self.is_coordinator = False
        self.rank = 0

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None:
            self.path = str(checkpoint_id) if is_url(checkpoint_id) else os.fspath(checkpoint_id)

    @property
    def location(self) -> Location:
        return Location(self.path, self.storage_options)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator
        self.rank = int(kwargs.get("rank", 0))

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        """One new save id for all ranks (so every shard of this save gets a fresh name)."""
        save_id = uuid.uuid4().hex[:16]
        return [dataclasses.replace(p, storage_data={"save_id": save_id, "shard": i}) for i, p in enumerate(plans)]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> torch.futures.Future[list[WriteResult]]:
        """This rank's shard: tensors (the projection each item names, copied to the CPU where
        needed) under "tensors", other values, as they are, under "objects"."""
        save_id, number = plan.storage_data["save_id"], plan.storage_data["shard"]
        name = shard_name(save_id, number)
        tensors: dict[str, torch.Tensor] = {}
        objects: dict[str, Any] = {}
        results: list[WriteResult] = []
        where: dict[str, Any] = {"shard": name, "rank": number, "save_id": save_id}
        for item in plan.items:
            fqn = item.index.fqn
            if item.type == WriteItemType.BYTE_IO:
                objects[fqn] = _plain_object(planner, item.index)
                size = 0
                key = fqn
            else:
                tensor = _own_tensor(planner.resolve_data(item))
                offsets = tuple(item.index.offset or ())
                key = f"{fqn}@{','.join(str(o) for o in offsets)}" if offsets else fqn
                tensors[key] = tensor
                size = tensor.nbytes
            results.append(WriteResult(index=item.index, size_in_bytes=size, storage_data={**where, "key": key}))
        at = self.location
        at.make()
        shard = {"save_id": save_id, "rank": number, "tensors": tensors, "objects": objects}
        self._archive.save(shard, at.target(name), **at.open_settings)
        where["size"] = at.stored_size(name)
        for r in results:
            r.storage_data["size"] = where["size"]
        done: torch.futures.Future[list[WriteResult]] = torch.futures.Future()
        done.set_result(results)
        return done

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """The commit: the index, written atomically under its final name; then old shards go."""
        index = build_index(metadata, results)
        parse(index.to_json())  # write only what a reader accepts
        at = self.location
        self._archive.save(index.to_json(), at.target(INDEX_NAME), **at.open_settings)
        remove_unlisted_shards(at, index)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return isinstance(checkpoint_id, (str, os.PathLike))


def _plain_object(planner: SavePlanner, index: MetadataIndex) -> Any:
    """The value itself, not the torch.save bytes that SavePlanner.resolve_data makes of it."""
    lookup = getattr(planner, "lookup_object", None)  # DefaultSavePlanner and its subclasses
    if lookup is None:
        raise SaveError(
            f"cannot save the non-tensor value {index.fqn!r}: ZArchiveWriter takes values from planners with "
            "lookup_object() (DefaultSavePlanner and subclasses), never torch.save bytes", path=index.fqn,
        )  # fmt: skip
    return lookup(index)


def _own_tensor(data: Any) -> torch.Tensor:
    """A CPU tensor of exactly the item's elements (a view of a bigger storage would save it all)."""
    if not isinstance(data, torch.Tensor):
        raise SaveError(f"the planner resolved a tensor item to {type(data).__name__}, not a tensor")
    t = data.detach().cpu().contiguous()
    if t.storage_offset() != 0 or t.untyped_storage().nbytes() != t.nbytes:
        t = t.clone()
    return t


def build_index(metadata: Metadata, results: list[list[WriteResult]]) -> Index:
    """The index of a save, from DCP's global metadata and every rank's write results."""
    stored: dict[MetadataIndex, dict[str, Any]] = {}
    shards: dict[str, dict[str, int]] = {}
    for rank_results in results:
        for r in rank_results:
            stored[r.index] = r.storage_data
            shards[r.storage_data["shard"]] = {"rank": r.storage_data["rank"], "size": r.storage_data["size"]}
    save_ids = {s["save_id"] for s in stored.values()} or {uuid.uuid4().hex[:16]}  # (an empty state dict)
    if len(save_ids) != 1:
        raise SaveError(f"the ranks wrote shards of different saves {sorted(save_ids)}: not one checkpoint")
    index = Index(save_id=save_ids.pop(), shards=dict(sorted(shards.items())))
    paths = metadata.planner_data if isinstance(metadata.planner_data, dict) else {}
    for fqn, md in metadata.state_dict_metadata.items():
        path = tuple(paths.get(fqn, (fqn,)))
        if isinstance(md, TensorStorageMetadata):
            chunks = []
            for c in md.chunks:
                s = stored[MetadataIndex(fqn, c.offsets)]
                chunks.append(Chunk(tuple(c.offsets), tuple(c.sizes), s["shard"], s["key"]))
            p = md.properties
            index.entries[fqn] = TensorEntry(
                fqn, path, dtype_name(p.dtype), tuple(md.size), tuple(chunks), requires_grad=bool(p.requires_grad),
                memory_format=MEMORY_FORMATS.get(p.memory_format, "contiguous_format"), pin_memory=bool(p.pin_memory),
            )  # fmt: skip
        elif isinstance(md, BytesStorageMetadata):
            s = stored[MetadataIndex(fqn)]
            index.entries[fqn] = ObjectEntry(fqn, path, s["shard"], s["key"])
    return index


def remove_unlisted_shards(at: Location, index: Index) -> None:
    """Shards of older or failed saves (named like shards, not in the committed index), and the
    temporary files of shards of other saves that a killed process left behind (local folders: a
    remote file is written locally and uploaded whole, so no part of it is ever in the folder)."""
    for name in at.names():
        tmp = TMP_SHARD.fullmatch(name)
        if (SHARD_NAME.fullmatch(name) and name not in index.shards) or (tmp and tmp.group(1) != index.save_id):
            if at.local is None:
                at.remove(name)
                continue
            held = old_file.hold(at.target(name))  # a big shard's blocks are freed on a background thread
            at.remove(name)
            old_file.release_later(held)
