"""Recognising a foreign file by its bytes and reading its layout: what it holds (a tree of plain
values whose tensors and arrays are `TensorRef` / `ArrayRef` placeholders) and where their bytes are.

- torch.save (zip format, torch >= 1.6; any suffix): a zip with one `<archive>/data.pkl` member,
  read by the restricted pickle reader (foreign.restricted_pickle with foreign.torch_pickle's rules);
  storages are the `<archive>/data/<key>` members.
- .safetensors: an 8-byte header length, a JSON header whose entries tile the rest of the file.
- .npy: numpy's magic string and header (parsed by container.npy, never by numpy's pickle fallback).
- .npz: a zip whose members are all `.npy` files (numpy.savez / savez_compressed).
A torch.save file in the legacy format (before torch 1.6) and raw pickles are refused.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from ...container import npy
from ...container.budget import ReadBudget
from ...container.jsontext import loads_strict
from ...container.safetensors_layout import MAX_HEADER_BYTES, header_length, parse_header
from ...container.source import ByteSource
from ...errors import FormatError, RefusedPickleError, UnsafeArchiveError
from ...nodes.arrays import SAFETENSORS_CODES, TORCH_ITEMSIZE
from ..zanj.container import ZanjZip
from .reader import Region
from .restricted_pickle import read_pickle
from .torch_pickle import StorageRef, TensorRef, TorchRules

MAX_PICKLE_BYTES = 256 << 20
# What the manifest (foreign.archive.manifest_root) takes a value counted along every path: a node
# for each (measured: 165 bytes for a tuple of two shared values, 60-120 for others).
MANIFEST_NODE_BYTES = 192
_READ_CHUNK = 16 << 20
_ST_TORCH = {code: name for name, code in SAFETENSORS_CODES.items()}
_LEGACY_TORCH_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"
_PKL = re.compile(r"^([^/]+)/data\.pkl$")
NPY_MEMBER = "array"


@dataclass(frozen=True, eq=False)
class ArrayRef:
    """An .npy array not yet read: its member, numpy dtype text, shape and order."""

    member: str
    descr: str
    shape: tuple[int, ...]
    fortran: bool

    def children(self) -> tuple[()]:
        return ()


@dataclass
class ForeignLayout:
    kind: str  # "torch", "safetensors", "npy" or "npz"
    root: Any
    regions: dict[str, Region]
    meta: dict[str, Any] = field(default_factory=dict)
    zip: ZanjZip | None = None


def sniff(source: ByteSource) -> str | None:
    """The kind of foreign file the bytes are ("zip" for one to look inside), or None."""
    if source.size < 8:
        return None
    head = bytes(source.view(0, min(source.size, 16)))
    if head.startswith(npy.MAGIC):
        return "npy"
    if head.startswith(b"PK\x03\x04"):
        return "zip"
    if head.startswith(_LEGACY_TORCH_MAGIC):
        return "legacy_torch"
    if head[0] == 0x80 and len(head) > 2 and 2 <= head[1] <= 5:
        return "pickle"
    n = struct.unpack("<Q", head[:8])[0]
    if len(head) > 8 and head[8:9] == b"{" and 8 + n <= source.size and n <= MAX_HEADER_BYTES:
        return "safetensors"
    return None


def read_layout(source: ByteSource, *, max_member_bytes: int, budget: ReadBudget) -> ForeignLayout | None:
    """The layout of a foreign file, or None when the bytes are none of the kinds read here. What
    parsing its header or pickle builds is charged to `budget` (the open file's read budget)."""
    kind = sniff(source)
    if kind is None:
        return None
    if kind == "legacy_torch":
        raise RefusedPickleError(
            "a torch.save file in the legacy format (written before torch 1.6, or with "
            "_use_new_zipfile_serialization=False): it is one pickle stream, which zarchive never runs; load it "
            "with torch.load(weights_only=True) and save it again with torch.save (or zarchive.save)"
        )
    if kind == "pickle":
        raise RefusedPickleError(
            "a pickle file: zarchive never unpickles; if it holds tensors, load it with "
            "torch.load(weights_only=True) where you trust it and save it with zarchive.save"
        )
    if kind == "npy":
        return _npy_layout(source)
    if kind == "safetensors":
        return _safetensors_layout(source, budget)
    try:
        zip_ = ZanjZip(source, max_member_bytes=max_member_bytes, budget=budget)
    except Exception:  # noqa: BLE001 - zipfile raises many types: not a zip read here, the .zarc reader's error says why
        return None
    names = list(zip_.members)
    pkls = [n for n in names if _PKL.match(n)]
    if len(pkls) == 1:
        return _torch_layout(zip_, pkls[0], budget)
    if names and all(n.endswith(".npy") for n in names):
        return _npz_layout(zip_)
    return None


# --- .npy / .npz ---
def _npy_header(data: memoryview | bytes, total: int, member: str) -> tuple[str, tuple[int, ...], bool, int]:
    dtype, shape, fortran, start = npy.parse_header(data, total, member=member)
    return dtype.str, shape, fortran, start


def _npy_layout(source: ByteSource) -> ForeignLayout:
    head = source.view(0, min(source.size, 12 + npy.MAX_HEADER_BYTES))
    descr, shape, fortran, start = _npy_header(head, source.size, NPY_MEMBER)
    region = Region(source.size - start, offset=start)
    return ForeignLayout("npy", ArrayRef(NPY_MEMBER, descr, shape, fortran), {NPY_MEMBER: region})


def _data_offset(zip_: ZanjZip, name: str) -> int:
    """Where a zip member's data starts (after its local header, which ZanjZip checked)."""
    info = zip_.members[name]
    n, m = struct.unpack("<HH", bytes(zip_.source.view(info.header_offset + 26, 4)))
    return int(info.header_offset) + 30 + n + m


def _npz_layout(zip_: ZanjZip) -> ForeignLayout:
    regions: dict[str, Region] = {}
    root: dict[str, Any] = {}
    try:
        for name, info in zip_.members.items():
            size, stored = int(info.file_size), zip_.codec(name) == "none"
            if stored:
                at = _data_offset(zip_, name)
                head: bytes | memoryview = zip_.source.view(at, min(size, 12 + npy.MAX_HEADER_BYTES))
            else:
                head = _inflated_prefix(zip_, name, 12 + npy.MAX_HEADER_BYTES)
            descr, shape, fortran, start = _npy_header(head, size, name)
            if stored:
                regions[name] = Region(size - start, offset=at + start)
            else:
                regions[name] = Region(
                    size - start, zip_name=name, skip=start, codec=zip_.codec(name), stored_size=int(info.compress_size)
                )
            root[name[: -len(".npy")]] = ArrayRef(name, descr, shape, fortran)
    except BaseException:
        zip_.close()
        raise
    return ForeignLayout("npz", root, regions, zip=zip_)


def _inflated_prefix(zip_: ZanjZip, name: str, n: int) -> bytes:
    """The first `n` bytes of a deflated member (its .npy header), inflating no more than that: the
    rest is inflated when a read asks for it, after the plan counted it against the read's budget."""
    if zip_.codec(name) != "deflate":
        raise UnsafeArchiveError(
            f"an .npz member compressed with {zip_.codec(name)}: numpy writes stored or deflated members", member=name
        )
    info = zip_.members[name]
    at, left = _data_offset(zip_, name), int(info.compress_size)
    if at + left > zip_.source.size:
        raise FormatError("member data runs past the end of the file", member=name)
    inflate = zlib.decompressobj(-15)
    out = bytearray()
    while len(out) < n and left > 0 and not inflate.eof:
        chunk = bytes(zip_.source.view(at, min(left, 1 << 16)))
        at, left = at + len(chunk), left - len(chunk)
        try:
            out += inflate.decompress(inflate.unconsumed_tail + chunk, n - len(out))
        except zlib.error as e:
            raise FormatError(f"the member's deflate stream is damaged: {e}", member=name) from None
    return bytes(out[:n])


# --- .safetensors ---
def _safetensors_layout(source: ByteSource, budget: ReadBudget) -> ForeignLayout:
    return safetensors_layout(source, budget)


def safetensors_layout(source: ByteSource, budget: ReadBudget, *, label: str = "(safetensors header)") -> ForeignLayout:
    """The layout of a .safetensors file (`label`: what messages call its header)."""
    base = header_length(source.view(0, 8), source.size, member=label)
    head = source.view(0, base)
    budget.charge_json(head[8:], member=label)
    slots = parse_header(head, source.size, member=label)
    meta: dict[str, Any] = {}
    if b'"__metadata__"' in bytes(head[8:]):
        header = loads_strict(head[8:base], member=label)
        found = header.get("__metadata__") if isinstance(header, dict) else None
        if found is not None and not (isinstance(found, dict) and all(isinstance(v, str) for v in found.values())):
            raise FormatError("the header's __metadata__ must map strings to strings", member=label)
        meta = dict(found or {})
    regions: dict[str, Region] = {}
    root: dict[str, Any] = {}
    for key, slot in slots.items():
        dtype = _ST_TORCH.get(slot.dtype)
        if dtype is None:
            raise FormatError(f"safetensors dtype {slot.dtype!r} has no torch equivalent here", member=key)
        storage = StorageRef(key, dtype, "cpu", (slot.end - slot.begin) // TORCH_ITEMSIZE[dtype], users=1)
        stride = _contiguous(slot.shape)
        nbytes = slot.end - slot.begin
        regions[key] = Region(nbytes, offset=slot.begin)
        root[key] = TensorRef(storage, dtype, 0, slot.shape, stride, extent=(0, nbytes))
    return ForeignLayout("safetensors", root, regions, meta={"metadata": meta})


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    stride, acc = [], 1
    for n in reversed(shape):
        stride.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(stride))


# --- torch.save ---
def _torch_layout(zip_: ZanjZip, pkl: str, budget: ReadBudget) -> ForeignLayout:
    prefix = pkl[: -len("/data.pkl")]
    try:
        order = f"{prefix}/byteorder"
        if order in zip_.members:
            text = bytes(zip_.read(order, limit=64)).decode("ascii", "replace").strip()
            if text != "little":
                raise UnsafeArchiveError(
                    f"a torch.save file of byte order {text[:20]!r}: only 'little' is read", member=order
                )
        root, rules = _read_pickle_member(zip_, pkl, budget)
        regions: dict[str, Region] = {}
        for key, storage in rules.storages.items():
            name = f"{prefix}/data/{key}"
            info = zip_.members.get(name)
            if info is None:
                raise FormatError(f"the pickle names storage {key!r}, which the file does not have", member=name)
            if int(info.file_size) != storage.nbytes:
                raise FormatError(
                    f"storage {key!r} should hold {storage.nbytes:,} bytes, the member holds {info.file_size:,}",
                    member=name,
                )
            if zip_.codec(name) == "none":
                regions[name] = Region(storage.nbytes, offset=_data_offset(zip_, name), crc=int(info.CRC))
            else:
                regions[name] = Region(
                    storage.nbytes, zip_name=name, codec=zip_.codec(name), stored_size=int(info.compress_size)
                )
        version = f"{prefix}/version"
        meta: dict[str, Any] = {"archive": prefix}
        if version in zip_.members:
            meta["version"] = bytes(zip_.read(version, limit=64)).decode("ascii", "replace").strip()
    except BaseException:
        zip_.close()
        raise
    return ForeignLayout("torch", root, regions, meta=meta, zip=zip_)


def pickle_buffer_size(declared: int) -> int:
    """What holding a data.pkl of `declared` bytes takes while it is parsed: the bytearray it is read
    into, grown by appending (CPython over-allocates an eighth), and while it is read, a chunk of up
    to 16 MiB (ZanjZip.read's) and the inflater's output of it."""
    return declared + declared // 8 + 2 * min(declared, _READ_CHUNK)


def _read_pickle_member(zip_: ZanjZip, pkl: str, budget: ReadBudget) -> tuple[Any, TorchRules]:
    """The values of a torch.save file's data.pkl. Its bytes (inflated, if the zip deflated them) are
    checked against the read budget by the size the zip declares, before any is read (the read stops
    there); they are parsed in place, beside the values, which are charged as they are built; then the
    values stay charged, and every node a walk of them along every path makes (the manifest)."""
    declared = int(zip_.members[pkl].file_size)
    if declared > MAX_PICKLE_BYTES:
        raise UnsafeArchiveError(
            f"declares {declared:,} uncompressed bytes, over the limit of {MAX_PICKLE_BYTES:,} for a data.pkl",
            member=pkl,
        )
    held = pickle_buffer_size(declared)
    budget.fits(held, "reading the pickle (its size as the zip declares it)", member=pkl)
    data = zip_.read(pkl, limit=MAX_PICKLE_BYTES)  # (never past the declared size)
    rules = TorchRules(pkl)
    found = read_pickle(data, rules, member=pkl, max_bytes=max(0, budget.left - held))
    del data
    budget.charge(found.nbytes + MANIFEST_NODE_BYTES * found.visits, "unpickling its values", member=pkl)
    return found.value, rules


def storage_member(layout: ForeignLayout, t: TensorRef) -> str:
    """The member holding a tensor's bytes."""
    if layout.kind == "torch":
        return f"{layout.meta['archive']}/data/{t.storage.key}"
    return t.storage.key
