"""`ZArchiveReader`: torch.distributed.checkpoint's StorageReader for sharded `.zarc` checkpoints.

The index is read and checked (view.ShardedCheckpoint) before DCP plans anything; each rank then
reads only the chunks its tensors overlap, each checked against its checksum, and copies the part
it needs (resharding: any world size reads a checkpoint saved at any other). Non-tensor values are
read through the handler chain and put into the state dict by the reader: DCP's default planner
would hand bytes to torch.load(weights_only=False), so no byte of a checkpoint ever reaches
`LoadPlanner.load_bytes`.

Refusals are ZArchiveErrors. dcp.load reports them wrapped (an AssertionError carrying the
message for one found reading the index, a CheckpointException whose failures hold the
ZArchiveError otherwise); `zarchive.verify(directory)` and `zarchive.open(directory)` raise them
as they are.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner, ReadItem
from torch.distributed.checkpoint.storage import StorageReader

from ..api import ZArchive
from ..container.remote import is_url
from ..engine.objpath import join_path
from ..errors import FormatError, ZArchiveError
from .assemble import checked, region, torch_dtype
from .index import Chunk, ObjectEntry, TensorEntry
from .location import Location
from .view import ShardedCheckpoint

MEMORY_FORMATS = {
    "contiguous_format": torch.contiguous_format,
    "channels_last": torch.channels_last,
    "channels_last_3d": torch.channels_last_3d,
    "preserve_format": torch.preserve_format,
}


class ZArchiveReader(StorageReader):
    """Reads the sharded checkpoint in the directory `path` (written by ZArchiveWriter), or in the
    folder an fsspec URL names (`s3://bucket/ckpt/`; storage_options: its filesystem's options).

    settings: those of zarchive.ZArchive (verify, mmap, max_nodes, ...).
    Use it as `dcp.load(state_dict, storage_reader=ZArchiveReader(path))`."""

    def __init__(
        self, path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None, **settings: Any
    ) -> None:
        super().__init__()
        self.path: str = str(path) if is_url(path) else os.fspath(path)
        self.storage_options = storage_options
        self._archive = ZArchive(**settings)
        self._view: ShardedCheckpoint | None = None
        self._where: dict[MetadataIndex, ObjectEntry | tuple[TensorEntry, Chunk]] = {}

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None:
            self.path = str(checkpoint_id) if is_url(checkpoint_id) else os.fspath(checkpoint_id)
        self.close()

    def close(self) -> None:
        """Close the shards (the next read_metadata opens the checkpoint again)."""
        if self._view is not None:
            self._view.close()
            self._view = None

    def open(self) -> ShardedCheckpoint:
        """The checkpoint, its index read and checked (ZArchiveError if it cannot be trusted)."""
        if self._view is None:
            at = Location(self.path, self.storage_options)
            if at.local is not None and not at.is_dir():  # (a remote folder: zarchive.open says what is missing)
                raise FormatError(f"{self.path!r} is not a sharded checkpoint directory")
            view = self._archive.open(at.folder_target, **at.open_settings)
            if not isinstance(view, ShardedCheckpoint):
                view.close()
                raise FormatError(f"{self.path!r} is not a sharded checkpoint directory")
            self._view = view
        return self._view

    def read_metadata(self) -> Metadata:
        view = self.open()
        state: dict[str, TensorStorageMetadata | BytesStorageMetadata] = {}
        self._where = {}
        for fqn, e in view.index.entries.items():
            if isinstance(e, ObjectEntry):
                state[fqn] = BytesStorageMetadata()
                self._where[MetadataIndex(fqn)] = e
                continue
            props = TensorProperties(
                dtype=torch_dtype(e.dtype), requires_grad=e.requires_grad,
                memory_format=MEMORY_FORMATS[e.memory_format], pin_memory=e.pin_memory,
            )  # fmt: skip
            chunks = [ChunkStorageMetadata(torch.Size(c.offsets), torch.Size(c.sizes)) for c in e.chunks]
            state[fqn] = TensorStorageMetadata(props, torch.Size(e.shape), chunks)
            for c in e.chunks:
                self._where[MetadataIndex(fqn, torch.Size(c.offsets))] = (e, c)
        paths = {fqn: e.path for fqn, e in view.index.entries.items()}
        return Metadata(state_dict_metadata=dict(state), planner_data=paths)

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.open()
        if not self._where:
            self.read_metadata()

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> torch.futures.Future[None]:
        view = self.open()
        tensors: list[tuple[ReadItem, TensorEntry, Chunk]] = []
        for item in plan.items:
            where = self._where.get(item.storage_index)
            if where is None:
                raise FormatError(f"the checkpoint's index has no item {item.storage_index.fqn!r} at "
                                  f"{list(item.storage_index.offset or [])}")  # fmt: skip
            if isinstance(where, ObjectEntry):
                value = view.shard(where.shard).get(join_path(["objects", where.key]))
                deliver_object(planner, item, value)
            else:
                entry, chunk = where
                target = planner.resolve_tensor(item).detach()
                if _whole_chunk(item, chunk, target):  # read and checked straight into the target's memory
                    view.load_chunk_into(entry, chunk, target)
                    planner.commit_tensor(item, target)
                else:
                    tensors.append((item, entry, chunk))
        chunks = view.read_chunks([(entry, chunk) for _, entry, chunk in tensors])  # each read and checked once
        for item, entry, chunk in tensors:
            src = checked(entry, chunk, chunks[chunk.shard, chunk.key])
            part = src[region(tuple(item.storage_offsets), tuple(item.lengths))]
            target = planner.resolve_tensor(item).detach()
            if target.size() != part.size():
                raise FormatError(f"{entry.fqn!r}: the checkpoint holds {list(part.size())} where the state dict "
                                  f"asks for {list(target.size())}")  # fmt: skip
            target.copy_(part)
            planner.commit_tensor(item, target)
        done: torch.futures.Future[None] = torch.futures.Future()
        done.set_result(None)
        return done

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        if isinstance(checkpoint_id, str) and is_url(checkpoint_id):
            return True
        return isinstance(checkpoint_id, (str, os.PathLike)) and os.path.isdir(os.fspath(checkpoint_id))


def _whole_chunk(item: ReadItem, chunk: Chunk, target: torch.Tensor) -> bool:
    """Whether the item is a whole stored chunk and its target contiguous memory to read it into (on
    the CPU, or a CUDA device: LazyArchive.load_into reads there through pinned memory)."""
    return (
        all(o == 0 for o in item.storage_offsets)
        and tuple(item.lengths) == chunk.sizes
        and tuple(target.shape) == chunk.sizes
        and target.device.type in ("cpu", "cuda")
        and target.is_contiguous()
    )


def deliver_object(planner: LoadPlanner, item: ReadItem, value: Any) -> None:
    """Put a non-tensor value where the planner's state dict has it, without load_bytes (whose
    default implementation is torch.load(weights_only=False))."""
    own = getattr(planner, "load_object", None)
    if callable(own):
        own(item, value)
        return
    if isinstance(planner, DefaultLoadPlanner) and type(planner).load_bytes is DefaultLoadPlanner.load_bytes:
        fqn = item.dest_index.fqn
        if planner.flatten_state_dict:
            set_at(planner.original_state_dict, planner.mappings[fqn], value)
        else:
            planner.state_dict[fqn] = value
        return
    raise ZArchiveError(
        f"cannot load the non-tensor value {item.dest_index.fqn!r} with {type(planner).__name__}: its load_bytes "
        "would need serialized bytes; use DefaultLoadPlanner or give the planner a load_object(read_item, value) method"
    )  # fmt: skip


def set_at(root: Any, path: tuple[Any, ...], value: Any) -> None:
    """root[p0][p1]...[pn] = value, in the containers the state dict already has."""
    node = root
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
