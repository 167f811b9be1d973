"""The index of a sharded checkpoint: what it holds, checked before anything is read (no torch).

A sharded checkpoint is a directory of `.zarc` archives: one shard per rank and save
(`shard-<save id>-<rank>.zarc`) and `index.zarc`, written last, whose root is the JSON described in
spec/distributed.md: every state dict key (its DCP name and its object path), each tensor's dtype,
shape and chunks (where in the tensor, and in which shard under which key) and each non-tensor
value's shard and key. `parse` turns that JSON into an `Index`, refusing (FormatError, naming the
index member and the object path at fault) anything a reader could be misled by: a chunk outside its
tensor, chunks that overlap or leave a gap, a key or object path present twice, a shard that is
not a plain file name in the directory.
"""

from __future__ import annotations

import math
import os
import random
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import FormatError, VersionError
from ..nodes.arrays import TORCH_ITEMSIZE

INDEX_NAME = "index.zarc"
LAYOUT = "zarchive-dcp"
LAYOUT_VERSION = 1
SHARD_NAME = re.compile(r"shard-[0-9a-f]{8,64}-[0-9]{5,9}\.zarc")
MAX_DIMS = 64
MAX_INT = 2**53
MEMORY_FORMATS = ("contiguous_format", "channels_last", "channels_last_3d", "preserve_format")

PathPart = str | int


def shard_name(save_id: str, rank: int) -> str:
    return f"shard-{save_id}-{rank:05d}.zarc"


@dataclass(frozen=True)
class Chunk:
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    shard: str  # file name of the shard holding it
    key: str  # its key under "tensors" in that shard


@dataclass(frozen=True)
class TensorEntry:
    fqn: str
    path: tuple[PathPart, ...]
    dtype: str
    shape: tuple[int, ...]
    chunks: tuple[Chunk, ...]
    requires_grad: bool = False
    memory_format: str = "contiguous_format"
    pin_memory: bool = False

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * TORCH_ITEMSIZE[self.dtype]


@dataclass(frozen=True)
class ObjectEntry:
    fqn: str
    path: tuple[PathPart, ...]
    shard: str
    key: str  # its key under "objects" in that shard


@dataclass
class Index:
    save_id: str
    shards: dict[str, dict[str, int]]  # file name -> {"rank", "size"}
    entries: dict[str, TensorEntry | ObjectEntry] = field(default_factory=dict)  # by DCP name (fqn)

    def to_json(self) -> dict[str, Any]:
        files = list(self.shards)
        number = {f: i for i, f in enumerate(files)}
        tensors, objects = [], []
        for e in self.entries.values():
            if isinstance(e, TensorEntry):
                tensors.append({
                    "fqn": e.fqn, "path": list(e.path), "dtype": e.dtype, "shape": list(e.shape),
                    "requires_grad": e.requires_grad, "memory_format": e.memory_format, "pin_memory": e.pin_memory,
                    "chunks": [[number[c.shard], c.key, list(c.offsets), list(c.sizes)] for c in e.chunks],
                })  # fmt: skip
            else:
                objects.append({"fqn": e.fqn, "path": list(e.path), "shard": number[e.shard], "key": e.key})
        return {
            "layout": LAYOUT,
            "layout_version": LAYOUT_VERSION,
            "save_id": self.save_id,
            "shards": [{"file": f, **self.shards[f]} for f in files],
            "tensors": tensors,
            "objects": objects,
        }


def _fail(message: str, where: str) -> FormatError:
    return FormatError(f"{message}; the sharded checkpoint's index is damaged or was not written by zarchive",
                       path=where, member=INDEX_NAME)  # fmt: skip


def _int(value: Any, where: str, what: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_INT:
        raise _fail(f"{what} must be a non-negative int, not {str(value)[:40]!r}", where)
    return value


def _str(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 4096:
        raise _fail(f"{what} must be a non-empty string", where)
    return value


def _ints(value: Any, where: str, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > MAX_DIMS:
        raise _fail(f"{what} must be a list of at most {MAX_DIMS} ints", where)
    return tuple(_int(v, where, what) for v in value)


def _dict(value: Any, where: str, keys: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail("expected an object", where)
    missing = keys - value.keys()
    if missing:
        raise _fail(f"missing {sorted(missing)}", where)
    return value


def _path(value: Any, where: str) -> tuple[PathPart, ...]:
    if not isinstance(value, list) or not value or len(value) > 200:
        raise _fail("an entry's path must be a list of 1 to 200 keys", where)
    for part in value:
        if not (isinstance(part, str) or (type(part) is int and 0 <= part <= MAX_INT)):
            raise _fail(f"a path component must be a string or an index, not {str(part)[:40]!r}", where)
    return tuple(value)


def parse(doc: Any) -> Index:
    """The index, checked (FormatError or VersionError for anything a reader must not trust)."""
    doc = _dict(doc, "", {"layout", "layout_version", "save_id", "shards", "tensors", "objects"})
    if doc["layout"] != LAYOUT:
        raise _fail(f"layout is {str(doc['layout'])[:40]!r}, not {LAYOUT!r}", "layout")
    version = _int(doc["layout_version"], "layout_version", "layout_version")
    if version > LAYOUT_VERSION:
        raise VersionError(
            f"sharded checkpoint layout version {version} is newer than this zarchive reads ({LAYOUT_VERSION}): "
            "upgrade zarchive", member=INDEX_NAME,
        )  # fmt: skip
    save_id = _str(doc["save_id"], "save_id", "save_id")
    if not isinstance(doc["shards"], list):
        raise _fail("shards must be a list", "shards")
    files: list[str] = []
    shards: dict[str, dict[str, int]] = {}
    for i, s in enumerate(doc["shards"]):
        where = f"shards/{i}"
        s = _dict(s, where, {"file", "rank", "size"})
        name = _str(s["file"], where, "a shard's file")
        if not SHARD_NAME.fullmatch(name):
            raise _fail(f"shard file {name[:80]!r} is not a shard name (shard-<save id>-<rank>.zarc)", where)
        if name in shards:
            raise _fail(f"shard {name!r} is listed twice", where)
        shards[name] = {"rank": _int(s["rank"], where, "rank"), "size": _int(s["size"], where, "size")}
        files.append(name)
    index = Index(save_id, shards)
    tree = _PathTree()
    stored: dict[tuple[str, str], str] = {}  # (shard, key) -> the chunk using it, by its place in the index
    for kind in ("tensors", "objects"):
        if not isinstance(doc[kind], list):
            raise _fail(f"{kind} must be a list", kind)
        for i, raw in enumerate(doc[kind]):
            where = f"{kind}/{i}"
            entry = _tensor(raw, where, files) if kind == "tensors" else _object(raw, where, files)
            if entry.fqn in index.entries:
                raise _fail(f"key {entry.fqn[:200]!r} is present twice", where)
            tree.add(entry, where)
            if isinstance(entry, TensorEntry):
                for j, c in enumerate(entry.chunks):
                    first = stored.setdefault((c.shard, c.key), f"{where}/chunks/{j}")
                    if first != f"{where}/chunks/{j}":
                        raise _fail(
                            f"the chunk stored in shard {c.shard!r} under {c.key[:200]!r} is used twice (first at "
                            f"{first}): each stored chunk is one region of one tensor", f"{where}/chunks/{j}",
                        )  # fmt: skip
            index.entries[entry.fqn] = entry
    return index


class _PathTree:
    """The entries' object paths as a tree of their components, to refuse two entries at one path or
    one inside another (the tree would be ambiguous) in time linear in the paths' lengths."""

    def __init__(self) -> None:
        self.root: dict[str, Any] = {}
        self.leaf: dict[int, str] = {}  # id(node) -> the fqn of the entry ending there

    def add(self, entry: TensorEntry | ObjectEntry, where: str) -> None:
        node = self.root
        for part in entry.path:
            if id(node) in self.leaf:
                raise _fail(f"the value of {self.leaf[id(node)][:200]!r} would contain {entry.fqn[:200]!r}", where)
            node = node.setdefault(str(part), {})
        if id(node) in self.leaf:
            raise _fail(f"keys {self.leaf[id(node)][:200]!r} and {entry.fqn[:200]!r} have the same object path", where)
        if node:
            raise _fail(f"the value of {entry.fqn[:200]!r} would contain another entry's", where)
        self.leaf[id(node)] = entry.fqn


def _shard_of(value: Any, where: str, files: list[str]) -> str:
    if type(value) is not int or not 0 <= value < len(files):
        raise _fail(f"chunk or value in shard {str(value)[:40]!r}, which the index does not list", where)
    return files[value]


def _object(raw: Any, where: str, files: list[str]) -> ObjectEntry:
    raw = _dict(raw, where, {"fqn", "path", "shard", "key"})
    return ObjectEntry(
        _str(raw["fqn"], where, "fqn"), _path(raw["path"], where),
        _shard_of(raw["shard"], where, files), _str(raw["key"], where, "key"),
    )  # fmt: skip


def _tensor(raw: Any, where: str, files: list[str]) -> TensorEntry:
    raw = _dict(raw, where, {"fqn", "path", "dtype", "shape", "chunks"})
    dtype = raw["dtype"]
    if not isinstance(dtype, str) or dtype not in TORCH_ITEMSIZE:
        raise _fail(f"unknown tensor dtype {str(dtype)[:40]!r}", where)
    shape = _ints(raw["shape"], where, "shape")
    memory_format = raw.get("memory_format", "contiguous_format")
    if memory_format not in MEMORY_FORMATS:
        raise _fail(f"unknown memory format {str(memory_format)[:40]!r}", where)
    flags = [raw.get(k, False) for k in ("requires_grad", "pin_memory")]
    if not all(isinstance(f, bool) for f in flags):
        raise _fail("requires_grad and pin_memory must be true or false", where)
    if not isinstance(raw["chunks"], list) or (not raw["chunks"] and math.prod(shape) > 0):
        raise _fail("chunks must be a list (empty only for an empty tensor)", where)
    chunks = []
    for j, c in enumerate(raw["chunks"]):
        at = f"{where}/chunks/{j}"
        if not isinstance(c, list) or len(c) != 4:
            raise _fail("a chunk must be [shard, key, offsets, sizes]", at)
        offsets, sizes = _ints(c[2], at, "offsets"), _ints(c[3], at, "sizes")
        if len(offsets) != len(shape) or len(sizes) != len(shape):
            raise _fail(f"chunk offsets {list(offsets)} and sizes {list(sizes)} do not match shape {list(shape)}", at)
        if any(o + s > n for o, s, n in zip(offsets, sizes, shape, strict=True)):
            raise _fail(f"chunk at {list(offsets)} of size {list(sizes)} lies outside the tensor {list(shape)}", at)
        chunks.append(Chunk(offsets, sizes, _shard_of(c[0], at, files), _str(c[1], at, "key")))
    _check_tiling(chunks, shape, where)
    return TensorEntry(
        _str(raw["fqn"], where, "fqn"), _path(raw["path"], where), dtype, shape, tuple(chunks),
        requires_grad=flags[0], memory_format=memory_format, pin_memory=flags[1],
    )  # fmt: skip


def _check_tiling(chunks: list[Chunk], shape: tuple[int, ...], where: str) -> None:
    """The chunks cover the tensor exactly once, checked in time linear in the chunks (never chunk
    against chunk): their element counts add up to the tensor's, and their corners cancel out.

    Each chunk [a, b) (per dimension) is the product of its dimensions' intervals; the signed corner
    sum of its indicator function is the product over dimensions of (delta_a - delta_b), and the
    chunks tile the tensor exactly when these add up to the tensor's own (the corner sum of a function
    determines it, as a prefix sum does). Both sides are compared as polynomials in one variable per
    (dimension, coordinate), evaluated at random points modulo the prime 2**61 - 1: chunks that tile
    always pass; chunks that do not tile pass with probability under d / 2**61 for d dimensions (the
    points are drawn anew for every check, so no file can be made to pass)."""
    total = math.prod(shape)
    covered = sum(math.prod(c.sizes) for c in chunks)
    if covered > total:
        raise _fail(f"chunks overlap: they hold {covered} elements of the tensor's {total}", where)
    if covered != total:
        raise _fail(f"the chunks cover {covered} of the tensor's {total} elements", where)
    draw = random.Random(int.from_bytes(os.urandom(32), "little"))  # (seeded anew: no file can guess it)
    points: list[dict[int, int]] = [{} for _ in shape]

    def at(dim: int, coordinate: int) -> int:
        value = points[dim].get(coordinate)
        if value is None:
            value = points[dim][coordinate] = draw.randrange(_PRIME)
        return value

    def corners(offsets: tuple[int, ...], sizes: tuple[int, ...]) -> int:
        product = 1
        for dim, (o, s) in enumerate(zip(offsets, sizes, strict=True)):
            product = product * (at(dim, o + s) - at(dim, o)) % _PRIME
        return product

    whole = corners((0,) * len(shape), shape)
    if sum(corners(c.offsets, c.sizes) for c in chunks if math.prod(c.sizes) > 0) % _PRIME != whole:
        raise _fail("chunks overlap (and leave a gap of as many elements): every element must be in one chunk", where)


_PRIME = (1 << 61) - 1
