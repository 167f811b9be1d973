"""Reading ZANJ files with zarchive: every file here is written by the real `zanj` package during the
test run, then read back with `zarchive.read` / `zarchive.open` (which recognise ZANJ by content).
Hostile variants are made by editing those files; each must fail with a ZArchiveError subclass and
must never execute anything or unpickle anything."""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from muutils.json_serialize import SerializableDataclass, json_serialize, serializable_dataclass, serializable_field
from zanj import ZANJ
from zanj.torchutil import ConfiguredModel as ZanjConfiguredModel
from zanj.torchutil import set_config_class as zanj_set_config_class

import zarchive
from zarchive.engine.typeref import class_tag
from zarchive.errors import (
    ConfigMismatchError,
    FormatError,
    IntegrityError,
    MemberNotFoundError,
    UnknownTypeError,
    UnsafeArchiveError,
    UntrustedTypeError,
    ZArchiveError,
)
from zarchive.formats.zanj import ZanjArchive, is_zanj_file, open_zanj
from zarchive.torchutil import ConfiguredModel, set_config_class

# ZANJ (through muutils) converts tensors with np.array(tensor), which numpy 2 warns about
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")


# --- classes on both sides -----------------------------------------------------------------------
@serializable_dataclass
class ZcInner(SerializableDataclass):
    k: int = serializable_field(default=1)
    tag: str = serializable_field(default="in")


@serializable_dataclass
class ZcOuter(SerializableDataclass):
    name: str = serializable_field(default="outer")
    inner: ZcInner = serializable_field(default_factory=ZcInner)
    sizes: tuple = serializable_field(default=(2, 3))
    weights: list = serializable_field(default_factory=lambda: [0.5, 1.5])


@serializable_dataclass
class ZcNetCfg(SerializableDataclass):
    d_in: int = serializable_field(default=4)
    d_hidden: int = serializable_field(default=80)


def _make_zanj_net(name: str = "ZcNet", cfg_cls: type = ZcNetCfg) -> type:
    """The model class as it was written for ZANJ (zanj.torchutil.ConfiguredModel)."""

    @zanj_set_config_class(cfg_cls)
    class Net(ZanjConfiguredModel):
        def __init__(self, cfg: Any) -> None:
            super().__init__(cfg)
            self.fc1 = torch.nn.Linear(cfg.d_in, cfg.d_hidden)  # 320 weights: an external .npy in ZANJ
            self.fc2 = torch.nn.Linear(cfg.d_hidden, 2)
            self.register_buffer("steps", torch.tensor(7))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc2(torch.relu(self.fc1(x)))

    Net.__name__ = Net.__qualname__ = name
    return Net


@set_config_class(ZcNetCfg)
class ZcNet(ConfiguredModel[ZcNetCfg]):
    """The same model ported to zarchive: same class name, same config class."""

    def __init__(self, cfg: ZcNetCfg) -> None:
        super().__init__(cfg)
        self.fc1 = torch.nn.Linear(cfg.d_in, cfg.d_hidden)
        self.fc2 = torch.nn.Linear(cfg.d_hidden, 2)
        self.register_buffer("steps", torch.tensor(0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


@serializable_dataclass
class ZcOtherCfg(SerializableDataclass):
    d_in: int = serializable_field(default=4)
    d_hidden: int = serializable_field(default=80)


@set_config_class(ZcOtherCfg)
class ZcNetOtherConfig(ConfiguredModel[ZcOtherCfg]):
    def __init__(self, cfg: ZcOtherCfg) -> None:
        super().__init__(cfg)


ZanjNet = _make_zanj_net()
ZanjOnlyNet = _make_zanj_net("ZcZanjOnlyNet")
ZanjNetOtherConfig = _make_zanj_net("ZcNetOtherConfig")


# --- helpers -------------------------------------------------------------------------------------
def write_zanj(tmp_path: Path, obj: Any, name: str = "x.zanj", **zanj_kwargs: Any) -> Path:
    path = tmp_path / name
    ZANJ(**zanj_kwargs).save(obj, str(path))
    assert path.exists()
    return path


def assert_same(a: Any, b: Any, where: str = "") -> None:
    """Structural equality with arrays, tensors and NaN handled."""
    if isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray), where
        assert a.dtype == b.dtype and a.shape == b.shape, where
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b) or torch.allclose(a, b, equal_nan=True, rtol=0, atol=0), where
    elif isinstance(b, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b, check_dtype=False)
    elif isinstance(b, dict):
        assert isinstance(a, dict) and list(a) == list(b), where
        for k in b:
            assert_same(a[k], b[k], f"{where}/{k}")
    elif isinstance(b, (list, tuple)):
        assert isinstance(a, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}/{i}")
    elif isinstance(b, float) and math.isnan(b):
        assert isinstance(a, float) and math.isnan(a), where
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"


def rewrite(
    src: Path,
    dst: Path,
    *,
    main: Any = None,
    replace: dict[str, bytes] | None = None,
    add: dict[str, bytes] | None = None,
) -> Path:
    """A copy of a ZANJ zip with its JSON tree or members changed (what an attacker can do)."""
    replace, add = replace or {}, add or {}
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename == "__zanj__.json" and main is not None:
                data = main if isinstance(main, bytes) else json.dumps(main).encode()
            data = replace.get(info.filename, data)
            zout.writestr(info.filename, data)
        for name, data in add.items():
            zout.writestr(zipfile.ZipInfo(name), data)
    return dst


def main_json(path: Path) -> Any:
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("__zanj__.json"))


# --- plain values --------------------------------------------------------------------------------
VALUES = {
    "json": {"i": 1, "big": 2**62, "f": -0.25, "s": "héllo", "b": True, "n": None, "nested": {"l": [1, "a", None]}},
    "special-floats": {"nan": float("nan"), "inf": float("inf"), "ninf": float("-inf")},
    "inline-arrays": {
        "f32": np.arange(6, dtype=np.float32).reshape(2, 3),
        "i8": np.array([-1, 2, -3], dtype=np.int8),
        "u16": np.array([1, 65535], dtype=np.uint16),
        "b": np.array([True, False]),
        "f16": np.array([0.5, np.nan], dtype=np.float16),
        "scalar": np.array(3.5),
        "text": np.array(["ab", "c"]),
    },
    "external-arrays": {
        "f64": np.linspace(-1, 1, 300).reshape(3, 100),
        "i64": np.arange(1000, dtype=np.int64).reshape(10, 10, 10),
        "bool": np.arange(512) % 3 == 0,
        "u8": np.arange(256, dtype=np.uint8),
        "text": np.array([f"s{i}" for i in range(300)]),
        "nested": {"deep": {"x": np.full((20, 20), np.nan, dtype=np.float32)}},
    },
    "tensors": {
        "small": torch.tensor([1.5, -2.0], dtype=torch.float64),
        "ints": torch.arange(5, dtype=torch.int32),
        "half": torch.tensor([0.5, 1.0], dtype=torch.float16),
        "big": torch.randn(30, 20, generator=torch.Generator().manual_seed(0)),
        "big_int": torch.arange(300, dtype=torch.int64).reshape(3, 100),
        "zero_dim": torch.tensor(3.5),
    },
    "long-lists": {
        "ints": list(range(300)),
        "strs": [f"w{i}" for i in range(260)],
        "mixed": [{"a": i} for i in range(280)],
    },
    "sets": {"s": {3, 1, 2}, "f": frozenset({"a", "b"})},
}

# muutils before 0.9 (ZANJ's serializer) writes a set or frozenset as a plain JSON list, with no
# "__muutils_format__" marker; from 0.9 on it marks them, and zarchive reads them back as sets.
ZANJ_MARKS_SETS = isinstance(json_serialize({1}), dict)


@pytest.mark.parametrize("case", list(VALUES), ids=list(VALUES))
def test_values_round_trip(tmp_path: Path, case: str) -> None:
    obj = VALUES[case]
    path = write_zanj(tmp_path, obj)
    if case == "sets" and not ZANJ_MARKS_SETS:  # the file holds plain lists: they are what comes back
        back = zarchive.read(path)
        assert {k: sorted(v) for k, v in back.items()} == {k: sorted(v) for k, v in obj.items()}
        assert all(type(v) is list for v in back.values())
        return
    assert_same(zarchive.read(path), obj)


def test_agrees_with_zanjs_own_reader(tmp_path: Path) -> None:
    obj = {k: v for k, v in VALUES.items() if k not in ("sets",)}
    path = write_zanj(tmp_path, obj)
    assert_same(zarchive.read(path), ZANJ().read(path))


def test_tuples_come_back_as_lists_as_zanj_writes_them(tmp_path: Path) -> None:
    path = write_zanj(tmp_path, {"t": (1, 2), "long": tuple(range(300))})
    out = zarchive.read(path)
    assert out["t"] == [1, 2]  # ZANJ's JSON has no tuple marker for short tuples
    assert out["long"] == tuple(range(300))  # long ones are marked "tuple:external"


def test_uncompressed_zanj_is_read_too(tmp_path: Path) -> None:
    obj = VALUES["external-arrays"]
    path = write_zanj(tmp_path, obj, compress=False)
    with zipfile.ZipFile(path) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}
    assert_same(zarchive.read(path), obj)


@pytest.mark.parametrize("array_mode", ["array_hex_meta", "array_b64_meta", "list"])
def test_other_inline_array_modes(tmp_path: Path, array_mode: str) -> None:
    obj = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "t": torch.arange(4, dtype=torch.int16)}
    path = write_zanj(tmp_path, obj, internal_array_mode=array_mode)
    out = zarchive.read(path)
    if array_mode == "list":  # plain nested lists, as ZANJ writes them in this mode
        assert out == {"a": obj["a"].tolist(), "t": [0, 1, 2, 3]}
    else:
        assert_same(out, obj)


def test_dataframes(tmp_path: Path) -> None:
    df = pd.DataFrame({"i": [1, 2, 3], "f": [0.5, np.nan, 2.5], "s": ["a", "b", None], "b": [True, False, True]})
    numbered = pd.DataFrame({0: [1.0, 2.0], 1: ["x", "y"]})
    empty = pd.DataFrame({"a": pd.Series([], dtype=float), "b": pd.Series([], dtype=object)})
    path = write_zanj(tmp_path, {"df": df, "numbered": numbered, "empty": empty})
    out = zarchive.read(path)
    pd.testing.assert_frame_equal(out["df"], ZANJ().read(path)["df"])
    pd.testing.assert_frame_equal(out["df"], df, check_dtype=False)
    pd.testing.assert_frame_equal(out["numbered"], numbered)  # int column labels survive (ZANJ's reader loses them)
    assert list(out["empty"].columns) == ["a", "b"] and len(out["empty"]) == 0


def test_serializable_dataclasses(tmp_path: Path) -> None:
    obj = {"cfg": ZcOuter(name="x", inner=ZcInner(k=5, tag="t"), sizes=(4, 5)), "arr": [ZcInner(k=i) for i in range(3)]}
    out = zarchive.read(write_zanj(tmp_path, obj))
    assert out["cfg"] == obj["cfg"] and type(out["cfg"].inner) is ZcInner
    assert out["cfg"].sizes == (4, 5)  # declared a tuple: made a tuple again
    assert out["arr"] == obj["arr"]


def test_dataclass_field_changes_follow_error_mode(tmp_path: Path) -> None:
    path = write_zanj(tmp_path, ZcInner(k=2))
    tree = main_json(path)
    tree["gone"] = 1
    edited = rewrite(path, tmp_path / "edited.zanj", main=tree)
    with pytest.warns(UserWarning, match="'gone'"):
        assert zarchive.read(edited) == ZcInner(k=2)
    with pytest.raises(ZArchiveError, match="'gone'"):
        zarchive.read(edited, error_mode="except")


def test_unknown_dataclass_is_an_error_or_a_dict(tmp_path: Path) -> None:
    tree = main_json(write_zanj(tmp_path, ZcInner(k=2)))
    tree["__muutils_format__"] = "ZcNeverDefined(SerializableDataclass)"
    path = rewrite(tmp_path / "x.zanj", tmp_path / "unknown.zanj", main=tree)
    with pytest.raises(UnknownTypeError, match="ZcNeverDefined"):
        zarchive.read(path)
    with open_zanj(path, unknown="dict") as arc:
        assert arc.load()["k"] == 2


# --- models --------------------------------------------------------------------------------------
def _trained(cls: type) -> Any:
    torch.manual_seed(1)
    model = cls(ZcNetCfg(d_in=4, d_hidden=80))
    model.training_records = {"loss": [1.0, 0.25]}
    return model


def test_configured_model_reads_into_the_zarchive_class(tmp_path: Path) -> None:
    old = _trained(ZanjNet)
    path = write_zanj(tmp_path, old, "model.zanj")
    assert any(n.endswith(".npy") for n in zipfile.ZipFile(path).namelist())  # weights partly external
    new = zarchive.read(path)
    assert type(new) is ZcNet and new.config == old.zanj_model_config
    assert new.training_records == {"loss": [1.0, 0.25]}
    x = torch.randn(3, 4)
    assert torch.equal(new(x), old(x))
    assert int(new.steps) == 7
    nested = zarchive.read(write_zanj(tmp_path, {"model": old, "epoch": 3}, "nested.zanj"))
    assert type(nested["model"]) is ZcNet and nested["epoch"] == 3


def test_model_placement_and_dtype(tmp_path: Path) -> None:
    path = write_zanj(tmp_path, _trained(ZanjNet), "model.zanj")
    half = zarchive.read(path, dtype=torch.float16)
    assert half.fc1.weight.dtype == torch.float16
    meta = zarchive.read(path, map_location="meta")
    assert meta.fc1.weight.device.type == "meta"
    with zarchive.open(path) as arc:
        w = arc.get("state_dict/fc1.weight", map_location="meta")
    assert w.device.type == "meta" and w.shape == (80, 4)


def test_model_without_a_zarchive_port_uses_zanjs_class(tmp_path: Path) -> None:
    old = _trained(ZanjOnlyNet)
    new = zarchive.read(write_zanj(tmp_path, old, "model.zanj"))
    assert type(new) is ZanjOnlyNet
    assert torch.equal(new.fc1.weight, old.fc1.weight)


def test_model_with_a_different_config_class_is_a_mismatch(tmp_path: Path) -> None:
    path = write_zanj(tmp_path, _trained(ZanjNetOtherConfig), "model.zanj")
    with pytest.raises(ConfigMismatchError, match="ZcOtherCfg"):
        zarchive.read(path)


def test_model_whose_weights_do_not_fit_is_a_mismatch(tmp_path: Path) -> None:
    path = write_zanj(tmp_path, _trained(ZanjNet), "model.zanj")
    tree = main_json(path)
    tree["zanj_model_config"]["d_hidden"] = 8  # the class builds other shapes than the weights have
    edited = rewrite(path, tmp_path / "edited.zanj", main=tree)
    with pytest.raises(ConfigMismatchError, match="do not fit"):
        zarchive.read(edited)


def test_unknown_model_class_is_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    tree = main_json(write_zanj(tmp_path, _trained(ZanjNet), "model.zanj"))
    tree["__muutils_format__"] = tree["meta"]["class_name"] = "ZcEvilNet"
    tree["meta"]["module_name"] = "os"
    tree["meta"]["class_source"] = [f"open({str(marker)!r}, 'w').write('x')"]
    path = rewrite(tmp_path / "model.zanj", tmp_path / "evil.zanj", main=tree)
    with pytest.raises(UnknownTypeError, match="ZcEvilNet"):
        zarchive.read(path)
    assert not marker.exists()


# --- lazy access ---------------------------------------------------------------------------------
def test_open_browses_without_loading(tmp_path: Path) -> None:
    obj = {"cfg": ZcInner(k=3), "data": {"x": np.arange(500.0), "y": [1, 2]}, "df": pd.DataFrame({"a": [1, 2]})}
    path = write_zanj(tmp_path, obj)
    with zarchive.open(path) as arc:
        assert isinstance(arc, ZanjArchive)
        assert arc.keys() == ["cfg", "data", "df"] and arc.keys("data") == ["x", "y"]
        assert "data/x" in arc and "data/z" not in arc
        assert arc.summary("data/x") == "ndarray float64 [500] -> data/x.npy"
        np.testing.assert_array_equal(arc["data/x"], obj["data"]["x"])
        assert arc["cfg/k"] == 3
        assert arc.verify() == []
        assert arc.members["data/x.npy"]["size"] > 4000
        with pytest.raises(MemberNotFoundError):
            arc["data/nope"]


def test_detection_is_by_content_not_name(tmp_path: Path) -> None:
    zanj_file = write_zanj(tmp_path, {"a": np.arange(400)})
    renamed = tmp_path / "weights.bin"
    renamed.write_bytes(zanj_file.read_bytes())
    np.testing.assert_array_equal(zarchive.read(renamed)["a"], np.arange(400))
    zarc_named_zanj = tmp_path / "really_a_zarc.zanj"
    zarchive.save({"a": 1}, zarc_named_zanj)
    assert zarchive.read(zarc_named_zanj) == {"a": 1}
    assert is_zanj_file(renamed) and not is_zanj_file(zarc_named_zanj)
    assert zarchive.read(zanj_file.read_bytes())["a"].shape == (400,)  # bytes in memory too


# --- hostile files -------------------------------------------------------------------------------
class _Boom:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (open, (self.marker, "w"))


def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return buf.getvalue()


def _central_patch(data: bytes, index: int, offset: int, fmt: str, value: int) -> bytes:
    """Patch field at `offset` of the index-th central directory record."""
    eocd = data.rfind(b"PK\x05\x06")
    cd_offset = struct.unpack_from("<I", data, eocd + 16)[0]
    p = cd_offset
    for _ in range(index):
        n, m, k = struct.unpack_from("<HHH", data, p + 28)
        p += 46 + n + m + k
    out = bytearray(data)
    struct.pack_into(fmt, out, p + offset, value)
    return bytes(out)


def _central_offsets(data: bytes) -> list[int]:
    eocd = data.rfind(b"PK\x05\x06")
    count, cd_offset = struct.unpack_from("<H", data, eocd + 10)[0], struct.unpack_from("<I", data, eocd + 16)[0]
    out, p = [], cd_offset
    for _ in range(count):
        n, m, k = struct.unpack_from("<HHH", data, p + 28)
        out.append(struct.unpack_from("<I", data, p + 42)[0])
        p += 46 + n + m + k
    return out


def _hostile(kind: str, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    base = write_zanj(tmp_path, {"arr": np.arange(300, dtype=np.float64), "small": np.arange(3)}, "base.zanj")
    tree = main_json(base)
    out = tmp_path / f"{kind}.zanj"
    marker = str(tmp_path / "executed")
    if kind == "pickled-npy":
        boom = np.empty(300, dtype=object)
        boom[:] = [_Boom(marker)] * 300
        return rewrite(base, out, replace={"arr.npy": _npy_bytes(boom)}), {}
    if kind == "npy-shape-lie":
        good = _npy_bytes(np.arange(300, dtype=np.float64))
        return rewrite(base, out, replace={"arr.npy": good.replace(b"(300,)", b"(900,)")}), {}
    if kind == "node-shape-lie":
        tree["arr"]["shape"], tree["arr"]["n_elements"] = [301], 301
    elif kind == "n-elements-lie":
        tree["small"]["n_elements"] = 4
    elif kind == "traversal-name":
        tree["arr"]["$ref"] = "../evil.npy"
        return rewrite(base, out, main=tree, add={"../evil.npy": _npy_bytes(np.arange(300.0))}), {}
    elif kind == "absolute-name":
        return rewrite(base, out, add={"/tmp/evil.npy": b"x"}), {}
    elif kind == "missing-member":
        tree["arr"]["$ref"] = "nothere.npy"
    elif kind == "ref-to-metadata":
        tree["arr"]["$ref"] = "__zanj_meta__.json"
    elif kind == "bad-json":
        return rewrite(base, out, main=b'{"a": [1, 2'), {}
    elif kind == "duplicate-keys":
        return rewrite(base, out, main=b'{"a": 1, "a": 2}'), {}
    elif kind == "deep-json":
        return rewrite(base, out, main=b"[" * 100_000 + b"]" * 100_000), {}
    elif kind == "unknown-format":
        tree["small"]["__muutils_format__"] = "evil.Thing:payload"
    elif kind == "format-not-a-string":
        tree["small"]["__muutils_format__"] = 5
    elif kind == "object-dtype":
        tree["small"]["dtype"] = "object"
    elif kind == "void-dtype":
        tree["small"]["dtype"] = "V8"
    elif kind == "hex-length-lie":
        tree["small"] = {"__muutils_format__": "numpy.ndarray:array_hex_meta", "data": "00ff", "shape": [3],
                         "dtype": "int64", "n_elements": 3}  # fmt: skip
    elif kind == "huge-inline-shape":
        tree["small"] = {"__muutils_format__": "numpy.ndarray:array_list_meta", "data": [], "shape": [1 << 40],
                         "dtype": "int8", "n_elements": 1 << 40}  # fmt: skip
    elif kind == "jsonl-injection":
        tree["small"] = {"__muutils_format__": "list:external", "$ref": "inj.jsonl"}
        return rewrite(base, out, main=tree, add={"inj.jsonl": b"1,2\n"}), {}
    elif kind == "damaged-member":
        with zipfile.ZipFile(base) as z:
            raw = bytearray(base.read_bytes())
            info = z.getinfo("arr.npy")
            start = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.compress_size // 2
        raw[start] ^= 0xFF
        out.write_bytes(bytes(raw))
        return out, {}
    elif kind == "over-the-size-limit":
        return base, {"max_decompressed": 1000}
    elif kind == "overlapping-members":
        data = base.read_bytes()
        offsets = _central_offsets(data)
        out.write_bytes(_central_patch(data, 2, 42, "<I", offsets[1]))  # the .npy entry points at the JSON's bytes
        return out, {}
    elif kind == "encrypted":
        out.write_bytes(_central_patch(base.read_bytes(), 2, 8, "<H", 0x1))
        return out, {}
    elif kind == "truncated":
        out.write_bytes(base.read_bytes()[:-30])
        return out, {}
    else:
        raise AssertionError(kind)
    return rewrite(base, out, main=tree), {}


HOSTILE = {
    "pickled-npy": UnsafeArchiveError,
    "npy-shape-lie": FormatError,
    "node-shape-lie": FormatError,
    "n-elements-lie": FormatError,
    "traversal-name": UnsafeArchiveError,
    "absolute-name": UnsafeArchiveError,
    "missing-member": MemberNotFoundError,
    "ref-to-metadata": FormatError,
    "bad-json": FormatError,
    "duplicate-keys": FormatError,
    "deep-json": FormatError,
    "unknown-format": UnknownTypeError,
    "format-not-a-string": FormatError,
    "object-dtype": FormatError,
    "void-dtype": FormatError,
    "hex-length-lie": FormatError,
    "huge-inline-shape": FormatError,
    "jsonl-injection": FormatError,
    "damaged-member": IntegrityError,
    "over-the-size-limit": UnsafeArchiveError,
    "overlapping-members": UnsafeArchiveError,
    "encrypted": UnsafeArchiveError,
    "truncated": FormatError,
}


@pytest.mark.parametrize("kind", list(HOSTILE), ids=list(HOSTILE))
def test_hostile_files_fail_cleanly(tmp_path: Path, kind: str) -> None:
    path, settings_ = _hostile(kind, tmp_path)
    with pytest.raises(HOSTILE[kind]) as info:
        zarchive.read(path, **settings_)
    assert isinstance(info.value, ZArchiveError)
    assert not (tmp_path / "executed").exists()


def test_verify_reports_the_damaged_member(tmp_path: Path) -> None:
    path, _ = _hostile("damaged-member", tmp_path)
    with zarchive.open(path) as arc:
        problems = arc.verify()
    assert [m for m, _ in problems] == ["arr.npy"]


def test_pickle_is_never_called(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("pickle used")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    path, _ = _hostile("pickled-npy", tmp_path)
    with pytest.raises(UnsafeArchiveError):
        zarchive.read(path)


# --- generated round trips -----------------------------------------------------------------------
_keys = st.text(alphabet="abcdefgh", min_size=1, max_size=4)
_arrays = hnp.arrays(
    dtype=st.sampled_from([np.float32, np.float64, np.int64, np.int16, np.uint8, np.bool_]),
    shape=hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=12),
)
_leaves = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.booleans(),
    st.none(),
    _arrays,
    st.lists(st.integers(0, 9), max_size=40),
)
_trees = st.recursive(_leaves, lambda inner: st.dictionaries(_keys, inner, max_size=4), max_leaves=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=st.dictionaries(_keys, _trees, min_size=1, max_size=4))
def test_generated_trees_round_trip(tmp_path: Path, tree: dict[str, Any]) -> None:
    path = tmp_path / "gen.zanj"
    ZANJ(external_array_threshold=16, external_list_threshold=16).save(tree, str(path))
    out = zarchive.read(path)
    assert_same(out, tree)


def test_remote_zanj_file(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    obj = {"a": np.arange(400), "cfg": ZcInner(k=4)}
    local = write_zanj(tmp_path, obj)
    fs = fsspec.filesystem("memory")
    fs.pipe("/zc-zanj/x.zanj", local.read_bytes())
    try:
        assert_same(zarchive.read("memory://zc-zanj/x.zanj")["a"], obj["a"])
        with zarchive.open("memory://zc-zanj/x.zanj") as arc:
            assert arc["cfg"] == ZcInner(k=4)
    finally:
        fs.rm("/zc-zanj", recursive=True)


# --- the read policy, audit and model budgets (the same machinery as a .zarc) --------------------
_BUILT: list[str] = []


@serializable_dataclass
class ZcWatched(SerializableDataclass):
    k: int = serializable_field(default=1)

    def __post_init__(self) -> None:
        _BUILT.append("ZcWatched")


@set_config_class(ZcNetCfg)
class ZcItemNet(ConfiguredModel[ZcNetCfg]):
    """Cannot be built on the meta device: __init__ reads a value of its own weights."""

    def __init__(self, cfg: ZcNetCfg) -> None:
        super().__init__(cfg)
        self.fc1 = torch.nn.Linear(cfg.d_in, cfg.d_hidden)
        self.fc2 = torch.nn.Linear(cfg.d_hidden, 2)
        self.register_buffer("steps", torch.tensor(0))
        self.scale = float(self.fc1.weight.abs().sum().item())


ZanjItemNet = _make_zanj_net("ZcItemNet")


def _renamed(tmp_path: Path, obj: Any, names: dict[str, str], name: str = "renamed.zanj") -> Path:
    """A ZANJ file of `obj` whose recorded class names are replaced (classes not here)."""
    src = write_zanj(tmp_path, obj, "src-" + name)
    text = json.dumps(main_json(src))
    for old, new in names.items():
        text = text.replace(json.dumps(old), json.dumps(new))
    return rewrite(src, tmp_path / name, main=text.encode())


def test_trusted_refuses_a_zanj_dataclass_before_building_it(tmp_path: Path) -> None:
    path = write_zanj(tmp_path, {"w": ZcWatched(k=3), "x": [1, 2]})
    _BUILT.clear()
    with pytest.raises(UntrustedTypeError, match="ZcWatched"):
        zarchive.read(path, trusted=[ZcInner])
    with zarchive.open(path, trusted=[]) as arc:
        assert arc["x"] == [1, 2]  # values that name no class need no trust
        with pytest.raises(UntrustedTypeError):
            arc["w"]
    assert _BUILT == []  # refused by the plan: nothing was constructed
    assert zarchive.read(path, trusted=[ZcWatched])["w"] == ZcWatched(k=3)
    assert zarchive.read(path, trusted=[class_tag(ZcWatched)])["w"].k == 3


def test_trusted_refuses_a_zanj_model_before_building_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_zanj(tmp_path, _trained(ZanjNet), "model.zanj")
    with monkeypatch.context() as m:
        m.setattr(ZcNet, "__init__", lambda *a, **k: pytest.fail("built an untrusted model"))
        m.setattr(ZcNetCfg, "__post_init__", lambda *a, **k: pytest.fail("built an untrusted config"), raising=False)
        with pytest.raises(UntrustedTypeError, match="ZcNet"):
            zarchive.read(path, trusted=[ZcNetCfg])
    model = zarchive.read(path, trusted=[ZcNet])  # the model's own config class comes with it
    assert type(model) is ZcNet and model.config == ZcNetCfg(d_in=4, d_hidden=80)
    assert type(ZcNet.read(path)) is ZcNet  # ConfiguredModel.read takes a ZANJ file too
    with pytest.raises(ConfigMismatchError, match="not a ConfiguredModel"):
        ZcNet.read(write_zanj(tmp_path, {"a": 1}, "plain.zanj"))


def test_unresolved_generic_reads_zanj_classes_not_here(tmp_path: Path) -> None:
    obj = {"cfg": ZcInner(k=5, tag="t"), "model": _trained(ZanjNet)}
    path = _renamed(
        tmp_path,
        obj,
        {"ZcInner(SerializableDataclass)": "ZcGoneInner(SerializableDataclass)", "ZcNet": "ZcGoneNet",
         "ZcNetCfg(SerializableDataclass)": "ZcGoneCfg(SerializableDataclass)"},
    )  # fmt: skip
    with pytest.raises(UnknownTypeError, match="ZcGoneInner.*unresolved='generic'"):
        zarchive.read(path)
    out = zarchive.read(path, unresolved="generic")
    cfg, model = out["cfg"], out["model"]
    assert isinstance(cfg, zarchive.GenericObject) and cfg.tag == "ZcGoneInner(SerializableDataclass)"
    assert cfg.k == 5 and cfg.tag == "ZcGoneInner(SerializableDataclass)" and cfg.kind == "dataclass"
    assert isinstance(model, zarchive.GenericObject) and (model.tag, model.kind) == ("ZcGoneNet", "ConfiguredModel")
    assert model.zanj_model_config.d_hidden == 80
    assert torch.equal(model.state_dict["fc1.weight"], obj["model"].fc1.weight)
    with zarchive.open(path, unresolved="generic") as arc:
        assert arc["cfg/tag"] == "t" and arc["cfg"].fields == {"k": 5, "tag": "t"}


def test_audit_of_a_zanj_file(tmp_path: Path) -> None:
    obj = {"cfg": ZcOuter(inner=ZcInner(k=2)), "model": _trained(ZanjNet), "x": np.arange(300)}
    path = write_zanj(tmp_path, obj)
    assert zarchive.audit(path) == {
        class_tag(ZcOuter): ["cfg"],
        class_tag(ZcInner): ["cfg/inner"],
        class_tag(ZcNet): ["model"],
        class_tag(ZcNetCfg): ["model/zanj_model_config"],
    }
    gone = _renamed(tmp_path, {"c": ZcInner()}, {"ZcInner(SerializableDataclass)": "ZcGone(SerializableDataclass)"})
    assert zarchive.audit(gone) == {"ZcGone(SerializableDataclass)": ["c"]}  # the name as recorded
    with zarchive.open(path) as arc:
        plan = arc.plan("x")
        assert plan.members == {"x.npy": arc.members["x.npy"]["size"]} and not plan.classes
        assert arc.model_tag("model") == class_tag(ZcNet) and arc.model_tag("cfg") is None


def test_zanj_reads_obey_the_limits(tmp_path: Path) -> None:
    path = write_zanj(tmp_path, {"x": np.arange(1000.0), "l": list(range(300))})
    with pytest.raises(UnsafeArchiveError, match="max_read_bytes"):
        zarchive.read(path, max_read_bytes=1000)
    with pytest.raises(UnsafeArchiveError, match="max_nodes"):
        zarchive.read(path, max_nodes=50)


def test_zanj_tensors_as_numpy(tmp_path: Path) -> None:
    old = _trained(ZanjNet)
    out = zarchive.read(write_zanj(tmp_path, {"m": old, "t": torch.arange(300)}), tensors="numpy")
    assert isinstance(out["t"], np.ndarray) and out["t"].tolist() == list(range(300))
    assert isinstance(out["m"], zarchive.GenericObject) and out["m"].kind == "ConfiguredModel"
    np.testing.assert_array_equal(out["m"].state_dict["fc1.weight"], old.fc1.weight.detach().numpy())


def _huge_config(tmp_path: Path, cls: type, d_hidden: int) -> Path:
    path = write_zanj(tmp_path, _trained(cls), f"{cls.__name__}.zanj")
    tree = main_json(path)
    tree["zanj_model_config"]["d_hidden"] = d_hidden
    return rewrite(path, tmp_path / f"{cls.__name__}-huge.zanj", main=tree)


def test_zanj_model_asking_for_far_more_than_the_file_holds_is_refused(tmp_path: Path) -> None:
    # builds on meta: the weights do not fit the config's shapes, and nothing is allocated for real
    with pytest.raises(ConfigMismatchError, match="do not fit"):
        zarchive.read(_huge_config(tmp_path, ZanjNet, 1 << 40))
    # cannot build on meta (.item() in __init__): the real build stops at the budget, before allocating
    old = _trained(ZanjItemNet)
    ok = zarchive.read(write_zanj(tmp_path, old, "item.zanj"))
    assert type(ok) is ZcItemNet and torch.equal(ok.fc1.weight, old.fc1.weight) and int(ok.steps) == 7
    with pytest.raises(UnsafeArchiveError, match="more than"):
        zarchive.read(_huge_config(tmp_path, ZanjItemNet, 1 << 30))


def test_zanj_tensors_as_numpy_never_import_torch(tmp_path: Path) -> None:
    path = _renamed(tmp_path, {"m": _trained(ZanjNet), "t": torch.arange(300)}, {"ZcNet": "ZcGoneNet"})
    code = (
        "import sys, zarchive\n"
        "out = zarchive.read(sys.argv[1], tensors='numpy', unresolved='generic')\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print(out['m'].tag, out['m'].state_dict['fc1.weight'].shape, out['t'][-1])\n"
    )
    repo = str(Path(zarchive.__file__).resolve().parent.parent)
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": repo},
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["ZcGoneNet", "(80,", "4)", "299"]


@serializable_dataclass(properties_to_serialize=["area"])
class ZcRect(SerializableDataclass):
    w: int = serializable_field(default=2)
    h: int = serializable_field(default=3)

    @property
    def area(self) -> int:
        return self.w * self.h


def test_properties_zanj_writes_beside_the_fields_are_skipped(tmp_path: Path, recwarn: Any) -> None:
    """ZANJ stores a SerializableDataclass's `properties_to_serialize` beside its fields; they are not
    fields, so reading skips them quietly, and without muutils' private list (the compat probe off)
    says so as a mismatch instead of guessing."""
    from zarchive._compat import disable_for_test
    from zarchive._compat import muutils as muutils_compat  # noqa: F401 - registers the probe

    path = write_zanj(tmp_path, {"r": ZcRect(4, 5)})
    assert zarchive.read(path)["r"] == ZcRect(4, 5)
    assert not [w for w in recwarn if "area" in str(w.message)]
    with disable_for_test("muutils.properties_to_serialize"), pytest.warns(UserWarning, match="'area'"):
        assert zarchive.read(path)["r"] == ZcRect(4, 5)
