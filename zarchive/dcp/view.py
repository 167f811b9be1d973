"""`zarchive.open(directory)` on a sharded checkpoint: one lazy view of the whole state dict.

The object tree comes from the index alone (spec/distributed.md): a tensor is assembled, when it is
read, from the chunks it needs, each read (and checked) from its shard without reading the rest of
the shard; a non-tensor value is read from its shard through the normal handler chain. Shards are
opened when first used. `verify()` checks the index, every shard's checksums and that every chunk
and value the index names is in its shard with the dtype and size the index says.

Nodes: a dict of keys is `{"$type": "dcp.dict", "items": {...}}` (`"dcp.list"` where the keys are
list indices); a tensor is
`{"$type": "torch.Tensor", "dtype", "shape", "chunks": [{"$ref": shard, "key", "offsets", "sizes"}]}`;
a non-tensor value is `{"$type": "dcp.value", "$ref": shard, "key"}`, whose children are those of
its node in the shard.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, cast

from ..audit_report import AuditReport
from ..browse import TreeBrowser
from ..errors import FormatError, IntegrityError, MemberNotFoundError, ZArchiveError
from ..nodes.base import MISSING
from ..objpath import join_path, split_path
from ..plan import Plan, ReadPolicy
from ..verify_result import VerifyResult
from ..weights_hash import archive_digests, combine
from .index import INDEX_NAME, Chunk, Index, ObjectEntry, TensorEntry, parse

if TYPE_CHECKING:
    from typing import Self

    from ..lazy import LazyArchive

DICT, LIST, VALUE, TENSOR = "dcp.dict", "dcp.list", "dcp.value", "torch.Tensor"


class ArchiveOpener(Protocol):
    def open(self, file_path: Any, *, trusted: Any = None, unresolved: Any = "raise") -> Any: ...


def is_sharded(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, INDEX_NAME))


def open_sharded(directory: str, opener: ArchiveOpener, policy: ReadPolicy) -> ShardedCheckpoint:
    """The view of the checkpoint in `directory` (FormatError if it has no index)."""
    if not is_sharded(directory):
        raise FormatError(
            f"{directory!r} is a directory, not an archive, and holds no sharded checkpoint (no {INDEX_NAME}): "
            "a save killed before its index was written leaves none; pass a .zarc file or a checkpoint directory"
        )
    return ShardedCheckpoint(directory, opener, policy)


class ShardedCheckpoint(TreeBrowser):
    """A sharded checkpoint opened read-only; use it as a context manager."""

    format = "zarchive-dcp"

    def __init__(self, directory: str, opener: ArchiveOpener, policy: ReadPolicy) -> None:
        if policy.tensors != "torch":
            raise ValueError("a sharded checkpoint's tensors are read as torch tensors: open it with tensors='torch'")
        self.directory = directory
        self._opener = opener
        self._policy = policy
        self._shards: dict[str, LazyArchive] = {}
        self._owner: dict[int, tuple[LazyArchive, Any]] = {}  # id(node from a shard) -> (its shard, node)
        self._closed = False
        self._index_arc: LazyArchive = opener.open(os.path.join(directory, INDEX_NAME), trusted=[])
        try:
            self._doc = self._index_arc.load()  # plain JSON: a class named in it is refused (trusted=[])
            self.index: Index = parse(self._doc)
            for name, info in self.index.shards.items():  # every shard there, as big as the save wrote it
                path = os.path.join(directory, name)
                if not os.path.isfile(path):
                    raise MemberNotFoundError(
                        f"shard {name!r} named by the index is missing from {directory!r}: the checkpoint is incomplete",
                        member=name,
                    )  # fmt: skip
                if os.path.getsize(path) != info["size"]:
                    raise IntegrityError(
                        f"shard {name!r} has {os.path.getsize(path)} bytes, the index recorded {info['size']}: "
                        "it was replaced or damaged", member=name,
                    )  # fmt: skip
            self._root = self._build_tree()
        except BaseException:
            self._index_arc.close()
            raise

    def _build_tree(self) -> dict[str, Any]:
        root: dict[str, Any] = {"$type": DICT, "items": {}}
        for e in self.index.entries.values():
            node = root
            for part, below in zip(e.path[:-1], e.path[1:], strict=True):  # a list where the keys below are indices
                node = node["items"].setdefault(
                    str(part), {"$type": LIST if isinstance(below, int) else DICT, "items": {}}
                )
                if isinstance(below, int) != (node["$type"] == LIST):
                    node["$type"] = DICT  # indices and names mixed: a dict
            if isinstance(e, TensorEntry):
                chunks = [{"$ref": c.shard, "key": c.key, "offsets": list(c.offsets), "sizes": list(c.sizes)}
                          for c in e.chunks]  # fmt: skip
                leaf = {"$type": TENSOR, "dtype": e.dtype, "shape": list(e.shape), "fqn": e.fqn, "chunks": chunks}
            else:
                leaf = {"$type": VALUE, "$ref": e.shard, "key": e.key, "fqn": e.fqn}
            node["items"][str(e.path[-1])] = leaf
        return root

    # --- the OpenedArchive interface ---
    @property
    def manifest(self) -> Any:
        return self._doc

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self._index_arc.meta)

    @property
    def members(self) -> dict[str, dict[str, Any]]:
        """The index and the shards (files of the directory), with their sizes."""
        out = {}
        for name in (INDEX_NAME, *self.index.shards):
            size = os.path.getsize(os.path.join(self.directory, name))
            out[name] = {"codec": "none", "size": size, "stored_size": size}
        return out

    @property
    def policy(self) -> ReadPolicy:
        return self._policy

    @property
    def on_read(self) -> Callable[[str, int], None] | None:
        return None

    @on_read.setter
    def on_read(self, fn: Callable[[str, int], None] | None) -> None:
        pass  # progress is not reported for sharded checkpoints

    @property
    def closed(self) -> bool:
        return self._closed

    def member_size(self, name: str) -> int:
        if name not in self.members:
            raise MemberNotFoundError("no such file in the checkpoint", member=str(name)[:200])
        return self.members[name]["size"]

    def _root_node(self) -> Any:
        return self._root

    def children(self, node: Any) -> dict[str, Any] | None:
        owned = self._owner.get(id(node))
        if owned is not None:
            return self._adopt(owned[0], owned[0].children(node))
        if not isinstance(node, dict):
            return None
        if node.get("$type") in (DICT, LIST):
            return dict(node["items"])
        if node.get("$type") == VALUE:
            arc = self.shard(node["$ref"])
            return self._adopt(arc, arc.children(arc.node(join_path(["objects", node["key"]]))))
        return None

    def _adopt(self, arc: LazyArchive, kids: dict[str, Any] | None) -> dict[str, Any] | None:
        for kid in (kids or {}).values():
            if isinstance(kid, (dict, list)):
                self._owner[id(kid)] = (arc, kid)  # the node is kept alive, so its id stays its own
        return kids

    def describe(self, node: Any) -> str:
        owned = self._owner.get(id(node))
        if owned is not None:
            return owned[0].describe(node)
        tag = node.get("$type") if isinstance(node, dict) else None
        if tag in (DICT, LIST):
            return f"{'list' if tag == LIST else 'dict'}[{len(node['items'])}]"
        if tag == TENSOR:
            n = len(node["chunks"])
            return f"tensor {node['dtype']} {node['shape']} in {n} chunk{'s' if n != 1 else ''}"
        if tag == VALUE:
            arc = self.shard(node["$ref"])
            inner = arc.node(join_path(["objects", node["key"]]))
            return f"{_describe_value(arc, inner)} -> {node['$ref']}"
        raise FormatError(f"not a node of this checkpoint: {str(node)[:80]}")

    def summary(self, path: str = "") -> str:
        return self.describe(self.node(path))

    def model_tag(self, path: str = "") -> str | None:
        return None

    def is_tensor(self, node: Any) -> bool:
        owned = self._owner.get(id(node))
        if owned is not None:
            return owned[0].is_tensor(node)
        return isinstance(node, dict) and node.get("$type") == TENSOR

    def tensor_digests(self, objpath: str = "") -> dict[str, bytes]:
        """SHA-256 of each tensor at or below `objpath`, each assembled from its chunks alone."""
        self._check_open()
        return archive_digests(self, objpath)

    def weights_hash(self, objpath: str = "") -> str:
        """The weights hash of the checkpoint's tensors (spec/weights-hash.md): equal to the hash of
        the same state dict saved in one archive."""
        return combine(self.tensor_digests(objpath))

    def plan(self, path: str = "", *, root_class: type | None = None) -> Plan:
        raise FormatError("a sharded checkpoint has no single manifest to plan: read values with arc[path]")

    def audit(self, path: str = "") -> dict[str, list[str]]:
        """Every class and callable reading the non-tensor values under `path` would construct or
        call, by object path (see zarchive.audit_report)."""
        out: dict[str, list[str]] = AuditReport({})
        for where, e in self._entries_under(path):
            if isinstance(e, ObjectEntry):
                for tag, paths in self.shard(e.shard).audit(join_path(["objects", e.key])).items():
                    out.setdefault(tag, []).extend(join_path([*where, *split_path(p)[2:]]) for p in paths)
        return out

    # --- reading ---
    def shard(self, name: str) -> LazyArchive:
        """The shard archive `name`, opened on first use (its save id checked against the index)."""
        self._check_open()
        arc = self._shards.get(name)
        if arc is None:
            if name not in self.index.shards:
                raise MemberNotFoundError("the index lists no such shard", member=str(name)[:200])
            arc = self._opener.open(os.path.join(self.directory, name), **self._read_settings())
            try:
                head = arc.node("")
                ok = isinstance(head, dict) and arc.get("save_id") == self.index.save_id
            except ZArchiveError:
                ok = False
            if not ok:
                arc.close()
                raise FormatError(
                    f"shard {name!r} is not a shard of the save the index describes ({self.index.save_id!r})",
                    member=name,
                )  # fmt: skip
            self._shards[name] = arc
        return arc

    def _read_settings(self) -> dict[str, Any]:
        """The open's trusted= and unresolved=, for the values read from shards."""
        p = self._policy
        trusted = None if p.trusted is None else [*p.given.values(), *(t for t in p.trusted if t not in p.given)]
        return {"trusted": trusted, "unresolved": p.unresolved}

    def _entries_under(self, path: str) -> list[tuple[list[str], TensorEntry | ObjectEntry]]:
        parts = split_path(path)
        found = []
        for e in self.index.entries.values():
            where = [str(p) for p in e.path]
            if where[: len(parts)] == parts or parts[: len(where)] == where:
                found.append((where, e))
        return found

    def get(
        self, path: str = "", *, map_location: Any = None, dtype: Any = None, root_class: type | None = None
    ) -> Any:
        """The value at an object path: a tensor assembled from its chunks, a value from its shard,
        or a dict of everything below."""
        self._check_open()
        parts = split_path(path)
        node = self._root
        for i, part in enumerate(parts):
            if node["$type"] == VALUE:  # inside a non-tensor value: the shard reads the rest
                inner = join_path(["objects", node["key"], *parts[i:]])
                return self.shard(node["$ref"]).get(inner, map_location=map_location, dtype=dtype)
            found = node["items"].get(part, MISSING) if node["$type"] in (DICT, LIST) else MISSING
            if found is MISSING:
                raise MemberNotFoundError(f"no value {part!r} here", path=join_path(parts[:i]))
            node = found
        return self._load(node, map_location, dtype)

    def __getitem__(self, path: str) -> Any:
        return self.get(path)

    def _load(self, node: dict[str, Any], map_location: Any, dtype: Any) -> Any:
        tag = node["$type"]
        if tag == DICT:
            return {k: self._load(v, map_location, dtype) for k, v in node["items"].items()}
        if tag == LIST:
            items = node["items"]
            if sorted(items, key=int) != [str(i) for i in range(len(items))]:
                return {int(k): self._load(v, map_location, dtype) for k, v in items.items()}  # indices with gaps
            return [self._load(items[str(i)], map_location, dtype) for i in range(len(items))]
        if tag == VALUE:
            return self.shard(node["$ref"]).get(join_path(["objects", node["key"]]), map_location=map_location)
        entry = cast(TensorEntry, self.index.entries[node["fqn"]])
        from .assemble import assemble

        return assemble(entry, self.read_chunk, map_location=map_location, dtype=dtype)

    def read_chunk(self, entry: TensorEntry, chunk: Chunk) -> Any:
        """One chunk's tensor, read from its shard (only its bytes), checked against the index."""
        return self.shard(chunk.shard).get(self._check_chunk(entry, chunk))

    def read_chunks(self, wanted: list[tuple[TensorEntry, Chunk]]) -> dict[tuple[str, str], Any]:
        """The values stored for these chunks, by (shard, key), unchecked (see assemble.checked). A
        shard at least half of whose chunks are wanted is read with one plan (a rank loading what it
        saved reads all of its shard), otherwise chunk by chunk."""
        out: dict[tuple[str, str], Any] = {}
        by_shard: dict[str, set[str]] = {}
        for _, c in wanted:
            by_shard.setdefault(c.shard, set()).add(c.key)
        for shard, keys in by_shard.items():
            arc = self.shard(shard)
            stored = set(arc.keys("tensors"))
            missing = sorted(keys - stored)
            if missing:
                raise FormatError(
                    f"the index puts a chunk in shard {shard!r} under {missing[0]!r}, which it lacks", member=shard
                )
            if 2 * len(keys) >= len(stored):
                whole = arc.get("tensors")
                out.update(((shard, k), whole[k]) for k in keys)
            else:
                out.update(((shard, k), arc.get(join_path(["tensors", k]))) for k in keys)
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
        self.shard(chunk.shard).load_into(self._check_chunk(entry, chunk), out)

    def _check_chunk(self, entry: TensorEntry, chunk: Chunk) -> str:
        """The chunk's object path in its shard, where a tensor of the dtype and size the index says is."""
        arc = self.shard(chunk.shard)
        where = join_path(["tensors", chunk.key])
        try:
            node = arc.node(where)
        except MemberNotFoundError:
            raise FormatError(
                f"the index puts a chunk of {entry.fqn!r} in shard {chunk.shard!r} under {chunk.key!r}, which it lacks",
                member=chunk.shard,
            ) from None
        if not isinstance(node, dict) or node.get("dtype") != entry.dtype or node.get("shape") != list(chunk.sizes):
            raise FormatError(
                f"the chunk of {entry.fqn!r} at {list(chunk.offsets)} in shard {chunk.shard!r} is not a "
                f"{entry.dtype} tensor of shape {list(chunk.sizes)} as the index says", member=chunk.shard,
            )  # fmt: skip
        return where

    def load_node(self, node: Any, path: str = "", *, map_location: Any = None, dtype: Any = None) -> Any:
        owned = self._owner.get(id(node))
        if owned is not None:
            return owned[0].load_node(node, path, map_location=map_location, dtype=dtype)
        return self._load(node, map_location, dtype)

    def load(self, *, map_location: Any = None, dtype: Any = None, root_class: type | None = None) -> Any:
        """The whole state dict, nested by object path."""
        return self.get("", map_location=map_location, dtype=dtype)

    def verify(self) -> VerifyResult:
        """Checksums of the index and of every shard, and every chunk and value where the index says."""
        self._check_open()
        problems: list[tuple[str, str]] = [(f"{INDEX_NAME}:{m}", p) for m, p in self._index_arc.verify()]
        members = len(self._index_arc.members) + 1
        for name in self.index.shards:
            try:
                arc = self.shard(name)
            except ZArchiveError as e:
                problems.append((name, str(e)))
                continue
            result = arc.verify()
            members += result.members
            problems.extend((f"{name}:{m}", p) for m, p in result)
        for entry in self.index.entries.values():
            for shard in sorted({c.shard for c in entry.chunks}) if isinstance(entry, TensorEntry) else [entry.shard]:
                try:
                    if isinstance(entry, TensorEntry):
                        for c in entry.chunks:
                            if c.shard == shard:
                                self._check_chunk(entry, c)
                    else:
                        self.shard(shard).node(join_path(["objects", entry.key]))
                except ZArchiveError as err:
                    problems.append((shard, str(err)))
        return VerifyResult(problems, members=members)

    # --- life cycle ---
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for arc in self._shards.values():
            arc.close()
        self._shards.clear()
        self._owner.clear()
        self._index_arc.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the checkpoint is closed")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<zarchive sharded checkpoint {self.directory!r}: {len(self.index.entries)} keys in {len(self.index.shards)} shards>"


def _describe_value(arc: LazyArchive, node: Any) -> str:
    if isinstance(node, dict) and "$type" in node:
        return arc.describe(node)
    if isinstance(node, (dict, list)):
        return f"{type(node).__name__}[{len(node)}]"
    text = repr(node)
    return f"{type(node).__name__} {text if len(text) <= 80 else text[:77] + '...'}"
