"""zarchive.convert: into .zarc from ZANJ, safetensors and torch.save files, and out to safetensors.
Every source file is written here by the real library (zanj, safetensors, torch.save)."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from zanj import ZANJ

import zarchive
from zarchive.errors import FormatError, RefusedPickleError, UnknownTypeError
from zarchive.formats.archive_to_safetensors import separate_shared
from zarchive.formats.convert_in import conversion_kind, convert, zarc_to_safetensors

# ZANJ (through muutils) converts tensors with np.array(tensor), which numpy 2 warns about
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")


def _tensors_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert sorted(a) == sorted(b)
    for k, want in b.items():
        assert a[k].dtype == want.dtype and a[k].shape == want.shape, k
        assert torch.equal(a[k], want), k


# --- which conversion ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "src,dst,kind",
    [
        ("a.zanj", "b.zarc", "zanj->zarc"),
        ("a.safetensors", "b.zarc", "safetensors->zarc"),
        ("a.pt", "b.zarc", "torch->zarc"),
        ("a.PTH", "b.zarc", "torch->zarc"),
        ("a.zarc", "b.zarc", "zarc->zarc"),
        ("a.zarc", "b.safetensors", "zarc->safetensors"),
    ],
    ids=["zanj", "safetensors", "pt", "pth-uppercase", "recompress", "to-safetensors"],
)
def test_conversion_kind(src: str, dst: str, kind: str) -> None:
    assert conversion_kind(src, dst) == kind


@pytest.mark.parametrize("src,dst", [("a.pt", "b.txt"), ("a.zanj", "b.safetensors"), ("a", "b.zarc"), ("a.npz", "b.zarc")],
                         ids=["txt-target", "zanj-to-safetensors", "no-extension", "npz"])  # fmt: skip
def test_unsupported_directions_are_refused(src: str, dst: str) -> None:
    with pytest.raises(ValueError, match="cannot convert"):
        conversion_kind(src, dst)


def test_missing_source_and_same_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        convert(tmp_path / "nope.pt", tmp_path / "x.zarc")
    target = tmp_path / "same.zarc"
    zarchive.save({"a": 1}, target)
    with pytest.raises(ValueError, match="same file"):
        convert(target, target)


# --- safetensors -> zarc -> safetensors ----------------------------------------------------------
def test_safetensors_into_zarc_keeps_names_dtypes_and_metadata(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    tensors = {
        "encoder/layer.0.weight": torch.randn(8, 4, generator=g),
        "encoder/layer.0.bias": torch.randn(8, generator=g).to(torch.bfloat16),
        "head.w": torch.randn(3, 3, generator=g).to(torch.float16),
        "mask": torch.tensor([True, False, True]),
        "ids": torch.arange(-5, 5, dtype=torch.int8),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.zeros(0, 3),
        "ünï": torch.ones(2, dtype=torch.uint8),
    }
    src = tmp_path / "model.safetensors"
    save_file(tensors, src, metadata={"source": "test"})
    report = convert(src, tmp_path / "model.zarc")
    assert report.count == len(tensors)
    back = zarchive.read(tmp_path / "model.zarc")
    _tensors_equal(back, tensors)
    with zarchive.open(tmp_path / "model.zarc") as arc:
        assert arc.meta["settings"]["custom"]["converted_from"]["metadata"] == {"source": "test"}
        assert "encoder~1layer.0.weight" in arc  # a '/' in a name is escaped in object paths
    out = tmp_path / "again.safetensors"
    zarc_to_safetensors(tmp_path / "model.zarc", out)
    _tensors_equal(load_file(out), tensors)


def test_zarc_to_safetensors_names_ties_views_and_arrays(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    model[1].weight = model[0].weight  # tied
    base = torch.arange(12.0).reshape(3, 4)
    obj = {
        "model": {"state_dict": model.state_dict()},
        "views": {"base": base, "row": base[1], "col": base[:, 2]},
        "arrays": {"f": np.linspace(0, 1, 300), "i": np.arange(5, dtype=np.int32), "text": np.array(["a", "b"])},
        "other": {"c128": torch.ones(2, dtype=torch.complex128), "note": "not a tensor"},
    }
    src = tmp_path / "run.zarc"
    zarchive.save(obj, src)
    dst = tmp_path / "run.safetensors"
    report = zarc_to_safetensors(src, dst)
    out = load_file(dst)
    assert "model/state_dict/0.weight" in out and "model/state_dict/1.weight" not in out
    with safe_open(dst, framework="pt") as f:
        aliases = json.loads(f.metadata()["zarchive.aliases"])
    assert aliases == {"model/state_dict/1.weight": "model/state_dict/0.weight"}
    assert torch.equal(out["model/state_dict/0.weight"], model[0].weight.detach())
    assert torch.equal(out["views/row"], base[1]) and torch.equal(out["views/col"], base[:, 2])
    assert torch.equal(out["arrays/f"], torch.from_numpy(obj["arrays"]["f"]))
    assert out["arrays/i"].dtype == torch.int32
    assert "arrays/text" not in out and "other/c128" not in out
    notes = " ".join(report.notes)
    assert "tied" in notes and "arrays/text" in notes and "other/c128" in notes


def test_tensors_sharing_memory_are_written_as_copies(tmp_path: Path) -> None:
    base = torch.arange(12.0)
    tensors = {"all": base, "tail": base[4:], "other": torch.ones(2)}
    notes: list[str] = []
    separate_shared(tensors, notes)
    assert tensors["tail"].untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    assert tensors["all"] is base and notes == ["1 tensor(s) are views of another's storage and were written as copies"]
    save_file(tensors, tmp_path / "ok.safetensors")  # safetensors itself refuses shared memory
    assert torch.equal(load_file(tmp_path / "ok.safetensors")["tail"], base[4:])


def test_names_that_would_collide_are_escaped(tmp_path: Path) -> None:
    src = tmp_path / "c.zarc"
    zarchive.save({"a/b": torch.ones(2), "a": {"b": torch.zeros(2)}}, src)
    report = zarc_to_safetensors(src, tmp_path / "c.safetensors")
    assert sorted(load_file(tmp_path / "c.safetensors")) == ["a/b", "a~1b"]
    assert any("escaped" in n for n in report.notes)


_names = st.text(alphabet="ab./_0", min_size=1, max_size=6)
_dtypes = st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8, torch.bool])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    spec=st.dictionaries(_names, st.tuples(_dtypes, st.lists(st.integers(0, 5), max_size=3)), min_size=1, max_size=5)
)
def test_generated_safetensors_round_trip(tmp_path: Path, spec: dict[str, Any]) -> None:
    tensors = {
        name: (torch.arange(int(np.prod(shape))) % 7).reshape(shape).to(dtype) for name, (dtype, shape) in spec.items()
    }
    save_file(tensors, tmp_path / "in.safetensors")
    convert(tmp_path / "in.safetensors", tmp_path / "mid.zarc", compress=False)
    (tmp_path / "out.safetensors").unlink(missing_ok=True)
    convert(tmp_path / "mid.zarc", tmp_path / "out.safetensors")
    _tensors_equal(load_file(tmp_path / "out.safetensors"), tensors)


def test_unreadable_safetensors_is_a_format_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\xff" * 8 + b"{}")
    with pytest.raises(FormatError, match="safetensors"):
        convert(bad, tmp_path / "x.zarc")


# --- torch.save -> zarc --------------------------------------------------------------------------
def test_torch_state_dict_into_zarc(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.BatchNorm1d(5))
    src = tmp_path / "sd.pt"
    torch.save(model.state_dict(), src)
    report = convert(src, tmp_path / "sd.zarc")
    back = zarchive.read(tmp_path / "sd.zarc")
    assert isinstance(back, OrderedDict) and report.count == len(back)
    _tensors_equal(dict(back), dict(model.state_dict()))
    fresh = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.BatchNorm1d(5))
    fresh.load_state_dict(back)


def test_torch_checkpoint_with_optimizer_state(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 2)
    # an optimizer's state_dict layout (int keys, tuples), built by hand: constructing a torch
    # optimizer imports torch._dynamo, which costs seconds
    optimizer = {
        "state": {
            i: {"step": torch.tensor(3.0), "exp_avg": torch.randn_like(p)} for i, p in enumerate(model.parameters())
        },
        "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 1]}],
    }
    ckpt = {"model": model.state_dict(), "optimizer": optimizer, "epoch": 3, "lrs": [0.1, 0.01]}
    torch.save(ckpt, tmp_path / "ckpt.pth")
    convert(tmp_path / "ckpt.pth", tmp_path / "ckpt.zarc", compress="none")
    back = zarchive.read(tmp_path / "ckpt.zarc")
    assert back["epoch"] == 3 and back["lrs"] == [0.1, 0.01]
    assert back["optimizer"]["param_groups"] == optimizer["param_groups"]
    assert torch.equal(back["optimizer"]["state"][1]["exp_avg"], optimizer["state"][1]["exp_avg"])
    _tensors_equal(dict(back["model"]), dict(model.state_dict()))
    with zarchive.open(tmp_path / "ckpt.zarc") as arc:
        assert all(e["codec"] == "none" for e in arc.members.values())


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (open, (self.marker, "w"))


def test_torch_file_needing_arbitrary_unpickling_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    torch.save({"weights": torch.ones(2), "evil": _Payload(str(marker))}, tmp_path / "evil.pt")
    with pytest.raises(RefusedPickleError, match="open"):
        convert(tmp_path / "evil.pt", tmp_path / "evil.zarc")
    assert not marker.exists() and not (tmp_path / "evil.zarc").exists()


def test_truncated_torch_file_is_a_format_error(tmp_path: Path) -> None:
    torch.save({"w": torch.ones(100)}, tmp_path / "ok.pt")
    (tmp_path / "cut.pt").write_bytes((tmp_path / "ok.pt").read_bytes()[:200])
    with pytest.raises(FormatError, match="truncated"):
        convert(tmp_path / "cut.pt", tmp_path / "x.zarc")


# --- zanj -> zarc --------------------------------------------------------------------------------
def test_zanj_into_zarc(tmp_path: Path) -> None:
    obj = {"w": np.arange(500.0), "t": torch.arange(300), "meta": {"name": "run", "lr": 0.1}, "log": list(range(300))}
    ZANJ().save(obj, str(tmp_path / "old.zanj"))
    convert(tmp_path / "old.zanj", tmp_path / "new.zarc")
    back = zarchive.read(tmp_path / "new.zarc")
    np.testing.assert_array_equal(back["w"], obj["w"])
    assert torch.equal(back["t"], obj["t"]) and back["meta"] == obj["meta"] and back["log"] == obj["log"]
    with zarchive.open(tmp_path / "new.zarc") as arc:
        assert arc.meta["settings"]["custom"]["converted_from"]["format"] == "zanj"


def test_zanj_with_classes_not_here(tmp_path: Path) -> None:
    ZANJ().save({"a": 1}, str(tmp_path / "old.zanj"))
    import zipfile

    with zipfile.ZipFile(tmp_path / "old.zanj") as zin, zipfile.ZipFile(tmp_path / "cls.zanj", "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename == "__zanj__.json":
                data = json.dumps({"cfg": {"__muutils_format__": "ZcNowhere(SerializableDataclass)", "x": 1}}).encode()
            zout.writestr(info.filename, data)
    with pytest.raises(UnknownTypeError, match="ZcNowhere"):
        convert(tmp_path / "cls.zanj", tmp_path / "a.zarc")
    convert(tmp_path / "cls.zanj", tmp_path / "b.zarc", unknown="dict")
    assert zarchive.read(tmp_path / "b.zarc")["cfg"]["x"] == 1


def test_recompress(tmp_path: Path) -> None:
    zarchive.save({"words": [f"w{i}" for i in range(400)]}, tmp_path / "a.zarc")
    convert(tmp_path / "a.zarc", tmp_path / "b.zarc", compress=False)
    with zarchive.open(tmp_path / "b.zarc") as arc:
        assert {e["codec"] for e in arc.members.values()} == {"none"}
        assert arc["words"][399] == "w399"
