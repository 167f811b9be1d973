"""Exact round-trips of numpy arrays: every dtype the format allows, inline (small) and as `.npy`
members (large), odd shapes and memory layouts, object arrays; and the arrays that must be refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import zarchive

THRESHOLD = 256  # the default external_array_threshold
SIZES = {"inline": 12, "member": 1000}

DTYPES = [
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "longdouble", "complex64", "complex128", "clongdouble", "bool",
    "M8[ns]", "M8[us]", "M8[D]", "M8[Y]", "m8[ns]", "m8[s]", "m8[h]",
    "U1", "U7", "S1", "S5", ">f8", ">i4", ">u8", ">c16", ">M8[ms]", ">U3",
]  # fmt: skip


def make_array(dtype: str, n: int, seed: int = 0) -> np.ndarray:
    """n values of `dtype` covering its edge cases (extremes, NaN/inf/-0.0, NaT, empty strings)."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    kind = dt.kind
    if kind in "iu":
        info = np.iinfo(dt)
        arr = rng.integers(info.min, info.max, n, dtype=dt.newbyteorder("="), endpoint=True).astype(dt)
        arr[: min(n, 2)] = [info.min, info.max][: min(n, 2)]
    elif kind in "fc":
        arr = (rng.standard_normal(n) * 1e3).astype(dt)
        if kind == "c":
            arr.imag = rng.standard_normal(n)
        specials = [np.nan, np.inf, -np.inf, -0.0, np.finfo(dt).tiny, np.finfo(dt).max]
        arr[: min(n, 6)] = specials[: min(n, 6)]
    elif kind == "b":
        arr = rng.random(n) > 0.5
    elif kind in "mM":
        arr = rng.integers(-(10**6), 10**6, n).astype("i8").view(dt.newbyteorder("=")).astype(dt)
        arr[: min(n, 1)] = np.array("NaT", dtype=dt)
    elif kind == "U":
        pool = np.array(["", "é", "日本語", "a\tb", "xyzzyxy"]).astype(dt)
        arr = pool[rng.integers(0, len(pool), n)]
    else:
        pool = np.array([b"", b"\x00", b"ab\x00c", b"\xff\xfe", b"12345"]).astype(dt)
        arr = pool[rng.integers(0, len(pool), n)]
    assert arr.dtype == dt and arr.shape == (n,)
    return arr


@pytest.mark.parametrize("where", list(SIZES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_dtype_round_trips(dtype: str, where: str, check_roundtrip) -> None:
    arr = make_array(dtype, SIZES[where])
    check_roundtrip(arr)


@pytest.mark.parametrize("where", list(SIZES))
@pytest.mark.parametrize("dtype", ["float32", "float64", "int16", "complex64", ">f8", "U3", "bool", "M8[s]"])
def test_layouts_round_trip(dtype: str, where: str, check_roundtrip, same) -> None:
    n = SIZES[where] * 6
    base = make_array(dtype, n).reshape(6, -1)
    layouts = {
        "strided": base[::2, ::3],
        "transposed": base.T,
        "negative-stride": base[::-1, ::-2],
        "fortran": np.asfortranarray(base),
        "fortran-3d": np.asfortranarray(base.reshape(3, 2, -1)),
        "column": base[:, 1],
    }
    for name, arr in layouts.items():
        for back in check_roundtrip(arr):
            if name.startswith("fortran"):
                assert back.flags.f_contiguous and not back.flags.c_contiguous, name


@pytest.mark.parametrize(
    "arr",
    [
        np.array(3.5),
        np.array(np.nan, dtype="f2"),
        np.array(-7, dtype=">i8"),
        np.array("text"),
        np.array(b"by", dtype="S3"),
        np.array("NaT", dtype="M8[ns]"),
        np.zeros((0,)),
        np.zeros((0,), dtype="U4"),
        np.zeros((3, 0), dtype="i2"),
        np.zeros((0, 3), dtype="c8", order="F"),
        np.zeros((2, 0, 4), dtype=">f4"),
        np.zeros((1000, 0)),
        np.zeros((1,) * 10),
    ],
    ids=lambda a: f"{a.dtype.str}{list(a.shape)}",
)
def test_odd_shapes_round_trip(arr: np.ndarray, check_roundtrip) -> None:
    check_roundtrip(arr)


def test_threshold_decides_inline_or_member(tmp_path) -> None:
    """As in ZANJ, an array of `external_array_threshold` elements or more gets a member of its own."""
    path = tmp_path / "t.zarc"
    small, big = np.arange(THRESHOLD - 1, dtype="i4"), np.arange(THRESHOLD, dtype="i4")
    zarchive.save({"small": small, "big": big}, path)
    with zarchive.open(path) as arc:
        root = arc.manifest["root"]
        assert "$ref" not in root["small"] and root["small"]["data"] == small.tolist()
        assert root["big"]["$ref"].startswith("big.npy")
        assert list(arc.members) == ["manifest.json", root["big"]["$ref"]]
    zarchive.save({"a": small}, path, external_array_threshold=0)
    with zarchive.open(path) as arc:
        assert arc.manifest["root"]["a"]["$ref"].startswith("a.npy")
        np.testing.assert_array_equal(arc["a"], small)


def test_inline_non_finite_floats_use_exact_bytes(tmp_path) -> None:
    path = tmp_path / "f.zarc"
    arr = np.array([1.0, np.nan, -np.inf], dtype="f4")
    zarchive.save(arr, path)
    with zarchive.open(path) as arc:
        assert "base64" in arc.manifest["root"]
        assert arc[""].tobytes() == arr.tobytes()


def test_nan_payloads_survive(check_roundtrip) -> None:
    bits = np.array([0x7FF8000000000001, 0xFFF8000000000000, 0x7FF0000000000001], dtype="u8")
    for n in (3, 999):
        arr = np.resize(bits, n).view("f8")
        for back in check_roundtrip(arr):
            assert back.view("u8").tolist() == arr.view("u8").tolist()


def test_same_array_saved_twice_is_stored_once(tmp_path) -> None:
    arr = np.arange(1000.0)
    path = tmp_path / "s.zarc"
    zarchive.save({"a": arr, "b": arr, "c": [arr]}, path, compress=False)
    with zarchive.open(path) as arc:
        root = arc.manifest["root"]
        assert root["a"]["$ref"] == root["b"]["$ref"] == root["c"][0]["$ref"]
        assert [m for m in arc.members if m.endswith(".npy")] == ["a.npy"]
    back = zarchive.read(path)
    assert back["a"] is back["b"] is back["c"][0]


def test_equal_but_distinct_arrays_are_stored_separately(tmp_path) -> None:
    path = tmp_path / "s.zarc"
    zarchive.save({"a": np.arange(1000.0), "b": np.arange(1000.0)}, path, compress=False)
    with zarchive.open(path) as arc:
        assert sorted(m for m in arc.members if m.endswith(".npy")) == ["a.npy", "b.npy"]
        a, b = arc["a"], arc["b"]
    a[0] = 5
    assert b[0] == 0


def test_long_list_of_arrays(check_roundtrip) -> None:
    """Items that are members of their own inside a list longer than external_list_threshold."""
    check_roundtrip([np.full(300, i, dtype="i2") for i in range(300)])
    check_roundtrip([np.arange(3) + i for i in range(300)], external_list_threshold=2)


def test_object_array_of_serializable_items(check_roundtrip) -> None:
    arr = np.empty((2, 3), dtype=object)
    items: list[Any] = [1, "two", None, [3, (4,)], {"k": 2**80}, np.float32(0.5)]
    for i, item in enumerate(items):
        arr.flat[i] = item
    for back in check_roundtrip(arr):
        assert back.dtype == object and back.shape == (2, 3)
        assert back[1, 0] == [3, (4,)] and type(back[1, 0][1]) is tuple
    check_roundtrip(np.empty((0, 2), dtype=object))
    nested = np.empty(2, dtype=object)
    nested[0], nested[1] = np.arange(300), np.array(["x"])
    check_roundtrip(nested)


def test_object_array_of_unsaveable_items_names_the_item(tmp_path) -> None:
    arr = np.empty(3, dtype=object)
    arr[0], arr[1], arr[2] = 1, "x", object()
    with pytest.raises(zarchive.SaveError) as info:
        zarchive.save({"weights": {"arr": arr}}, tmp_path / "o.zarc")
    assert "weights/arr" in info.value.path and info.value.path.endswith("2")
    assert "builtins.object" in str(info.value)
    assert not (tmp_path / "o.zarc").exists()


@pytest.mark.parametrize(
    "arr",
    [
        np.zeros(3, dtype=[("a", "i4"), ("b", "f8")]),
        np.zeros(300, dtype=[("a", "i4")]),
        np.zeros(3, dtype="V8"),
        np.zeros(2, dtype=[("o", object)]),
    ],
    ids=["structured", "structured-large", "void", "structured-with-object"],
)
def test_structured_arrays_are_refused_clearly(arr: np.ndarray, tmp_path) -> None:
    with pytest.raises(zarchive.SaveError) as info:
        zarchive.save({"table": arr}, tmp_path / "x.zarc")
    assert info.value.path == "table"
    assert "structured" in str(info.value)


def test_npy_members_never_unpickle(tmp_path) -> None:
    """An object array is saved item by item: no .npy member holds object dtype."""
    arr = np.empty(300, dtype=object)
    arr[:] = [str(i) for i in range(300)]
    path = tmp_path / "o.zarc"
    zarchive.save(arr, path)
    with zarchive.open(path) as arc:
        assert not any(".npy" in m for m in arc.members)


def test_loaded_arrays_are_writable_copies_of_the_file(tmp_path) -> None:
    path = tmp_path / "w.zarc"
    zarchive.save({"big": np.arange(1000.0), "small": np.arange(5.0)}, path, compress=False)
    before = path.read_bytes()
    back = zarchive.read(path)
    for arr in back.values():
        assert arr.flags.writeable
        arr[0] = 42
    assert path.read_bytes() == before
    assert zarchive.read(path)["big"][0] == 0


_hyp_dtypes = st.sampled_from(["i1", "u2", ">i4", "u8", "f2", "f4", ">f8", "c8", "?", "M8[ms]", "m8[D]", "U3", "S2"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    arr=_hyp_dtypes.flatmap(
        lambda d: hnp.arrays(np.dtype(d), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=12))
    ),
    threshold=st.sampled_from([0, 50, 256]),
    fortran=st.booleans(),
)
def test_arrays_round_trip(arr: np.ndarray, threshold: int, fortran: bool, check_roundtrip) -> None:
    if fortran:
        arr = np.asfortranarray(arr)
    check_roundtrip(arr, external_array_threshold=threshold)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("text", ["a", "|a5", "=a12"])
def test_the_deprecated_bytes_alias_is_refused_without_a_warning(text: str) -> None:
    """numpy 2 warns on the 'a' alias of 'S' (found by the fuzzer: the warning escaped a read) and will
    refuse it; numpy.save writes 'S'. A dtype text from a file that uses it is a FormatError."""
    from zarchive.container.npy import dtype_from_text

    with pytest.raises(zarchive.FormatError, match="deprecated alias"):
        dtype_from_text(text, member="x.npy")
    assert dtype_from_text("|S5", member="x.npy") == np.dtype("S5")
