"""Spec 5.4, storage identity: how tensors that share storage are written, and what a reader returns.

Writers: one entry per storage, named by the first tensor saved; one view of it -> its values, no
`view`; several views -> one `U8` entry of the whole storage and `view` in every node. Readers: nodes
naming one entry share memory within one read; a node that disagrees with its entry is an error.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from hostile.craft import pack, unpack

import zarchive
from zarchive.errors import ZArchiveError


def _manifest(path: str | Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as z:
        root: dict[str, Any] = json.loads(z.read("manifest.json"))["root"]
        return root


def _values() -> dict[str, Any]:
    p = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3))
    storage = torch.arange(8, dtype=torch.int64)
    strided = torch.arange(12, dtype=torch.int16).reshape(3, 4)
    return {
        "tied": {"p": p, "data": p.data, "again": p},  # one view: one entry, no 'view'
        "views": {"x": storage, "as_int32": storage.view(torch.int32)[1:], "tail": storage[2:], "x_again": storage},
        "alone": {"column": strided[:, 1]},  # a view alone on its storage: only its values are written
        "empty": {"a": torch.zeros(0), "b": torch.zeros(0)},
    }


@pytest.fixture(scope="module", params=[False, True], ids=["uncompressed", "zstd"])
def saved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    value = _values()
    path = tmp_path_factory.mktemp("storage") / "shared.zarc"
    zarchive.save(value, path, durable=False, compress=request.param)
    return path


def test_one_view_is_one_entry_of_values(saved: Path) -> None:
    tied = _manifest(saved)["tied"]
    assert {(n["$ref"].removesuffix(".zst"), n["key"]) for n in tied.values()} == {("tied.safetensors", "p")}
    assert not any("view" in n for n in tied.values())
    assert tied["p"].get("parameter") is True and "parameter" not in tied["data"]


def test_several_views_are_one_raw_entry_with_views(saved: Path) -> None:
    views = _manifest(saved)["views"]
    assert {n["key"] for n in views.values()} == {"x"}
    got = {k: (n["dtype"], n["shape"], n["view"]) for k, n in views.items()}
    assert got == {
        "x": ("int64", [8], {"storage_offset": 0, "stride": [1]}),
        "as_int32": ("int32", [15], {"storage_offset": 1, "stride": [1]}),  # counted in int32 elements
        "tail": ("int64", [6], {"storage_offset": 2, "stride": [1]}),
        "x_again": ("int64", [8], {"storage_offset": 0, "stride": [1]}),  # equal views get 'view' too
    }
    with zarchive.open(saved) as arc:
        assert arc.verify() == []
    with zipfile.ZipFile(saved) as z:
        data = z.read(views["x"]["$ref"])
    if not views["x"]["$ref"].endswith(".zst"):
        header = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])
        assert header["x"]["dtype"] == "U8" and header["x"]["shape"] == [64]  # the whole storage, in bytes


def test_a_view_alone_is_stored_as_its_values(saved: Path) -> None:
    node = _manifest(saved)["alone"]["column"]
    assert "view" not in node and node["shape"] == [3]
    column = zarchive.read(saved)["alone"]["column"]
    assert column.tolist() == [1, 5, 9] and column.is_contiguous()


def test_empty_tensors_share_nothing(saved: Path) -> None:
    empty = _manifest(saved)["empty"]
    assert empty["a"]["key"] != empty["b"]["key"]


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
def test_nodes_naming_one_entry_share_memory(saved: Path, lazy: bool) -> None:
    value = zarchive.read(saved, lazy=lazy)
    tied, views = value["tied"], value["views"]
    assert tied["p"] is tied["again"] and isinstance(tied["p"], torch.nn.Parameter)
    assert type(tied["data"]) is torch.Tensor and tied["data"].data_ptr() == tied["p"].data_ptr()
    assert views["x"] is views["x_again"]
    views["x"][3] = 1 << 33  # a write through one tensor shows through the views of the same entry
    assert views["tail"][1].item() == 1 << 33
    assert views["as_int32"][5:7].tolist() == [0, 2]  # the little-endian halves of 2**33
    assert views["tail"].untyped_storage().data_ptr() == views["as_int32"].untyped_storage().data_ptr()


def test_one_lazy_value_shares_memory_inside_it(saved: Path) -> None:
    with zarchive.open(saved) as arc:
        views = arc["views"]
        assert views["x"].untyped_storage().data_ptr() == views["tail"].untyped_storage().data_ptr()


def test_views_that_start_alike_keep_their_own_dtype_and_shape(tmp_path: Path) -> None:
    s = torch.arange(8.0)
    path = zarchive.save({"a": s, "half": s[:4], "bits": s.view(torch.int32)}, tmp_path / "v.zarc", durable=False)
    nodes = _manifest(path)
    assert nodes["a"]["view"] == nodes["half"]["view"] == nodes["bits"]["view"]  # offset 0, stride [1]
    with zarchive.open(path) as arc:  # one value at a time: right
        assert arc["half"].shape == (4,) and arc["bits"].dtype == torch.int32
    value = zarchive.read(path)  # all in one read
    assert value["half"].shape == (4,) and value["bits"].dtype == torch.int32
    assert torch.equal(value["bits"], s.view(torch.int32))


# --- a node that disagrees with its entry is an error ---


def _tampered(saved: Path, tmp_path: Path, change: Any) -> Path:
    parts = unpack(saved.read_bytes())
    change(parts.manifest["root"])
    out = tmp_path / "tampered.zarc"
    out.write_bytes(pack(parts))
    return out


TAMPERING: dict[str, Any] = {
    "other-dtype": lambda r: r["tied"]["data"].update(dtype="int32"),
    "other-shape": lambda r: r["tied"]["data"].update(shape=[3, 2]),
    "raw-dtype-wrong-size": lambda r: r["tied"]["data"].update(dtype="complex128"),
    "view-of-a-typed-entry": lambda r: r["tied"]["data"].update(view={"storage_offset": 0, "stride": [3, 1]}),
    "view-past-the-end": lambda r: r["views"]["tail"].update(view={"storage_offset": 3, "stride": [1]}),
    "view-negative-stride": lambda r: r["views"]["tail"].update(view={"storage_offset": 7, "stride": [-1]}),
    "view-stride-per-dimension": lambda r: r["views"]["tail"].update(view={"storage_offset": 0, "stride": [1, 1]}),
}


@pytest.mark.parametrize("name", list(TAMPERING), ids=list(TAMPERING))
def test_a_node_that_disagrees_with_its_entry_is_an_error(saved: Path, tmp_path: Path, name: str) -> None:
    path = _tampered(saved, tmp_path, TAMPERING[name])
    with pytest.raises(ZArchiveError):
        zarchive.read(path)
