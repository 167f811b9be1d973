"""The weights hash (spec/weights-hash.md): equal for equal weights whatever the layout, different
for any change of a byte, dtype, shape or name, and computed as the spec says."""

from __future__ import annotations

import hashlib
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import forkrun
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.formats.convert_in import convert
from zarchive.weights_hash import state_dict_hash

sys.path.insert(0, str(Path(__file__).parent))
from models_a import Config, Model

ROOT = Path(__file__).resolve().parent.parent


def _hash(path: Path, objpath: str = "", **open_kw: Any) -> str:
    with zarchive.open(path, **open_kw) as arc:
        return arc.weights_hash(objpath)


def _members(path: Path) -> dict[str, dict[str, Any]]:
    with zarchive.open(path) as arc:
        return arc.members


def _state(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {f"layer{i}.weight": torch.randn(3, 2, generator=g) for i in range(n)}


# --- the definition, computed independently from the spec's text ---
def _spec_hash(tensors: dict[str, tuple[str, list[int], bytes]]) -> str:
    h = hashlib.sha256(b"zarchive.weights.v1\x00")
    h.update(struct.pack("<Q", len(tensors)))
    for name in sorted(tensors, key=lambda n: n.encode("utf-8")):
        dtype, shape, data = tensors[name]
        t = hashlib.sha256(b"zarchive.tensor.v1\x00")
        t.update(struct.pack("<I", len(dtype)) + dtype.encode() + struct.pack("<I", len(shape)))
        t.update(b"".join(struct.pack("<Q", d) for d in shape))
        t.update(struct.pack("<Q", len(data)) + data)
        raw = name.encode("utf-8")
        h.update(struct.pack("<I", len(raw)) + raw + t.digest())
    return h.hexdigest()


def test_hash_is_the_spec_formula(tmp_path: Path) -> None:
    sd = {
        "b": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "a/x": torch.tensor([True, False]),
        "é": torch.tensor(7, dtype=torch.int64),
    }
    zarchive.save(sd, tmp_path / "w.zarc")
    expected = _spec_hash(
        {
            "b": ("float32", [2, 3], np.arange(6, dtype="<f4").tobytes()),
            "a~1x": ("bool", [2], b"\x01\x00"),  # a '/' in a key is escaped as in object paths
            "é": ("int64", [], struct.pack("<q", 7)),
        }
    )
    assert _hash(tmp_path / "w.zarc") == expected == state_dict_hash(sd)
    # pinned: a change of the definition must be a deliberate one (a new domain string)
    assert expected == _GOLDEN


_GOLDEN = "ea251ec13b5f6f4029ce97b8aa931c0eddabb93acc5ed2c217076ae61ee9149b"


# --- equal across layouts ---
def test_equal_across_nodes_tables_split_members_and_compression(tmp_path: Path) -> None:
    # 300 > 256 entries: split over several members and read as several tables; "z" is compressible
    data = {"w": _state(300), "z": {"zeros": torch.zeros(4096), "steps": torch.arange(4096) % 4}}
    zarchive.save(data, tmp_path / "table.zarc")
    params = {g: {k: torch.nn.Parameter(v.clone(), requires_grad=False) for k, v in d.items()} for g, d in data.items()}
    zarchive.save(params, tmp_path / "nodes.zarc", compress=False)  # parameters: one node each
    members = _members(tmp_path / "table.zarc")
    assert len([m for m in members if m.startswith("w")]) > 1
    assert any(e.get("codec") == "zstd" for e in members.values())
    assert not any(e.get("codec") == "zstd" for e in _members(tmp_path / "nodes.zarc").values())
    with zarchive.open(tmp_path / "table.zarc") as arc:
        assert isinstance(arc.node("w")["tensors"], list)  # a table per member
    with zarchive.open(tmp_path / "nodes.zarc") as arc:
        assert "tensors" not in arc.node("w")
    expected = state_dict_hash(data)
    assert _hash(tmp_path / "table.zarc") == _hash(tmp_path / "nodes.zarc") == expected
    assert _hash(tmp_path / "table.zarc", tensors="numpy") == expected  # without torch tensors
    assert _hash(tmp_path / "table.zarc", "w") == state_dict_hash(data["w"])


def test_equal_for_shared_storage_and_views(tmp_path: Path) -> None:
    base = torch.arange(24, dtype=torch.float32)
    shared = {"all": base, "head": base[:6].view(2, 3), "strided": base.view(4, 6)[:, 1], "tied": base}
    copies = {k: v.clone() for k, v in shared.items()}
    zarchive.save(shared, tmp_path / "shared.zarc")
    zarchive.save(copies, tmp_path / "copies.zarc")
    with zarchive.open(tmp_path / "shared.zarc") as arc:
        assert "view" in arc.node("strided")  # really stored as a view of one storage
    assert _hash(tmp_path / "shared.zarc") == _hash(tmp_path / "copies.zarc") == state_dict_hash(copies)


def test_model_hash_is_its_state_dicts_wherever_it_is(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Model(Config())
    sd = model.state_dict()
    zarchive.save(model, tmp_path / "model.zarc")
    zarchive.save({"run": {"model": model}, "step": 3}, tmp_path / "nested.zarc")
    zarchive.save(dict(sd), tmp_path / "sd.zarc")
    expected = state_dict_hash(sd)
    assert _hash(tmp_path / "model.zarc") == expected
    assert _hash(tmp_path / "model.zarc", "state_dict") == expected
    assert _hash(tmp_path / "nested.zarc", "run/model") == expected
    assert _hash(tmp_path / "sd.zarc") == expected
    # the model's class is never needed: a read that may not construct it still hashes it
    assert _hash(tmp_path / "model.zarc", trusted=[]) == expected


def test_equal_from_safetensors_and_torch_save_inputs(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    sd = _state(5) | {"bf": torch.randn(3, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)}
    save_file(sd, str(tmp_path / "w.safetensors"))
    torch.save(sd, tmp_path / "w.pt")
    convert(tmp_path / "w.safetensors", tmp_path / "from_st.zarc")
    convert(tmp_path / "w.pt", tmp_path / "from_pt.zarc")
    expected = state_dict_hash(sd)
    assert _hash(tmp_path / "from_st.zarc") == _hash(tmp_path / "from_pt.zarc") == expected


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.bool, torch.complex64, torch.float64]
)
def test_dtypes_round_trip(tmp_path: Path, dtype: torch.dtype) -> None:
    t = (torch.arange(12) % 3).to(dtype).reshape(3, 4)
    sd = {"t": t, "empty": torch.empty(0, 5, dtype=dtype), "scalar": t[1, 2].clone()}
    zarchive.save(sd, tmp_path / "d.zarc")
    assert _hash(tmp_path / "d.zarc") == state_dict_hash(sd)


@settings(max_examples=25, deadline=None)
@given(
    st.dictionaries(
        st.text(st.characters(codec="utf-8"), min_size=1, max_size=8).filter(lambda k: not k.startswith("$")),
        st.lists(st.floats(width=32, allow_nan=False), max_size=6),
        max_size=5,
    )
)
def test_hash_round_trips(tmp_path_factory: pytest.TempPathFactory, values: dict[str, list[float]]) -> None:
    sd = {k: torch.tensor(v, dtype=torch.float32) for k, v in values.items()}
    path = tmp_path_factory.mktemp("h") / "h.zarc"
    zarchive.save(sd, path)
    assert _hash(path) == state_dict_hash(sd)


# --- different for any change ---
def test_any_change_changes_the_hash(tmp_path: Path) -> None:
    sd = _state(4)
    base = state_dict_hash(sd)
    byte = {k: v.clone() for k, v in sd.items()}
    byte["layer2.weight"].view(torch.uint8).view(-1)[5] ^= 1  # one bit of one byte
    dtype = dict(sd) | {"layer2.weight": sd["layer2.weight"].view(torch.int32)}  # same bytes, other dtype
    shape = dict(sd) | {"layer2.weight": sd["layer2.weight"].reshape(2, 3)}  # same bytes, other shape
    name = {("layer9.weight" if k == "layer2.weight" else k): v for k, v in sd.items()}
    hashes = {base}
    for i, variant in enumerate((byte, dtype, shape, name)):
        path = tmp_path / f"v{i}.zarc"
        zarchive.save(variant, path)
        h = _hash(path)
        assert h == state_dict_hash(variant)
        hashes.add(h)
    assert len(hashes) == 5


def test_objpath_selects_and_renames(tmp_path: Path) -> None:
    sd = _state(2)
    zarchive.save({"a": sd, "b": {"inner": sd}}, tmp_path / "t.zarc")
    assert _hash(tmp_path / "t.zarc", "a") == _hash(tmp_path / "t.zarc", "b/inner") == state_dict_hash(sd)
    assert _hash(tmp_path / "t.zarc") != state_dict_hash(sd)  # names are relative to the object path
    with pytest.raises(zarchive.MemberNotFoundError):
        _hash(tmp_path / "t.zarc", "c")


# --- the command line ---
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return forkrun.cli(  # a process of its own, forked from a server that imported torch
        *args, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120
    )


def test_cli_hash(tmp_path: Path) -> None:
    sd = _state(3)
    zarchive.save({"m": sd, "n": 1}, tmp_path / "c.zarc")
    out = _cli("hash", str(tmp_path / "c.zarc"), "m")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == state_dict_hash(sd)
    whole = _cli("hash", str(tmp_path / "c.zarc"))
    assert whole.returncode == 0 and whole.stdout.strip() == _hash(tmp_path / "c.zarc")
    missing = _cli("hash", str(tmp_path / "c.zarc"), "nope")
    assert missing.returncode == 2 and "nope" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # zanj's own numpy 2 warning when it writes
def test_zanj_file_hashes_like_the_zarc(tmp_path: Path) -> None:
    from zanj import ZANJ

    sd = {"a": torch.randn(3, 4, generator=torch.Generator().manual_seed(2)), "b": torch.arange(5)}
    ZANJ().save({"w": sd}, str(tmp_path / "w.zanj"))
    zarchive.save({"w": sd}, tmp_path / "w.zarc")
    with zarchive.open(tmp_path / "w.zanj") as arc:
        assert arc.format == "zanj"
        assert arc.weights_hash("w") == _hash(tmp_path / "w.zarc", "w") == state_dict_hash(sd)


def test_one_thread_or_many_same_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import zarchive.weights_hash as wh

    sd = _state(40)
    zarchive.save(sd, tmp_path / "t.zarc")
    many = _hash(tmp_path / "t.zarc")
    monkeypatch.setattr(wh, "HASH_THREADS", 1)
    assert _hash(tmp_path / "t.zarc") == many == state_dict_hash(sd)
