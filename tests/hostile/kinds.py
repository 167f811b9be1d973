"""A small valid file of every input kind zarchive reads, written into a directory (test code only), and
the byte-level helpers the hostile cases of `foreign_craft` build on.

Kinds: `.zarc`, torch `.pt`, `.safetensors`, `.npy`, `.npz`, `.zanj`, a DCP checkpoint directory, a
model store folder, and a `.zarc` with exports (a real ONNX graph). Files are built at byte level
(pickle opcodes by hand, zips by hand, the ONNX graph with `onnx.helper`), except the DCP directory and
the store, which zarchive's own writers make (their layout is zarchive's). Every tensor is the same
state dict, so `weights_hash` must agree across kinds.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hostile.cases_exports import TS, TS_BYTES, entry
from hostile.cases_foreign import small, state_dict, tensor, torch_zip, uni
from hostile.craft import Parts, pack
from hostile.formats import npy_bytes, safetensors_bytes

KINDS = ("zarc", "pt", "safetensors", "npy", "npz", "zanj", "dcp", "hf", "store", "exports")
ONNX = "exports/model.onnx"

# the one state dict every kind holds: w (2 x 2 float32) and b (4 float32)
W = np.arange(4, dtype="<f4").reshape(2, 2)
B = np.array([0.5, -1.0, 2.0, 8.0], dtype="<f4")


# --- zips at byte level, honest in both headers (deflated members included) --------------------------
@dataclass(frozen=True)
class Member:
    name: str
    stored: bytes  # the bytes as stored (raw deflate for method 8)
    crc: int  # CRC-32 of the uncompressed bytes
    size: int  # uncompressed size
    method: int = 0


def stored(name: str, data: bytes) -> Member:
    return Member(name, data, zlib.crc32(data), len(data))


def deflated(name: str, data: bytes) -> Member:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return Member(name, c.compress(data) + c.flush(), zlib.crc32(data), len(data), 8)


def deflated_repeat(name: str, head: bytes, fill: bytes, count: int, tail: bytes = b"") -> Member:
    """A deflated member holding head + fill * count + tail, built without ever holding it: `fill` is
    compressed once between two full flushes (no reference to earlier bytes), and that piece repeated."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    piece = c.compress(fill) + c.flush(zlib.Z_FULL_FLUSH)
    last = c.compress(tail) + c.flush()
    crc = zlib.crc32(head)
    for _ in range(count):
        crc = zlib.crc32(fill, crc)
    crc = zlib.crc32(tail, crc)
    return Member(name, first + piece * count + last, crc, len(head) + len(fill) * count + len(tail), 8)


def zip_of(members: list[Member]) -> bytes:
    """A plain zip (no zip64: every member under 4 GiB) of `members`, in order."""
    out, cd = bytearray(), bytearray()
    for m in members:
        name = m.name.encode()
        fields = (20, 0, m.method, 0, 0x21, m.crc, len(m.stored), m.size, len(name))
        cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x314, *fields, 0, 0, 0, 0, 0o100644 << 16, len(out))
        cd += name
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, *fields, 0) + name + m.stored
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(cd), len(out), 0)
    return bytes(out + cd + end)


# --- torch.save files by hand ------------------------------------------------------------------------
def pt_state_dict(extra: bytes = b"") -> bytes:
    """data.pkl of the state dict {w, b} (storages "0" and "1"), plus `extra` key/value opcodes."""
    body = state_dict(("w", tensor("0", 4, (2, 2), (2, 1))), ("b", tensor("1", 4, (4,), (1,))))
    return body[:-2] + extra + body[-2:]  # before SETITEMS + STOP


def pt_file(pkl: bytes, *, deflate_pickle: bool = False, storages: dict[str, bytes] | None = None) -> bytes:
    if not deflate_pickle:
        return torch_zip(pkl, {"0": W.tobytes(), "1": B.tobytes()} if storages is None else storages)
    data = {"0": W.tobytes(), "1": B.tobytes()} if storages is None else storages
    members = [deflated("archive/data.pkl", pkl), stored("archive/byteorder", b"little")]
    members += [stored(f"archive/data/{k}", v) for k, v in data.items()]
    return zip_of([*members, stored("archive/version", b"3\n")])


# --- the valid base of each kind ---------------------------------------------------------------------
def zarc_parts() -> Parts:
    st, entries = safetensors_bytes([("w", "F32", [2, 2], W.tobytes()), ("b", "F32", [4], B.tobytes())])
    node = {"$type": "torch.Tensor", "$ref": "tensors.safetensors", "dtype": "float32", "device": "cpu"}
    root = {
        "model": {"w": {**node, "key": "w", "shape": [2, 2]}, "b": {**node, "key": "b", "shape": [4]}},
        "arr": {"$type": "numpy.ndarray", "$ref": "arr.npy", "dtype": "<f8", "shape": [5]},
        "name": "ok",
    }
    members = {"tensors.safetensors": st, "arr.npy": npy_bytes("<f8", (5,), np.arange(5.0).tobytes())}
    return Parts(
        {"format": "zarchive", "format_version": "1.0", "root": root}, members, {"tensors.safetensors": entries}
    )


def onnx_bytes(*, external: str | None = None) -> bytes:
    """A real ONNX graph: output = input + c (c an initializer of 4 floats); `external` stores c's data
    in that file outside the model (ONNX external data), as a hostile export would."""
    from onnx import TensorProto, helper

    c = helper.make_tensor("c", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    if external is not None:
        c.ClearField("float_data")
        c.data_location = TensorProto.EXTERNAL
        for k, v in {"location": external, "offset": "0", "length": "16"}.items():
            c.external_data.add(key=k, value=v)
    graph = helper.make_graph(
        [helper.make_node("Add", ["input", "c"], ["output"])],
        "g",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [4])],
        [c],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return bytes(model.SerializeToString())


def exports_zarc(onnx_data: bytes) -> bytes:
    p = zarc_parts()
    p.manifest["format_version"] = p.meta["format_version"] = "1.3"
    p.manifest["exports"] = {
        "$type": "exports",
        "onnx": entry(ONNX, onnx_data, opset=17),
        "torchscript": entry(TS, TS_BYTES),
    }
    p.members.update({ONNX: onnx_data, TS: TS_BYTES})
    return pack(p)


def zanj_file(root: Any, members: dict[str, bytes] | None = None, *, deflate: bool = True) -> bytes:
    """A ZANJ zip: `root` as __zanj__.json, a small __zanj_meta__.json, and `members`."""
    make = deflated if deflate else stored
    out = [make("__zanj__.json", json.dumps(root).encode())]
    out.append(make("__zanj_meta__.json", json.dumps({"zanj_cfg": {}, "sysinfo": {}, "timestamp": 0}).encode()))
    out += [make(n, d) for n, d in (members or {}).items()]
    return zip_of(out)


def zanj_valid_root() -> dict[str, Any]:
    return {
        "arr": {"__muutils_format__": "numpy.ndarray:external", "dtype": "float64", "shape": [5], "n_elements": 5,
                "$ref": "arr.npy"},
        "w": {"__muutils_format__": "numpy.ndarray:array_list_meta", "dtype": "float32", "shape": [2, 2],
              "n_elements": 4, "data": W.tolist()},
        "df": {"__muutils_format__": "pandas.DataFrame", "columns": ["x", "y"], "data": [{"x": 1, "y": "a"}]},
        "name": "ok",
    }  # fmt: skip


def write_dcp(path: Path, value: dict[str, Any] | None = None) -> Path:
    import warnings

    import torch
    import torch.distributed.checkpoint as dcp

    from zarchive.dcp import ZArchiveWriter

    state = (
        value
        if value is not None
        else {"model": {"w": torch.from_numpy(W.copy()), "b": torch.from_numpy(B.copy())}, "step": 3}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, storage_writer=ZArchiveWriter(path), no_dist=True)
    return path


def edit_dcp_index(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite a DCP directory's index.zarc with `edit` applied to its (plain JSON) document."""
    import zarchive

    doc = zarchive.read(path / "index.zarc")
    edit(doc)
    zarchive.save(doc, path / "index.zarc")


def write_hf(path: Path, weight_map: dict[str, str] | None = None) -> Path:
    """A Hugging Face sharded folder as save_pretrained writes it: two safetensors shards and
    model.safetensors.index.json (`weight_map`: the index's map instead of the true one)."""
    import json

    path.mkdir(parents=True, exist_ok=True)
    (path / "model-00001-of-00002.safetensors").write_bytes(safetensors_bytes([("w", "F32", [2, 2], W.tobytes())])[0])
    (path / "model-00002-of-00002.safetensors").write_bytes(safetensors_bytes([("b", "F32", [4], B.tobytes())])[0])
    true_map = {"w": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    index = {"metadata": {"total_size": 32}, "weight_map": weight_map if weight_map is not None else true_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    return path


def write_store(path: Path) -> Path:
    import torch

    import zarchive
    from hostile.models import Wide, WideConfig

    model = Wide(WideConfig(2))
    with torch.no_grad():
        model.fc.weight.copy_(torch.from_numpy(W.copy()))
    zarchive.ModelStore(path).save(model, "1.0.0")
    return path


def write_base(kind: str, d: Path) -> Path:
    """The valid base of `kind` under directory `d`; returns its path (a file, or a directory)."""
    d.mkdir(parents=True, exist_ok=True)
    files: dict[str, Callable[[], bytes]] = {
        "zarc": lambda: pack(zarc_parts()),
        "pt": lambda: pt_file(pt_state_dict()),
        "safetensors": lambda: safetensors_bytes([("w", "F32", [2, 2], W.tobytes()), ("b", "F32", [4], B.tobytes())])[
            0
        ],
        "npy": lambda: npy_bytes("<f4", (2, 2), W.tobytes()),
        "npz": lambda: zip_of(
            [
                stored("w.npy", npy_bytes("<f4", (2, 2), W.tobytes())),
                stored("b.npy", npy_bytes("<f4", (4,), B.tobytes())),
            ]
        ),
        "zanj": lambda: zanj_file(zanj_valid_root(), {"arr.npy": npy_bytes("<f8", (5,), np.arange(5.0).tobytes())}),
        "exports": lambda: exports_zarc(onnx_bytes()),
    }
    if kind == "dcp":
        return write_dcp(d / "ck")
    if kind == "store":
        return write_store(d / "models")
    if kind == "hf":
        return write_hf(d / "hf")
    suffix = {"exports": "zarc"}.get(kind, kind)
    path = d / f"base.{suffix}"
    path.write_bytes(files[kind]())
    return path


# a leaf object path of each kind's base, for `zarchive cat`
LEAF = {"zarc": "model/w", "pt": "w", "safetensors": "w", "npy": "", "npz": "w", "zanj": "w", "dcp": "model/w", "hf": "w",
        "exports": "model/w", "store": ""}  # fmt: skip

__all__ = ["KINDS", "LEAF", "Member", "deflated", "deflated_repeat", "pt_file", "pt_state_dict", "small", "stored",
           "uni", "write_base", "write_hf", "zip_of"]  # fmt: skip
