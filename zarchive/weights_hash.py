"""The weights hash: one SHA-256 over the names, dtypes, shapes and bytes of a set of tensors, equal
for equal weights whatever the file layout (spec/weights-hash.md defines it byte for byte).

It is computed from what an opened archive hands out for each tensor (the public lazy fetch,
`arc.get(path)`), one tensor at a time, so it never rebuilds a model, never imports a model's class,
and is the same for every way the weights can be stored: one node per tensor or a tensor table,
split members, shared storages and views, compressed members, and files converted from
`.safetensors` or `torch.save`. `state_dict_digests` computes the same digests for tensors in
memory, so a model's hash is known before it is saved.

Imports torch and numpy only when a tensor is hashed (`import zarchive` must not import torch).
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from .container.thread_pools import worker_count
from .engine.objpath import escape, join_path, split_path
from .errors import FormatError

TENSOR_DOMAIN = b"zarchive.tensor.v1\x00"
WEIGHTS_DOMAIN = b"zarchive.weights.v1\x00"
MAX_DEPTH = 200  # as deep as a read goes (deeper levels are refused there)
HASH_THREADS = 8  # tensors hashed at once, at most (one per usable core)
HASH_PIECE = 4 << 20  # a view that is not contiguous is copied for hashing this much at a time


class TensorSource(Protocol):
    """What the hash needs of an opened archive: browsing, telling tensor nodes apart, fetching one."""

    def node(self, path: str = "") -> Any: ...
    def children(self, node: Any) -> dict[str, Any] | None: ...
    def is_tensor(self, node: Any) -> bool: ...
    def get(self, path: str = "") -> Any: ...
    def model_tag(self, path: str = "") -> str | None: ...


# --- one tensor ---
def _u32(n: int) -> bytes:
    return struct.pack("<I", n)


def _u64(n: int) -> bytes:
    return struct.pack("<Q", n)


def tensor_digest(value: Any) -> bytes:
    """SHA-256 of one tensor (torch, or numpy as a `tensors="numpy"` read gives it): its dtype name,
    shape and values (C order, little-endian). A contiguous tensor is hashed in place; any other view
    (a file's expanded or strided tensor: stride 0 repeats one element a billion times) is hashed in
    pieces of at most HASH_PIECE bytes, never copied whole."""
    dtype, shape, nbytes, pieces = _layout(value)
    h = hashlib.sha256(TENSOR_DOMAIN)
    name = dtype.encode("ascii")
    h.update(_u32(len(name)) + name + _u32(len(shape)) + b"".join(_u64(d) for d in shape))
    h.update(_u64(nbytes))
    for piece in pieces:
        h.update(piece)
    return h.digest()


def value_sha256(value: Any) -> str:
    """SHA-256 (hex) of a tensor's or numeric array's values alone: DATA of `tensor_digest`, the
    values in C order, little-endian, hashed in pieces (the class-free neutral form's `sha256`)."""
    _, _, _, pieces = _layout(value)
    h = hashlib.sha256()
    for piece in pieces:
        h.update(piece)
    return h.hexdigest()


def value_nbytes(value: Any) -> int:
    """The bytes a tensor's values take in C order (what hashing it reads), from its shape."""
    return int(math.prod(int(d) for d in value.shape)) * _itemsize(value)


def _itemsize(value: Any) -> int:
    size = getattr(value, "itemsize", None)  # numpy arrays, and torch tensors
    return int(size) if size is not None else int(value.element_size())


class _Views:
    """What the piece-wise walk needs of one array library: contiguity, and a piece's bytes."""

    def __init__(self, contiguous: Callable[[Any], bool], raw: Callable[[Any], Any]) -> None:
        self.contiguous = contiguous
        self.raw = raw  # a C-contiguous copy (or view) of a piece, as a flat uint8 buffer


def _pieces(x: Any, views: _Views) -> Iterator[Any]:
    """The values of `x` in C order as byte buffers of at most HASH_PIECE bytes each (a contiguous
    `x` as one view of itself). Walks blocks of the first dimension, and into one row where a row
    alone is bigger, with an explicit stack (ndim is small, but never recursion on file data)."""
    if views.contiguous(x) or x.ndim == 0 or value_nbytes(x) <= HASH_PIECE:
        yield views.raw(x)
        return
    stack: list[tuple[Any, int]] = [(x, 0)]
    while stack:
        block, at = stack.pop()
        rows = int(block.shape[0])
        if at >= rows:
            continue
        row = value_nbytes(block[0])
        if row == 0:
            continue
        if row <= HASH_PIECE or block.ndim == 1:
            k = max(1, HASH_PIECE // row)
            stack.append((block, at + k))
            yield views.raw(block[at : at + k])
        else:
            stack.append((block, at + 1))
            inner = block[at]
            if views.contiguous(inner):
                yield views.raw(inner)
            else:
                stack.append((inner, 0))


def _layout(value: Any) -> tuple[str, tuple[int, ...], int, Iterator[Any]]:
    """(dtype name, shape, bytes of the values, the values' bytes in pieces)."""
    import numpy as np

    if isinstance(value, np.ndarray):
        arr = value
        swap = arr.dtype.byteorder == ">"
        little = arr.dtype.newbyteorder("<")

        def np_raw(a: Any) -> Any:
            a = a.astype(little) if swap else a
            return np.ascontiguousarray(a).reshape(-1).view(np.uint8)

        views = _Views(lambda a: bool(a.flags.c_contiguous) and not swap, np_raw)
        return arr.dtype.name, tuple(int(d) for d in arr.shape), value_nbytes(arr), _pieces(arr, views)
    import torch

    if not isinstance(value, torch.Tensor):
        raise TypeError(f"not a tensor: {type(value).__name__}")
    t = value.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.resolve_conj().resolve_neg()

    def torch_raw(x: Any) -> Any:  # the values' bytes as stored (little-endian machines only)
        flat = x.reshape(-1)
        if flat.stride(0) != 1:  # (torch calls a tensor of one element contiguous whatever its stride)
            flat = flat.clone(memory_format=torch.contiguous_format)
        return flat.view(torch.uint8).numpy()

    views = _Views(lambda x: bool(x.is_contiguous()), torch_raw)
    shape = tuple(int(d) for d in t.shape)
    return str(t.dtype).removeprefix("torch."), shape, value_nbytes(t), _pieces(t, views)


# --- the set of tensors ---
def combine(digests: Mapping[str, bytes] | Iterable[tuple[str, bytes]]) -> str:
    """The weights hash (hex) of named tensor digests: SHA-256 over their count, then each name
    (UTF-8) and digest, in the order of the names' UTF-8 bytes."""
    items = list(digests.items()) if isinstance(digests, Mapping) else list(digests)
    items.sort(key=lambda item: (item[0].encode("utf-8"), item[1]))
    h = hashlib.sha256(WEIGHTS_DOMAIN)
    h.update(_u64(len(items)))
    for name, digest in items:
        raw = name.encode("utf-8")
        h.update(_u32(len(raw)) + raw + digest)
    return h.hexdigest()


def archive_digests(arc: TensorSource, objpath: str = "") -> dict[str, bytes]:
    """Name (object path below `objpath`, or below a model's `state_dict` when `objpath` holds a
    ConfiguredModel) -> digest, for every tensor there, each fetched through `arc.get`."""
    base = weights_root(arc, objpath)
    prefix = split_path(base)
    fetched = ((join_path(rel), arc.get(join_path([*prefix, *rel]))) for rel in tensor_paths(arc, base))
    return _digest_all(_within_budget(fetched, getattr(arc, "read_budget", None), prefix))


def _within_budget(named: Iterable[tuple[str, Any]], budget: Any, prefix: list[str]) -> Iterator[tuple[str, Any]]:
    """`named`, refused (UnsafeArchiveError) once the values hashed add up to more than the open
    file's read budget: a 1 KB file of expanded views (stride 0) names terabytes of values, and the
    hash reads every one of them (in bounded pieces, but in time in proportion to their size)."""
    total = 0
    for name, value in named:
        if budget is not None:
            total += value_nbytes(value)
            budget.fits(total, "hashing the tensors' values", path=join_path([*prefix, *split_path(name)]))
        yield name, value


def hash_workers() -> int:
    """The threads tensors are hashed on: one per core this process may run on, up to HASH_THREADS
    (1: hashed on the calling thread)."""
    return worker_count(HASH_THREADS)


def _digest_all(named: Iterable[tuple[str, Any]]) -> dict[str, bytes]:
    """name -> tensor_digest(value): the values are taken one at a time in this thread (fetching is
    not thread-safe) and hashed on up to HASH_THREADS threads (hashlib releases the GIL), with at most
    2 x HASH_THREADS fetched values waiting, so memory stays bounded when fetches copy (compressed
    members, numpy reads)."""
    workers = hash_workers()
    out: dict[str, bytes] = {}
    if workers == 1:
        for name, value in named:
            out[name] = tensor_digest(value)
        return out
    pending: deque[tuple[str, Future[bytes]]] = deque()
    with ThreadPoolExecutor(workers, thread_name_prefix="zarchive-hash") as pool:
        for name, value in named:
            pending.append((name, pool.submit(tensor_digest, value)))
            while len(pending) > 2 * workers:
                done, fut = pending.popleft()
                out[done] = fut.result()
        for done, fut in pending:
            out[done] = fut.result()
    return out


def weights_root(arc: TensorSource, objpath: str = "") -> str:
    """The object path whose tensors make a value's weights: a model's `state_dict`, else the value."""
    path = join_path(split_path(objpath))
    if arc.model_tag(path) is not None:
        kids = arc.children(arc.node(path)) or {}
        if "state_dict" in kids:
            return join_path([*split_path(path), "state_dict"])
    return path


def tensor_paths(arc: TensorSource, objpath: str = "") -> Iterator[list[str]]:
    """The object paths (as components below `objpath`) of every tensor node under it, depth first."""
    stack: list[tuple[Any, list[str]]] = [(arc.node(objpath), [])]
    while stack:
        node, rel = stack.pop()
        if len(rel) > MAX_DEPTH:
            raise FormatError("nested too deeply to hash", path=join_path([*split_path(objpath), *rel]))
        if isinstance(node, dict) and arc.is_tensor(node):
            yield rel
            continue
        kids = arc.children(node) if isinstance(node, (dict, list)) else None
        if kids:
            stack.extend((child, [*rel, key]) for key, child in reversed(list(kids.items())))


def weights_hash(arc: TensorSource, objpath: str = "") -> str:
    """The weights hash of the value at `objpath` (spec/weights-hash.md)."""
    return combine(archive_digests(arc, objpath))


# --- tensors in memory ---
def state_dict_digests(state: Mapping[str, Any]) -> dict[str, bytes]:
    """The digests of a state dict's tensors by name (a key escaped as an object-path component;
    tensors inside nested dicts, lists and tuples of extra state named by their object paths), as
    `archive_digests` finds them once the state dict is saved."""
    import torch

    found: list[tuple[str, Any]] = []
    stack: list[tuple[Any, list[str], int]] = [(state, [], 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, torch.Tensor):
            found.append(("/".join(escape(c) for c in path), value))
        elif depth <= MAX_DEPTH and isinstance(value, Mapping):
            stack.extend((v, [*path, str(k)], depth + 1) for k, v in value.items())
        elif depth <= MAX_DEPTH and isinstance(value, (list, tuple)):
            stack.extend((v, [*path, str(i)], depth + 1) for i, v in enumerate(value))
    return _digest_all(found)


def state_dict_hash(state: Mapping[str, Any]) -> str:
    """The weights hash of a state dict in memory (equal to the saved model's `arc.weights_hash()`)."""
    return combine(state_dict_digests(state))


__all__ = [
    "archive_digests",
    "combine",
    "hash_workers",
    "state_dict_digests",
    "state_dict_hash",
    "tensor_digest",
    "tensor_paths",
    "value_nbytes",
    "value_sha256",
    "weights_hash",
    "weights_root",
]
