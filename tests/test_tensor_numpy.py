"""Tensors read as numpy arrays by NumpyTensorHandler, without torch on the reading side: every dtype,
views sharing memory, tensor tables, split and compressed members, lazy fetches, the errors, and a
child process that reads an archive without importing torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import tensor_bytes
from rewrite import rewrite

import zarchive
from zarchive.engine.lazy import LazyArchive
from zarchive.errors import DeviceError, FormatError, SaveError, UnsupportedDtypeError
from zarchive.handlers import tensor_numpy
from zarchive.handlers.tensor_numpy import NumpyTensorHandler, cast_target, numpy_dtype
from zarchive.handlers.torch_types import DTYPES
from zarchive.options import Settings

REPO = Path(__file__).resolve().parents[1]
_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


# --- helpers ---


def open_numpy(path: Path | bytes) -> LazyArchive:
    """An opened archive whose tensors load as numpy arrays."""
    return zarchive.open(path, tensors="numpy")


def read_numpy(path: Path | bytes, **kwargs: Any) -> Any:
    with open_numpy(path) as arc:
        return arc.load(**kwargs)


def random_tensor(dtype: torch.dtype, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """Random bit patterns of `dtype` (NaNs with payloads, subnormals, every byte value)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    n = int(np.prod(shape))
    itemsize = torch.empty(0, dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * itemsize,), dtype=torch.uint8, generator=g)
    return raw.view(dtype).reshape(shape)


def assert_same(arr: Any, t: torch.Tensor) -> None:
    assert isinstance(arr, np.ndarray)
    assert arr.shape == tuple(t.shape)
    assert arr.dtype.itemsize == t.element_size()
    assert np.ascontiguousarray(arr).tobytes() == tensor_bytes(t)


def has_ml_dtypes(name: str = "bfloat16") -> bool:
    """Whether ml_dtypes is installed and has type `name` (complex32 and float8_e8m0fnu are recent)."""
    try:
        import ml_dtypes
    except ImportError:
        return False
    return hasattr(ml_dtypes, name)


def _dtype_params() -> list[Any]:
    params = []
    for name, dtype in sorted(DTYPES.items()):
        marks = []
        try:
            random_tensor(dtype, (2, 3))
            ok = not name.startswith(("qint", "quint"))
        except (RuntimeError, NotImplementedError, TypeError):
            ok = False
        if not ok:
            marks.append(pytest.mark.skip(reason=f"torch cannot create (or zarchive cannot save) {name} on CPU"))
        params.append(pytest.param(name, dtype, id=name, marks=marks))
    return params


# --- dtypes ---


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("name", "dtype"), _dtype_params())
def test_every_dtype_reads_bitwise_or_says_why_not(name: str, dtype: torch.dtype, tmp_path: Path) -> None:
    t = random_tensor(dtype, (7, 9))
    obj = {"full": t, "transposed": t.T, "step": t[::2], "scalar": t[3, 4], "empty": t[:0], "wide": t[:, :0]}
    path = tmp_path / "a.zarc"
    zarchive.save(obj, path)
    if name in tensor_numpy.NO_NUMPY_EQUIVALENT:
        with pytest.raises(UnsupportedDtypeError, match=rf"{name!r} has no numpy equivalent.*tensors='torch'"):
            read_numpy(path)
        return
    if name in tensor_numpy.ML_DTYPES_NAMES and not has_ml_dtypes(name):
        with pytest.raises(UnsupportedDtypeError, match="ml_dtypes"):
            read_numpy(path)
        return
    got = read_numpy(path)
    assert got.keys() == obj.keys()
    for k, v in obj.items():
        assert_same(got[k], v)
    assert got["scalar"].ndim == 0
    assert got["full"].flags.writeable
    if name in tensor_numpy.NUMPY_DTYPES:
        assert got["full"].dtype == np.dtype(name)
    else:
        assert got["full"].dtype.name == name  # the ml_dtypes type of the same name


def test_the_dtype_table_covers_every_torch_dtype() -> None:
    known = set(tensor_numpy.NUMPY_DTYPES) | tensor_numpy.ML_DTYPES_NAMES | tensor_numpy.NO_NUMPY_EQUIVALENT
    assert set(DTYPES) <= known, set(DTYPES) - known


def test_bfloat16_values_through_ml_dtypes(tmp_path: Path) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    t = torch.randn(5, 6).to(torch.bfloat16)
    zarchive.save({"w": t}, tmp_path / "a.zarc")
    arr = read_numpy(tmp_path / "a.zarc")["w"]
    assert arr.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(arr.astype(np.float32), t.float().numpy())


def test_missing_ml_dtypes_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    zarchive.save({"sd": {"w": torch.ones(3, dtype=torch.bfloat16)}}, tmp_path / "a.zarc")
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # `import ml_dtypes` now raises ImportError
    monkeypatch.setattr(tensor_numpy, "_resolved", dict(tensor_numpy.NUMPY_DTYPES))
    with pytest.raises(UnsupportedDtypeError) as info:
        read_numpy(tmp_path / "a.zarc")
    msg = str(info.value)
    assert "'bfloat16'" in msg and "pip install ml_dtypes" in msg and "tensors='torch'" in msg
    assert info.value.path == "sd/w" and "'/sd/w'" in msg
    assert isinstance(info.value, zarchive.ZArchiveError)


def test_unknown_dtype_name_is_a_format_error() -> None:
    with pytest.raises(FormatError, match="unknown torch dtype 'float128'"):
        numpy_dtype("float128")
    with pytest.raises(FormatError, match="unknown torch dtype"):
        numpy_dtype(["float32"])


# --- shapes, views, shared memory ---


def test_zero_d_empty_and_non_contiguous(tmp_path: Path) -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    obj = {
        "scalar": torch.tensor(3.5),
        "empty": torch.empty(0),
        "empty2": torch.empty(3, 0, 2, dtype=torch.int64),
        "noncontig": base.T.clone().T,  # alone on its storage: stored as its values
        "step": base[:, ::2].clone()[::2],
    }
    zarchive.save(obj, tmp_path / "a.zarc")
    got = read_numpy(tmp_path / "a.zarc")
    for k, v in obj.items():
        assert_same(got[k], v)
    assert got["scalar"].shape == () and got["scalar"] == 3.5
    assert got["empty2"].shape == (3, 0, 2) and got["empty2"].dtype == np.int64


def test_views_of_one_storage_share_memory(tmp_path: Path) -> None:
    a = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    obj = {"a": a, "t": a.T, "s": a[1:, ::3], "row": a[2], "x": a[:, 4:5].expand(6, 7), "i": a.view(torch.int32)[1:3]}
    zarchive.save(obj, tmp_path / "a.zarc")
    got = read_numpy(tmp_path / "a.zarc")
    for k, v in obj.items():
        assert_same(got[k], v)
    for k in ("t", "s", "row", "x", "i"):
        assert np.shares_memory(got["a"], got[k]), k
    got["a"][2, 0] = -1.0  # writable, and the views see it
    assert got["row"][0] == -1.0 and got["t"][0, 2] == -1.0


def test_views_with_equal_offset_and_stride_but_other_shape_or_dtype(tmp_path: Path) -> None:
    # all four nodes carry {"storage_offset": 0, "stride": [1]}: only dtype and shape tell them apart
    a = torch.arange(10, dtype=torch.float32)
    obj = {"b": a[:3], "c": a[:5], "i": a.view(torch.int32)[:3], "full": a}
    zarchive.save(obj, tmp_path / "a.zarc")
    got = read_numpy(tmp_path / "a.zarc")
    for k, v in obj.items():
        assert_same(got[k], v)


def test_the_same_tensor_twice_is_one_array(tmp_path: Path) -> None:
    w = torch.randn(4, 4)
    zarchive.save({"enc": w, "dec": w, "other": w.clone()}, tmp_path / "a.zarc")
    got = read_numpy(tmp_path / "a.zarc")
    assert got["enc"] is got["dec"]
    assert not np.shares_memory(got["enc"], got["other"])


def test_in_memory_source(tmp_path: Path) -> None:
    a = torch.arange(12, dtype=torch.int16).reshape(3, 4)
    zarchive.save({"a": a, "t": a.T}, tmp_path / "a.zarc")
    got = read_numpy((tmp_path / "a.zarc").read_bytes())
    assert_same(got["a"], a) and assert_same(got["t"], a.T)  # type: ignore[func-returns-value]
    assert np.shares_memory(got["a"], got["t"])


# --- tables, members ---


def manifest_of(path: Path) -> dict[str, Any]:
    with zarchive.open(path) as arc:
        return arc.manifest


def test_tensor_table_and_lazy_fetch(tmp_path: Path) -> None:
    sd = {f"layer{i}.weight": torch.randn(3, i % 5 + 1) for i in range(100)}
    sd["layer7.bias"] = torch.arange(4, dtype=torch.int64)
    zarchive.save({"model": sd, "step": 7}, tmp_path / "a.zarc")
    assert "tensors" in manifest_of(tmp_path / "a.zarc")["root"]["model"]
    got = read_numpy(tmp_path / "a.zarc")
    assert got["step"] == 7 and list(got["model"]) == list(sd)
    for k, v in sd.items():
        assert_same(got["model"][k], v)
    with open_numpy(tmp_path / "a.zarc") as arc:
        one = arc.get("model/layer42.weight")
        assert_same(one, sd["layer42.weight"])
        assert arc.summary("model/layer42.weight").startswith("tensor float32 [3, 3] -> model.safetensors")
        # (a member of at most 1 MiB records no checksum entries, format 1.6: found by its header)
        assert list(arc._reader.parsed) == [("safetensors", "model.safetensors")]
        assert_same(arc["model/layer7.bias"], sd["layer7.bias"])


def test_split_members(tmp_path: Path) -> None:
    sd = {f"p{i}": torch.full((2,), float(i)) for i in range(600)}
    zarchive.save({"sd": sd}, tmp_path / "a.zarc")
    with zarchive.open(tmp_path / "a.zarc") as arc:
        members = [m for m in arc.members if m.startswith("sd")]
    assert len(members) == 3, members
    got = read_numpy(tmp_path / "a.zarc")["sd"]
    for k, v in sd.items():
        assert_same(got[k], v)
    with open_numpy(tmp_path / "a.zarc") as arc:
        assert_same(arc.get("sd/p599"), sd["p599"])
        assert len(arc._reader.parsed) == 1  # (by its member's header: a member of under 1 MiB records no entries)


def test_compressed_members(tmp_path: Path) -> None:
    obj = {"ids": torch.zeros(20_000, dtype=torch.int64), "mask": torch.ones(5000, dtype=torch.bool)}
    obj["view"] = obj["ids"][::7]
    zarchive.save({"batch": obj}, tmp_path / "a.zarc", compress=True)
    with zarchive.open(tmp_path / "a.zarc") as arc:
        codecs = {m: e["codec"] for m, e in arc.members.items() if "safetensors" in m}
    assert list(codecs.values()) == ["zstd"], codecs
    got = read_numpy(tmp_path / "a.zarc")["batch"]
    for k, v in obj.items():
        assert_same(got[k], v)
    assert np.shares_memory(got["ids"], got["view"])
    got["ids"][0] = 5  # this load's own bytes: a second load does not see it
    with open_numpy(tmp_path / "a.zarc") as arc:
        assert arc.get("batch/ids")[0] == 0


# --- options and errors ---


def test_dtype_cast(tmp_path: Path) -> None:
    obj = {
        "f": torch.randn(4),
        "d": torch.randn(3, dtype=torch.float64),
        "i": torch.arange(3),
        "c": torch.ones(2, dtype=torch.complex64),
    }
    zarchive.save(obj, tmp_path / "a.zarc")
    for dtype in ("float16", np.float16, np.dtype("float16"), torch.float16):
        got = read_numpy(tmp_path / "a.zarc", dtype=dtype)
        assert got["f"].dtype == np.float16 and got["d"].dtype == np.float16
        assert got["i"].dtype == np.int64 and got["c"].dtype == np.complex64  # not floating: unchanged
        np.testing.assert_array_equal(got["f"], obj["f"].numpy().astype(np.float16))
    if has_ml_dtypes():
        got = read_numpy(tmp_path / "a.zarc", dtype="bfloat16")
        assert got["f"].dtype.name == "bfloat16"
    with pytest.raises(TypeError, match="dtype must be"):
        cast_target(object())


@pytest.mark.parametrize("loc", ["cuda", "cuda:0", "meta", "saved", {"cuda:0": "cpu"}, torch.device("meta")])
def test_map_location_must_be_host(tmp_path: Path, loc: Any) -> None:
    zarchive.save({"w": torch.ones(2)}, tmp_path / "a.zarc")
    with pytest.raises(DeviceError, match="tensors='numpy' reads tensors into host memory"):
        read_numpy(tmp_path / "a.zarc", map_location=loc)


@pytest.mark.parametrize("loc", [None, "cpu", torch.device("cpu")])
def test_map_location_host(tmp_path: Path, loc: Any) -> None:
    zarchive.save({"w": torch.ones(2)}, tmp_path / "a.zarc")
    assert read_numpy(tmp_path / "a.zarc", map_location=loc)["w"].tolist() == [1.0, 1.0]


def test_requires_grad_and_parameters_are_plain_arrays(tmp_path: Path) -> None:
    obj = {"p": torch.nn.Parameter(torch.ones(3)), "g": torch.zeros(2, requires_grad=True)}
    zarchive.save(obj, tmp_path / "a.zarc")
    got = read_numpy(tmp_path / "a.zarc")
    assert type(got["p"]) is np.ndarray and type(got["g"]) is np.ndarray
    assert got["p"].tolist() == [1.0, 1.0, 1.0]


def test_handler_contract() -> None:
    h = NumpyTensorHandler()
    assert h.name == "torch.Tensor"
    assert not h.accepts(torch.Tensor) and not h.accepts(np.ndarray)
    ctx = zarchive.engine.context.SaveContext(zarchive.engine.registry.HandlerRegistry(), Settings())
    with pytest.raises(SaveError, match="cannot save"):
        h.save(torch.ones(1), ctx)
    # saving with the numpy reader in the chain still saves tensors through the torch handler
    assert zarchive.engine.registry.HandlerRegistry().for_object(torch.ones(1)).__class__.__name__ == "TensorHandler"


@pytest.fixture
def one_archive(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    a = torch.arange(10, dtype=torch.int16)  # 20 bytes: not a whole number of float64s
    zarchive.save({"a": a, "b": a[2:5], "u": torch.arange(4, dtype=torch.uint8)}, tmp_path / "a.zarc")
    return tmp_path / "a.zarc", manifest_of(tmp_path / "a.zarc")["root"]


@pytest.fixture
def entries_archive(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """one_archive's `u` in a member of over 1 MiB, which records checksum entries (format 1.6)."""
    values = {"u": torch.arange(4, dtype=torch.uint8), "big": torch.zeros(300_000)}
    zarchive.save(values, tmp_path / "e.zarc")
    return tmp_path / "e.zarc", manifest_of(tmp_path / "e.zarc")["root"]


def load_node(path: Path, node: dict[str, Any], **kwargs: Any) -> Any:
    with zarchive.open(path, tensors="numpy") as arc:
        return arc.load_node(node, "x/y", **kwargs)


@pytest.mark.parametrize(
    ("change", "error", "pattern"),
    [
        ({"shape": [13]}, FormatError, r"reach element 14 of 10"),
        ({"view": {"storage_offset": 10, "stride": [1]}}, FormatError, r"view outside its storage"),
        ({"view": {"storage_offset": 0, "stride": [5]}}, FormatError, r"view outside its storage"),
        ({"view": {"storage_offset": -1, "stride": [1]}}, FormatError, "bad tensor view"),
        ({"view": {"storage_offset": 0, "stride": [-1]}}, FormatError, "bad tensor view"),
        ({"view": {"storage_offset": 0, "stride": [1, 1]}}, FormatError, "bad tensor view"),
        ({"view": {"storage_offset": 0, "stride": [1.0]}}, FormatError, "bad tensor view"),
        ({"view": [0]}, FormatError, "bad tensor view"),
        ({"dtype": "float64", "shape": [5]}, FormatError, "not a multiple of the element size"),
        ({"dtype": "float128"}, FormatError, "unknown torch dtype"),
        ({"dtype": "uint4"}, UnsupportedDtypeError, "no numpy equivalent"),
        ({"shape": [3, -1]}, FormatError, "bad dimension"),
        ({"key": 3}, FormatError, "lacks its 'key'"),
        ({"key": "nope"}, FormatError, "'nope' is not in the member"),
        ({"$ref": "nope.safetensors"}, zarchive.MemberNotFoundError, "does not have"),
        ({"$ref": 5}, FormatError, "must be a member name"),
    ],
)
def test_bad_view_nodes(
    one_archive: tuple[Path, dict[str, Any]], change: dict[str, Any], error: type[zarchive.ZArchiveError], pattern: str
) -> None:
    path, root = one_archive
    node = {**root["b"], **change}
    with pytest.raises(error, match=pattern) as info:
        load_node(path, node)
    assert info.value.path == "x/y"
    if any(part in pattern for part in ("view", "reach", "multiple", "not in the member")):  # known member
        assert info.value.member == "tensors.safetensors"


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"shape": [5]}, r"entry 'u' holds 4 bytes, the manifest's U8\[5\] takes 5"),
        ({"dtype": "complex128", "shape": []}, r"entry 'u' holds 4 bytes, the manifest's U8\[16\] takes 16"),
    ],
)
def test_node_disagrees_with_its_entry(
    entries_archive: tuple[Path, dict[str, Any]], change: dict[str, Any], pattern: str
) -> None:
    """A fetch finds the tensor by its checksum entry: a node whose dtype and shape take another
    number of bytes is refused, naming the member and the object path."""
    path, root = entries_archive
    with pytest.raises(FormatError, match=pattern) as info:
        load_node(path, {**root["u"], **change})
    assert info.value.member == "tensors.safetensors" and info.value.path == "x/y"


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"shape": [5]}, r"stores 'u' as U8\[4\], the manifest says uint8\[5\]"),
        ({"dtype": "int8"}, r"stores 'u' as U8\[4\], the manifest says int8\[4\]"),
        ({"dtype": "complex128", "shape": []}, r"the manifest says complex128\[\]"),
    ],
)
def test_node_disagrees_with_its_members_header(
    one_archive: tuple[Path, dict[str, Any]], tmp_path: Path, change: dict[str, Any], pattern: str
) -> None:
    """A full read finds tensors by their members' headers, and refuses a node that says another
    dtype or shape than the header (the same number of bytes included)."""
    path, _ = one_archive
    edited = rewrite(path, tmp_path / "edited.zarc", manifest_edit=lambda m: m["root"]["u"].update(change))
    with pytest.raises(FormatError, match=pattern) as info:
        read_numpy(edited)
    assert info.value.member == "tensors.safetensors" and info.value.path == "u"


def test_header_cache_is_shared_between_loads(one_archive: tuple[Path, dict[str, Any]]) -> None:
    path, _ = one_archive
    with open_numpy(path) as arc:
        arc.load()  # (a full read goes by the headers)
        slots = arc._reader.parsed[("safetensors", "tensors.safetensors")]
        arc.load()
        assert arc._reader.parsed[("safetensors", "tensors.safetensors")] is slots


# --- frameworks ---


def test_bf16_state_dict_into_mlx(tmp_path: Path) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    mx = pytest.importorskip("mlx.core")
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(torch.bfloat16)
    sd = model.state_dict()
    zarchive.save({"state_dict": sd}, tmp_path / "a.zarc")
    got = read_numpy(tmp_path / "a.zarc")["state_dict"]
    assert list(got) == list(sd)
    for k, t in sd.items():
        arr = got[k]
        assert arr.dtype == np.dtype(ml_dtypes.bfloat16)
        m = mx.array(arr)
        assert m.dtype == mx.bfloat16 and tuple(m.shape) == tuple(t.shape)
        np.testing.assert_array_equal(np.array(m.astype(mx.float32)), t.float().numpy())


# --- torch stays out of the reading process ---

_CHILD = """
import sys
{prelude}
import zarchive

arc = zarchive.open(sys.argv[1], tensors="numpy")
got = arc.load()
one = arc.get("sd/w3")
arc.close()
assert "torch" not in sys.modules, "torch was imported"
import hashlib
print(json.dumps({{k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in got["sd"].items()}}))
print(one.tolist())
"""


def _run_child(tmp_path: Path, prelude: str) -> subprocess.CompletedProcess[str]:
    sd = {f"w{i}": torch.arange(i + 2, dtype=torch.float32) * 0.5 for i in range(70)}
    sd["shared"] = sd["w3"][1:]
    zarchive.save({"sd": sd}, tmp_path / "a.zarc")
    code = textwrap.dedent(_CHILD).format(prelude=prelude)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "a.zarc")],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    import hashlib

    digests, one = proc.stdout.splitlines()
    assert json.loads(digests) == {k: hashlib.sha256(tensor_bytes(v)).hexdigest() for k, v in sd.items()}
    assert json.loads(one) == sd["w3"].tolist()
    return proc


def test_reading_does_not_import_torch(tmp_path: Path) -> None:
    _run_child(tmp_path, "import json")
