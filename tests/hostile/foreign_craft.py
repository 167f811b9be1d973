"""Hostile inputs of every input kind, one per finding of issue 24 (and the four earlier findings it
lists), crafted into a directory at test time: small on disk, never checked in.

Each `Hostile` names its input kind, the entry points it applies to and what each must do
(`Outcome`): refused with a ZArchiveError subclass whose message matches a pattern, read within the
budget (success or any ZArchiveError, under the matrix's address-space and time limits, and under the
case's own peak-memory line where it has one), or listed by `audit`. tests/test_entry_matrix.py runs
them through every entry point, each in a forked child under those limits (tests/hostile/cells.py).

The big payloads are compressed at byte level without being built: deflate pieces repeated between
full flushes (kinds.deflated_repeat), zstd RLE blocks (formats.zstd_frame).
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hostile.cases_foreign import glob, state_dict, tensor, torch_zip, uni
from hostile.craft import Parts, pack
from hostile.formats import npy_bytes, safetensors_bytes, zstd_frame
from hostile.kinds import (
    B,
    Member,
    W,
    deflated,
    deflated_repeat,
    edit_dcp_index,
    exports_zarc,
    onnx_bytes,
    pt_file,
    pt_state_dict,
    stored,
    write_base,
    write_dcp,
    write_hf,
    zanj_file,
    zarc_parts,
    zip_of,
)


@dataclass(frozen=True)
class Outcome:
    """What one entry point must do with a file. error: "A|B" class names, "*" any ZArchiveError, None
    none; ok: success is fine; lists: success whose audit (or stdout) matches `match`."""

    error: str | None
    match: str = ""
    ok: bool = False
    lists: bool = False
    peak_mb: float | None = None  # the most memory (MB over the child's start) the cell may use

    def describe(self) -> str:
        if self.lists:
            return f"lists /{self.match}/"
        if self.error is None:
            return "works"
        what = "refused" if self.error == "*" else f"{self.error}"
        return f"{what} /{self.match}/" + (" or reads within budget" if self.ok else "")


WORKS = Outcome(None, ok=True)
BUDGET = Outcome("*", ok=True)  # reads within budget, or refused with any ZArchiveError


def refused(error: str, match: str = "", **kw: Any) -> Outcome:
    return Outcome(error, match, **kw)


def within(peak_mb: float) -> Outcome:
    return Outcome("*", ok=True, peak_mb=peak_mb)


def lists(match: str) -> Outcome:
    return Outcome(None, match, ok=True, lists=True)


SKIP = Outcome("skip")  # in Hostile.entries: the entry point does not apply to this case
# entry points that only look (list, describe, check CRCs, hash tensors): a damaged value that none of
# them builds may pass them; every entry point that builds values must refuse it
LOOKING = ("audit", "verify", "hash", "cli_ls", "cli_show", "cli_hash", "cli_verify", "cli_audit", "cli_extract")


def looking(outcome: Outcome = BUDGET, *, but: tuple[str, ...] = ()) -> dict[str, Outcome]:
    return {e: outcome for e in LOOKING if e not in but}


@dataclass(frozen=True)
class Hostile:
    name: str
    kind: str  # one of kinds.KINDS: decides which entry points apply
    build: Callable[[Path], Path]  # writes the input under a directory of its own, returns its path
    outcome: Outcome  # for every entry point of the kind not in `entries`
    finding: str  # what the finding was, as issue 24 reported it
    entries: dict[str, Outcome] = field(default_factory=dict)  # per entry point; "-" removes one
    setup: str | None = None  # a function of hostile.cells the child runs first
    seconds: float = 60.0  # the time limit of each cell
    only: tuple[str, ...] | None = None  # apply to these entry points only
    leaf: str = ""  # the object path `zarchive cat` prints


CASES: list[Hostile] = []
SMALL_PEAK = 160  # MB: what a read with max_read_bytes=100 MB (cells.SMALL_BUDGET) may use, with some slack
GIB = 1 << 30


def hostile(
    name: str, kind: str, outcome: Outcome, finding: str, **kw: Any
) -> Callable[[Callable[[Path], Path]], Callable[[Path], Path]]:
    def register(fn: Callable[[Path], Path]) -> Callable[[Path], Path]:
        CASES.append(Hostile(name, kind, fn, outcome, finding, **kw))
        return fn

    return register


def _file(d: Path, name: str, data: bytes) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    path = d / name
    path.write_bytes(data)
    return path


# --- restricted pickle (.pt) ---------------------------------------------------------------------------
@hostile("deep_tuple_key", "pt", refused("UnsafeArchiveError|FormatError", "nested"),
         "679 B .pt of deeply nested tuples used as a dict key: open() and audit die by SIGSEGV (hashed in C)")  # fmt: skip
def pt_deep_tuple_key(d: Path) -> Path:
    nested = b")" + b"\x85" * 1_000_000  # (((...),),) a million levels, each a TUPLE1
    pkl = b"\x80\x02}" + nested + b"K\x01s."  # {that tuple: 1}
    return _file(d, "deep.pt", pt_file(pkl, deflate_pickle=True))


def _doubling(levels: int, first_memo: int = 100) -> bytes:
    """A dict graph: level i holds level i - 1 twice (by memo); 2**levels values along every path."""
    out = bytearray(b"}r" + struct.pack("<I", first_memo))
    for i in range(1, levels):
        get = b"j" + struct.pack("<I", first_memo + i - 1)
        out += b"0}(" + uni("a") + get + uni("b") + get + b"ur" + struct.pack("<I", first_memo + i)
    return bytes(out)


@hostile("metadata_doubling", "pt", refused("UnsafeArchiveError|FormatError", "shared references|more than"),
         "721 B .pt whose state dict's _metadata is a doubling graph: 37 s and 1.3 GB", seconds=30, leaf="w")  # fmt: skip
def pt_metadata_doubling(d: Path) -> Path:
    items = uni("w") + tensor("0", 4, (2, 2), (2, 1)) + uni("b") + tensor("1", 4, (4,), (1,))
    meta = b"}" + uni("_metadata") + _doubling(40) + b"s"  # the state {"_metadata": graph}
    pkl = b"\x80\x02" + glob("collections", "OrderedDict") + b")R(" + items + b"u" + meta + b"b."
    return _file(d, "metadata.pt", pt_file(pkl))


STRING_CHARS = 243 << 20  # 255 M characters


@hostile("huge_string", "pt", within(1100),
         "260 KB .pt of one 255 M-character string (deflated data.pkl): 2.1 GB against a 1.03 GB budget",
         entries={"read_small_budget": refused("UnsafeArchiveError", "max_read_bytes|budget|over", peak_mb=SMALL_PEAK)},
         leaf="note")  # fmt: skip
def pt_huge_string(d: Path) -> Path:
    head = (
        b"\x80\x02}(" + uni("w") + tensor("0", 4, (2, 2), (2, 1)) + uni("note") + b"X" + struct.pack("<I", STRING_CHARS)
    )
    member = deflated_repeat("archive/data.pkl", head, b"a" * (1 << 20), STRING_CHARS >> 20, b"u.")
    members = [member, stored("archive/byteorder", b"little"), stored("archive/data/0", W.tobytes())]
    return _file(d, "string.pt", zip_of([*members, stored("archive/version", b"3\n")]))


def _laughs_list(levels: int) -> bytes:
    out = bytearray(b"\x80\x02]r" + struct.pack("<I", 0))
    for i in range(1, levels):
        get = b"j" + struct.pack("<I", i - 1)
        out += b"0](" + get + get + b"er" + struct.pack("<I", i)
    return bytes(out) + b"."


@hostile("value_cap", "pt", Outcome("*", ok=True),
         "639 B .pt inside the 5 M-value cap: 22-66 s and 0.7-0.9 GB (cost out of proportion to the size)",
         seconds=10)  # fmt: skip
def pt_value_cap(d: Path) -> Path:
    return _file(d, "cap.pt", torch_zip(_laughs_list(22), {}))  # 2**22 values counted along every path


@hostile(
    "zero_stride",
    "pt",
    BUDGET,
    "1.5 KB .pt holding a zero-stride expanded tensor: 1.25 GB over budget on read(dtype=), cat 3.3 GB, "
    "convert --max-bytes 100000 writes 537 MB",
    entries={
        "read_dtype": within(SMALL_PEAK),  # the cast converts the stored elements, keeps the view
        "read_small_budget": within(SMALL_PEAK),
        "cli_convert_small": BUDGET,
    },
    leaf="w",
)  # fmt: skip (written as storage + strides: tiny)
def pt_zero_stride(d: Path) -> Path:
    pkl = state_dict(("w", tensor("0", 4, (20000, 16384), (0, 0))))
    return _file(d, "expanded.pt", torch_zip(pkl, {"0": W.tobytes()}))


@hostile("torch_size_2_70", "pt", refused("FormatError|UnsafeArchiveError", "2\\*\\*|dimension|size|too large|at most"),
         "a torch.Size with a dimension of 2**70 reads back as a value whose repr() raises", leaf="size")  # fmt: skip
def pt_torch_size(d: Path) -> Path:
    huge = b"\x8a\x09" + (1 << 70).to_bytes(9, "little")  # LONG1
    size = glob("torch", "Size") + huge + b"\x85\x85R"  # torch.Size((2**70,))
    return _file(d, "size.pt", pt_file(pt_state_dict(uni("size") + size)))


@hostile("verify_inflates", "pt", BUDGET,
         "verify of a .pt holds each member whole to check its CRC (the 3.1 MB .npz peaked at 3.2 GB)",
         entries={"verify": within(300), "cli_verify": within(300)}, leaf="w")  # fmt: skip
def pt_verify_inflates(d: Path) -> Path:
    pkl = state_dict(("w", tensor("0", 1 << 27, (1 << 27,), (1,))))
    members = [stored("archive/data.pkl", pkl), stored("archive/byteorder", b"little")]
    members.append(deflated_repeat("archive/data/0", b"", bytes(1 << 20), 512))  # 512 MiB of zeros
    return _file(d, "inflates.pt", zip_of([*members, stored("archive/version", b"3\n")]))


# --- .npz -------------------------------------------------------------------------------------------------
@hostile("verify_inflates", "npz", BUDGET,
         "3.1 MB .npz of highly compressible members: zarchive verify peaks at 3.2 GB (each member inflated whole)",
         entries={"read": refused("UnsafeArchiveError", "max_read_bytes|budget|over"),
                  "verify": within(300), "cli_verify": within(300)}, leaf="a")  # fmt: skip
def npz_verify_inflates(d: Path) -> Path:
    head = npy_bytes("<f8", (1 << 26,), b"")
    one = deflated_repeat("a.npy", head, bytes(1 << 20), 512)  # 512 MiB of zeros after the header
    members = [one, *(Member(f"{n}.npy", one.stored, one.crc, one.size, 8) for n in "bc")]  # 1.5 GiB in all
    return _file(d, "inflates.npz", zip_of(members))


# --- .zanj ------------------------------------------------------------------------------------------------
@hostile("empty_frame", "zanj", refused("UnsafeArchiveError", "max_read_bytes|budget|over|rows"),
         "27.5 KB .zanj DataFrame of 12,000 empty rows x 12,000 columns: a 3.4 GB frame in 24 s",
         entries={"audit": BUDGET, "verify": WORKS, "cli_verify": WORKS, "cli_ls": BUDGET, "cli_show": BUDGET,
                  "cli_audit": BUDGET, "hash": BUDGET, "cli_hash": BUDGET, "cli_extract": BUDGET}, leaf="df")  # fmt: skip
def zanj_empty_frame(d: Path) -> Path:
    frame = {"__muutils_format__": "pandas.DataFrame", "columns": list(range(12_000)), "data": [{}] * 12_000}
    return _file(d, "frame.zanj", zanj_file({"df": frame, "name": "ok"}))


@hostile("verify_inflates", "zanj", BUDGET,
         "zarchive verify of a .zanj holds its members whole (earlier finding)",
         entries={"verify": within(300), "cli_verify": within(300)}, leaf="arr")  # fmt: skip
def zanj_verify_inflates(d: Path) -> Path:
    root = {"arr": {"__muutils_format__": "numpy.ndarray:external", "dtype": "float64", "shape": [1 << 26],
                    "n_elements": 1 << 26, "$ref": "arr.npy"}}  # fmt: skip
    member = deflated_repeat("arr.npy", npy_bytes("<f8", (1 << 26,), b""), bytes(1 << 20), 512)
    main = deflated("__zanj__.json", json.dumps(root).encode())
    meta = deflated("__zanj_meta__.json", b'{"zanj_cfg": {}, "sysinfo": {}, "timestamp": 0}')
    return _file(d, "inflates.zanj", zip_of([main, meta, member]))


# --- DCP checkpoint directories -------------------------------------------------------------------------
@hostile("many_chunks", "dcp", BUDGET,
         "7.5 KB index of 8,000 chunks: 68 s before any shard is opened (every chunk compared with every other)",
         seconds=20, leaf="model/b")  # fmt: skip
def dcp_many_chunks(d: Path) -> Path:
    n = 8_000  # every chunk at the same first offset: a sweep over the first dimension alone is quadratic
    path = write_dcp(d / "ck")

    def edit(doc: dict[str, Any]) -> None:
        t = next(t for t in doc["tensors"] if t["fqn"] == "model.b")
        t["shape"] = [1, n]
        t["chunks"] = [[0, f"model.b@0,{i}", [0, i], [1, 1]] for i in range(n)]

    edit_dcp_index(path, edit)
    return path


@hostile("chunk_reused", "dcp", refused("FormatError|UnsafeArchiveError", ""),
         "20 KB directory whose index names one stored chunk many times: a 2 GiB tensor, 3.3 GB; at 16 uses a "
         "raw RuntimeError",
         entries=looking(but=("hash", "cli_hash")), leaf="model/w")  # fmt: skip
def dcp_chunk_reused(d: Path) -> Path:
    import torch

    n = 1 << 18  # one stored chunk of 1 MiB (stored as is), named 64 times: a 64 MiB tensor
    path = write_dcp(d / "ck", {"model": {"w": torch.zeros(n)}, "step": 1})

    def edit(doc: dict[str, Any]) -> None:
        t = doc["tensors"][0]
        shard, key = t["chunks"][0][:2]
        t["shape"] = [64 * n]
        t["chunks"] = [[shard, key, [i * n], [n]] for i in range(64)]

    edit_dcp_index(path, edit)
    return path


# --- .zarc -------------------------------------------------------------------------------------------------
JSONL_DECLARED = 2_000_000_000


@hostile("jsonl_declares_gb", "zarc", refused("UnsafeArchiveError", "max_read_bytes", peak_mb=300),
         "283 KB .zarc whose .jsonl node list declares 3.2 GB: 3.2 GB resident before the refusal, even with "
         "max_read_bytes=50 MB (here 2 GB: under the cells' address-space limit, over the read's budget)",
         entries={**looking(within(300), but=("audit", "cli_audit")), "cli_extract": SKIP,
                  "read_small_budget": refused("UnsafeArchiveError", "max_read_bytes", peak_mb=300)})  # fmt: skip
def zarc_jsonl_declares_gb(d: Path) -> Path:
    first = json.dumps({"$type": "bytes", "$ref": "blob.bin", "nbytes": 4}).encode() + b"\n"
    rest = JSONL_DECLARED - len(first)
    frame = zstd_frame(first, rle=(0x20, rest))  # a node line, then 3.2 GB of spaces
    crc = zlib.crc32(first)
    chunk = b" " * (64 << 20)
    for _ in range(rest // len(chunk)):
        crc = zlib.crc32(chunk, crc)
    crc = zlib.crc32(chunk[: rest % len(chunk)], crc)
    p = Parts({"format": "zarchive", "format_version": "1.0", "root": {
        "$type": "list", "$ref": "l.jsonl.zst", "length": 1, "nbytes": JSONL_DECLARED, "items": "nodes"}},
        {"l.jsonl.zst": first, "blob.bin": b"abcd"})  # fmt: skip

    def meta(m: dict[str, Any]) -> None:
        m["members"]["l.jsonl.zst"].update(size=JSONL_DECLARED, content_crc32=f"{crc & 0xFFFFFFFF:08x}")

    return _file(d, "list.zarc", pack(p, stored={"l.jsonl.zst": frame}, meta_edit=meta))


@hostile("inline_scalar_2gib", "zarc", refused("UnsafeArchiveError|FormatError", ""),
         "a 2 GiB inline scalar (huge itemsize) passes the 1 GiB line during read (earlier finding)",
         entries=looking(), leaf="s")  # fmt: skip
def zarc_inline_scalar(d: Path) -> Path:
    root = {"s": {"$type": "numpy.scalar", "dtype": "|V2147483648", "base64": "AAAA"},
            "a": {"$type": "numpy.ndarray", "dtype": "|S2147483648", "shape": [], "data": "a"}}  # fmt: skip
    return _file(d, "scalar.zarc", pack(Parts({"format": "zarchive", "format_version": "1.0", "root": root}, {})))


@hostile("torch_size_2_70", "zarc", refused("FormatError|UnsafeArchiveError", ""),
         "a torch.Size with a dimension of 2**70 reads back as a value whose repr() raises (earlier finding)",
         entries=looking(), leaf="size")  # fmt: skip
def zarc_torch_size(d: Path) -> Path:
    root = {"size": {"$type": "torch.Size", "items": [2, 1 << 70]}}
    return _file(d, "size.zarc", pack(Parts({"format": "zarchive", "format_version": "1.0", "root": root}, {})))


@hostile("zero_stride", "zarc", BUDGET,
         "zero-stride views are materialised by cat and by convert .zarc to .zarc (earlier finding)",
         entries={"read_dtype": within(SMALL_PEAK), "cli_convert_small": BUDGET}, leaf="model/x")  # fmt: skip
def zarc_zero_stride(d: Path) -> Path:
    p = zarc_parts()
    p.manifest["root"]["model"]["x"] = {
        "$type": "torch.Tensor", "$ref": "base.safetensors", "key": "s", "dtype": "float32", "shape": [20000, 16384],
        "device": "cpu", "view": {"storage_offset": 0, "stride": [0, 0]}}  # fmt: skip
    p.members["base.safetensors"], p.entries["base.safetensors"] = safetensors_bytes([("s", "U8", [16], W.tobytes())])
    return _file(d, "expanded.zarc", pack(p))


@hostile("zanj_custom", "zarc", BUDGET,
         "a zanj.custom node (with zarchive.compat.zanj imported): audit() is empty, yet read(trusted=[]) runs "
         "the registered ZANJ loader", setup="register_zanj_loader",
         only=("read", "audit", "read_untrusted", "cli_audit"),
         entries={"audit": lists("zanj|hostile\\.loader"), "cli_audit": lists("zanj|hostile\\.loader"),
                  "read_untrusted": refused("UntrustedTypeError", "")})  # fmt: skip
def zarc_zanj_custom(d: Path) -> Path:
    value = {"__muutils_format__": "hostile.loader", "x": 1}
    root = {"obj": {"$type": "zanj.custom", "uid": "hostile.loader", "value": value}}
    return _file(d, "custom.zarc", pack(Parts({"format": "zarchive", "format_version": "1.0", "root": root}, {})))


# --- exports ----------------------------------------------------------------------------------------------
PLANTED = "planted-credentials.bin"


@hostile("onnx_external_data", "exports", BUDGET,
         "1.5 KB archive whose ONNX graph names external data: verify() passes, audit() is empty, "
         "onnx_session() reads a file from the working directory into the model's output",
         entries={"onnx_session": refused("FormatError|UnsafeArchiveError", "external"),
                  "audit": lists("onnx|export"), "cli_audit": lists("onnx|export")}, leaf="model/w")  # fmt: skip
def exports_onnx_external(d: Path) -> Path:
    _file(d, PLANTED, struct.pack("<4f", 1e6, 2e6, 3e6, 4e6))  # the "credentials" in the reader's cwd
    return _file(d, "external.zarc", exports_zarc(onnx_bytes(external=PLANTED)))


# --- model store --------------------------------------------------------------------------------------------
@hostile("fifo_version", "store", BUDGET,
         "a FIFO named like a version (1.0.1.zarc) in the store folder: store ls and versions() block forever",
         seconds=20)  # fmt: skip
def store_fifo(d: Path) -> Path:
    path = write_base("store", d)
    os.mkfifo(path / "1.0.1.zarc")
    return path


# --- Hugging Face sharded folders ------------------------------------------------------------------------------
@hostile("index_traversal", "hf", refused("UnsafeArchiveError", "not a file name in its folder"),
         "an index naming a shard outside its folder (../secret.safetensors)")  # fmt: skip
def hf_index_traversal(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "secret.safetensors").write_bytes(safetensors_bytes([("w", "F32", [2, 2], W.tobytes())])[0])
    return write_hf(d / "hf", {"w": "../secret.safetensors", "b": "model-00002-of-00002.safetensors"})


@hostile("fifo_shard", "hf", refused("NotARegularFileError|FormatError", "not a regular file"),
         "a FIFO named like a shard: opening it for reading would block until a writer appears", seconds=20)  # fmt: skip
def hf_fifo_shard(d: Path) -> Path:
    path = write_hf(d / "hf")
    (path / "model-00002-of-00002.safetensors").unlink()
    os.mkfifo(path / "model-00002-of-00002.safetensors")
    return path


# --- weights hash: tampered twins of the bases (tests/test_entry_matrix.py compares hashes) ---------------
def tampered(kind: str, d: Path) -> Path:
    """The base of `kind` with one byte of tensor data changed (w[0, 0] = 1.0 instead of 0.0)."""
    w = W.copy()
    w[0, 0] = 1.0
    if kind == "pt":
        return _file(d, "tampered.pt", pt_file(pt_state_dict(), storages={"0": w.tobytes(), "1": B.tobytes()}))
    if kind == "safetensors":
        data = safetensors_bytes([("w", "F32", [2, 2], w.tobytes()), ("b", "F32", [4], B.tobytes())])[0]
        return _file(d, "tampered.safetensors", data)
    raise ValueError(kind)


def by_id() -> dict[str, Hostile]:
    return {f"{c.kind}-{c.name}": c for c in CASES}


__all__ = ["BUDGET", "CASES", "WORKS", "Hostile", "Outcome", "by_id", "lists", "refused", "tampered", "within"]
