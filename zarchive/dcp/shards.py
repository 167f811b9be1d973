"""The shards of a sharded checkpoint, opened on first use through the directory's gates, and the
chunks read from them (no torch until a tensor is read).

Every shard is checked to be a regular file (Location.check_file: a stat, or a remote folder's
listing) and a `.zarc` archive of the save the index describes, and is opened with what the directory's budget has left as its own limit; the JSON
parsed to open it is charged to that budget. On opening, each chunk the index puts in the shard claims
the stored bytes its node names (limits.StorageClaims), and the shard's chunk nodes are kept, so
finding a chunk costs the same however many the shard holds.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Protocol

from ..container.budget import ReadBudget, shape_nbytes
from ..engine.objpath import join_path
from ..engine.plan import ReadPolicy
from ..errors import FormatError, MemberNotFoundError, ZArchiveError
from ..nodes.arrays import TORCH_ITEMSIZE
from ..nodes.base import MISSING
from .index import INDEX_NAME, Chunk, Index, TensorEntry
from .limits import StorageClaims
from .location import Location

if TYPE_CHECKING:
    from ..engine.lazy import LazyArchive


class ArchiveOpener(Protocol):
    max_read_bytes: int | None

    def open(
        self, file_path: Any, *, trusted: Any = None, unresolved: Any = "raise", storage_options: Any = None
    ) -> Any: ...


def open_zarc(opener: ArchiveOpener, path: str, name: str, **settings: Any) -> LazyArchive:
    """The `.zarc` archive at `path` (file `name` of the checkpoint: an index or a shard is nothing else)."""
    from ..engine.lazy import LazyArchive

    arc = opener.open(path, **settings)
    if not isinstance(arc, LazyArchive):
        arc.close()
        raise FormatError(f"{name!r} is not a zarchive archive (a {type(arc).__name__})", member=name)
    return arc


class Shards:
    """The shards of one checkpoint, each opened once (closed by `close`)."""

    def __init__(
        self, location: Location, opener: ArchiveOpener, policy: ReadPolicy, index: Index, budget: ReadBudget
    ) -> None:
        self.location = location
        self.index = index
        self.budget = budget
        self._opener = opener
        self._policy = policy
        self._open: dict[str, LazyArchive] = {}
        self._nodes: dict[str, dict[str, Any]] = {}  # shard -> its "tensors" children, by key
        self._claims = StorageClaims()
        self._chunks_in: dict[str, list[tuple[TensorEntry, Chunk]]] = {}
        for e in index.entries.values():
            if isinstance(e, TensorEntry):
                for c in e.chunks:
                    self._chunks_in.setdefault(c.shard, []).append((e, c))

    def get(self, name: str) -> LazyArchive:
        """The shard archive `name`, opened on first use (its save id checked against the index)."""
        arc = self._open.get(name)
        if arc is not None:
            return arc
        if name not in self.index.shards:
            raise MemberNotFoundError("the index lists no such shard", member=str(name)[:200])
        opener = copy.copy(self._opener)  # the shard's limit: what the directory's budget has left
        opener.max_read_bytes = self.budget.left
        target = self.location.check_file(name, what="shard")
        arc = open_zarc(opener, target, name, **self._read_settings(), **self.location.open_settings)
        try:
            self.budget.charge(arc.budget.json_bytes, "opening the shard", member=name)
            try:
                ok = isinstance(arc.node(""), dict) and arc.get("save_id") == self.index.save_id
            except ZArchiveError:
                ok = False
            if not ok:
                raise FormatError(
                    f"shard {name!r} is not a shard of the save the index describes ({self.index.save_id!r})",
                    member=name,
                )  # fmt: skip
            self._nodes[name] = self._claim(name, arc)
        except BaseException:
            arc.close()
            raise
        self._open[name] = arc
        return arc

    def _claim(self, name: str, arc: LazyArchive) -> dict[str, Any]:
        """The shard's stored chunks by key, each claimed by the chunk the index puts there (refused if
        two chunks use the same stored bytes)."""
        try:
            nodes = arc.children(arc.node("tensors")) or {}
        except MemberNotFoundError:
            nodes = {}
        for entry, chunk in self._chunks_in.get(name, ()):
            if chunk.key in nodes:
                self._claims.claim(name, nodes[chunk.key], entry, chunk)
        return nodes

    def _read_settings(self) -> dict[str, Any]:
        """The open's trusted= and unresolved=, for the values read from shards."""
        p = self._policy
        trusted = None if p.trusted is None else [*p.given.values(), *(t for t in p.trusted if t not in p.given)]
        return {"trusted": trusted, "unresolved": p.unresolved}

    def chunk_node(self, entry: TensorEntry, chunk: Chunk) -> tuple[Any, str]:
        """The chunk's node and object path in its shard, where a tensor of the dtype and size the
        index says is."""
        self.get(chunk.shard)
        where = join_path(["tensors", chunk.key])
        node = self._nodes[chunk.shard].get(chunk.key, MISSING)
        if node is MISSING:
            raise FormatError(
                f"the index puts a chunk of {entry.fqn!r} in shard {chunk.shard!r} under {chunk.key!r}, which it lacks",
                member=chunk.shard,
            )
        if not isinstance(node, dict) or node.get("dtype") != entry.dtype or node.get("shape") != list(chunk.sizes):
            raise FormatError(
                f"the chunk of {entry.fqn!r} at {list(chunk.offsets)} in shard {chunk.shard!r} is not a "
                f"{entry.dtype} tensor of shape {list(chunk.sizes)} as the index says", member=chunk.shard,
            )  # fmt: skip
        return node, where

    def read_chunk(self, entry: TensorEntry, chunk: Chunk) -> Any:
        """One chunk's tensor, read from its shard (only its bytes), checked against the index."""
        node, where = self.chunk_node(entry, chunk)
        return self.get(chunk.shard).load_node(node, where)

    def read_chunks(self, wanted: list[tuple[TensorEntry, Chunk]]) -> dict[tuple[str, str], Any]:
        """The values stored for these chunks, by (shard, key), unchecked (see assemble.checked), once
        they fit the budget together. A shard at least half of whose chunks are wanted is read with one
        plan (a rank loading what it saved reads all of its shard), otherwise chunk by chunk."""
        planned = sum(shape_nbytes(c.sizes, TORCH_ITEMSIZE[e.dtype], member=INDEX_NAME, path=e.fqn) for e, c in wanted)
        self.budget.check_plan(planned, path="the chunks this rank reads")
        out: dict[tuple[str, str], Any] = {}
        by_shard: dict[str, set[str]] = {}
        for _, c in wanted:
            by_shard.setdefault(c.shard, set()).add(c.key)
        for shard, keys in by_shard.items():
            arc = self.get(shard)
            nodes = self._nodes[shard]
            missing = sorted(keys - nodes.keys())
            if missing:
                raise FormatError(
                    f"the index puts a chunk in shard {shard!r} under {missing[0]!r}, which it lacks", member=shard
                )
            if 2 * len(keys) >= len(nodes):
                whole = arc.get("tensors")
                out.update(((shard, k), whole[k]) for k in keys)
            else:
                out.update(((shard, k), arc.load_node(nodes[k], join_path(["tensors", k]))) for k in keys)
        return out

    def load_chunk_into(self, entry: TensorEntry, chunk: Chunk, out: Any) -> None:
        """Read one stored chunk into `out` (a tensor of its dtype and size: straight into its memory
        where it is contiguous CPU memory), after checking it is what the index says."""
        from .assemble import dtype_name  # (torch is imported: `out` is a tensor)

        if dtype_name(out.dtype) != entry.dtype or tuple(out.shape) != chunk.sizes:
            raise FormatError(
                f"the chunk of {entry.fqn!r} at {list(chunk.offsets)} is a {entry.dtype} tensor of shape "
                f"{list(chunk.sizes)}, not {dtype_name(out.dtype)}{list(out.shape)}",
                member=chunk.shard,
            )
        node, where = self.chunk_node(entry, chunk)
        self.get(chunk.shard).load_into(where, out, node=node)

    def close(self) -> None:
        for arc in self._open.values():
            arc.close()
        self._open.clear()
