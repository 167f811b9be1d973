"""`zarchive.open(directory)` on a sharded checkpoint: one lazy view of the whole state dict.

The object tree comes from the index alone (spec/distributed.md): a tensor is assembled, when it is
read, from the chunks it needs, each read (and checked) from its shard without reading the rest of
the shard; a non-tensor value is read from its shard through the normal handler chain. Shards are
opened when first used (shards.Shards). `verify()` checks the index, every shard's checksums and that
every chunk and value the index names is in its shard with the dtype and size the index says.

Every read from the directory (`get`, `load`, `verify`, `audit`, browsing, `ZArchiveReader`) has one
budget, `budget` (limits.directory_budget): the index's and the shards' JSON are charged to it, and
the tensors a read assembles are checked against it, from the shapes the index declares, before
anything is allocated. The index and the shards are opened only if they are regular files.

Nodes: a dict of keys is `{"$type": "dcp.dict", "items": {...}}` (`"dcp.list"` where the keys are
list indices); a tensor is
`{"$type": "torch.Tensor", "dtype", "shape", "chunks": [{"$ref": shard, "key", "offsets", "sizes"}]}`;
a non-tensor value is `{"$type": "dcp.value", "$ref": shard, "key"}`, whose children are those of
its node in the shard.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from ..engine.audit_report import AuditReport
from ..engine.browse import TreeBrowser
from ..engine.objpath import join_path, split_path
from ..engine.plan import Plan, ReadPolicy
from ..engine.verify_result import VerifyResult
from ..errors import FormatError, IntegrityError, MemberNotFoundError, ZArchiveError
from ..nodes.base import MISSING
from ..weights_hash import archive_digests, combine
from .index import INDEX_NAME, Chunk, Index, ObjectEntry, TensorEntry, parse
from .limits import directory_budget, read_bytes
from .location import Location
from .shards import ArchiveOpener, Shards, open_zarc

if TYPE_CHECKING:
    from typing import Self

    from ..engine.lazy import LazyArchive

DICT, LIST, VALUE, TENSOR = "dcp.dict", "dcp.list", "dcp.value", "torch.Tensor"


def is_sharded(directory: str | Location) -> bool:
    """Whether `directory` holds a sharded checkpoint's index (of any file type: opening refuses one
    that is not a regular file)."""
    at = directory if isinstance(directory, Location) else Location(directory)
    return at.has(INDEX_NAME)


def open_sharded(directory: str | Location, opener: ArchiveOpener, policy: ReadPolicy) -> ShardedCheckpoint:
    """The view of the checkpoint in `directory` (FormatError if it has no index)."""
    if not is_sharded(directory):
        raise FormatError(
            f"{str(directory)!r} is a directory, not an archive, and holds no sharded checkpoint (no {INDEX_NAME}): "
            "a save killed before its index was written leaves none; pass a .zarc file or a checkpoint directory"
        )
    return ShardedCheckpoint(directory, opener, policy)


class ShardedCheckpoint(TreeBrowser):
    """A sharded checkpoint opened read-only; use it as a context manager. `directory`: a local
    directory, or a Location (a folder an fsspec URL names, with its storage options)."""

    format = "zarchive-dcp"

    def __init__(self, directory: str | Location, opener: ArchiveOpener, policy: ReadPolicy) -> None:
        if policy.tensors != "torch":
            raise ValueError("a sharded checkpoint's tensors are read as torch tensors: open it with tensors='torch'")
        self.location = directory if isinstance(directory, Location) else Location(directory)
        self.directory = str(self.location)
        self._opener = opener
        self._policy = policy
        self._owner: dict[int, tuple[LazyArchive, Any]] = {}  # id(node from a shard) -> (its shard, node)
        self._closed = False
        at = self.location  # (a remote folder: its files and sizes listed once, when first asked, fresh)
        index_path = at.check_file(INDEX_NAME, what="the index")
        self._index_arc: LazyArchive = open_zarc(opener, index_path, INDEX_NAME, trusted=[], **at.open_settings)
        try:
            self._doc = self._index_arc.load()  # plain JSON: a class named in it is refused (trusted=[])
            self.index: Index = parse(self._doc)
            for name, info in self.index.shards.items():  # every shard there, as big as the save wrote it
                size = at.size(name, what="shard")
                if size != info["size"]:
                    raise IntegrityError(
                        f"shard {name!r} has {size} bytes, the index recorded {info['size']}: "
                        "it was replaced or damaged", member=name,
                    )  # fmt: skip
            # one budget for every read from the directory, the index's JSON charged first
            self.budget = directory_budget(policy.max_read_bytes, self.index, at.size(INDEX_NAME))
            self.budget.charge(self._index_arc.budget.json_bytes, "parsing the index", member=INDEX_NAME)
            self.shards = Shards(at, opener, policy, self.index, self.budget)
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
            size = self.location.size(name)
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
        call, by object path (see zarchive.engine.audit_report)."""
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
        return self.shards.get(name)

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
        return self._read(node, path, map_location, dtype)

    def __getitem__(self, path: str) -> Any:
        return self.get(path)

    def _read(self, node: dict[str, Any], path: str, map_location: Any, dtype: Any) -> Any:
        """The value of a node of the index's tree, once the tensors it assembles fit the budget."""
        entries = [cast(TensorEntry, self.index.entries[n["fqn"]]) for n in _tensors_below(node)]
        self.budget.check_plan(read_bytes(entries, dtype), path=path)
        return self._load(node, map_location, dtype)

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
        self._check_open()
        return self.shards.read_chunk(entry, chunk)

    def read_chunks(self, wanted: list[tuple[TensorEntry, Chunk]]) -> dict[tuple[str, str], Any]:
        """The values stored for these chunks, by (shard, key) (see Shards.read_chunks)."""
        self._check_open()
        return self.shards.read_chunks(wanted)

    def load_chunk_into(self, entry: TensorEntry, chunk: Chunk, out: Any) -> None:
        """Read one stored chunk into `out` (see Shards.load_chunk_into)."""
        self._check_open()
        self.shards.load_chunk_into(entry, chunk, out)

    def load_node(self, node: Any, path: str = "", *, map_location: Any = None, dtype: Any = None) -> Any:
        owned = self._owner.get(id(node))
        if owned is not None:
            return owned[0].load_node(node, path, map_location=map_location, dtype=dtype)
        return self._read(node, path, map_location, dtype)

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
            failed: set[str] = set()  # (one problem per entry and shard)
            for shard, check in _checks(self, entry):
                if shard in failed:
                    continue
                try:
                    check()
                except ZArchiveError as err:
                    failed.add(shard)
                    problems.append((shard, str(err)))
        return VerifyResult(problems, members=members)

    # --- life cycle ---
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.shards.close()
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


def _tensors_below(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The tensor nodes at or below a node of the index's tree (its depth is that of the paths, at most
    200; values in shards are read by their shards)."""
    found, todo = [], [node]
    while todo:
        n = todo.pop()
        if n["$type"] == TENSOR:
            found.append(n)
        elif n["$type"] in (DICT, LIST):
            todo.extend(n["items"].values())
    return found


def _checks(view: ShardedCheckpoint, entry: TensorEntry | ObjectEntry) -> list[tuple[str, Callable[[], Any]]]:
    """What verify checks of one entry, by shard: each chunk, or the value, where the index says."""
    if isinstance(entry, ObjectEntry):
        return [(entry.shard, lambda: view.shard(entry.shard).node(join_path(["objects", entry.key])))]
    return [(c.shard, lambda c=c: view.shards.chunk_node(entry, c)) for c in entry.chunks]  # type: ignore[misc]


def _describe_value(arc: LazyArchive, node: Any) -> str:
    if isinstance(node, dict) and "$type" in node:
        return arc.describe(node)
    if isinstance(node, (dict, list)):
        return f"{type(node).__name__}[{len(node)}]"
    text = repr(node)
    return f"{type(node).__name__} {text if len(text) <= 80 else text[:77] + '...'}"
