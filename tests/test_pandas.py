"""Exact round-trips of pandas values: every supported column dtype (inline and as members), every
kind of Index, odd labels, empty frames, random frames, pandas scalars; lazy column access; refusals
of what cannot be saved; and hostile manifests that must fail with a FormatError naming the path."""

from __future__ import annotations

import datetime as dt
import json
import math
import mmap
import struct
import zipfile
import zoneinfo
from functools import partial
from pathlib import Path
from typing import Any

import dateutil.tz
import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest
from hostile.craft import pack, unpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zarchive

DATA = Path(__file__).parent / "data"
ROWS = {"inline": 7, "member": 600}  # 600 > the default external thresholds (256)
SMALL = {"external_array_threshold": 2, "external_list_threshold": 2}  # members even for tiny frames
BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


# --- exact comparison ------------------------------------------------------------------------------
def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def _has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def assert_item_same(a: Any, b: Any, where: str) -> None:
    """One object-column item: same type; NaN (by bits), None, NA, NaT by identity; else equal repr."""
    assert type(a) is type(b), f"{where}: {type(b).__name__} instead of {type(a).__name__}"
    if isinstance(a, float):
        assert _bits(a) == _bits(b), f"{where}: {b!r} != {a!r}"
    elif isinstance(a, (pd.Timestamp, pd.Timedelta)):
        assert (a.unit, repr(a)) == (b.unit, repr(b)), where
        assert type(getattr(a, "tz", None)) is type(getattr(b, "tz", None)), where
    elif a is pd.NA or a is pd.NaT or a is None:
        assert a is b, where
    else:
        assert repr(a) == repr(b), f"{where}: {b!r} != {a!r}"


def assert_values_same(a: pd.Series | pd.Index, b: pd.Series | pd.Index, where: str) -> None:
    """The values of two Series or Indexes: same dtype, same bits (NaN payloads, -0.0), same items."""
    assert a.dtype == b.dtype and str(a.dtype) == str(b.dtype), f"{where}: dtype {b.dtype} != {a.dtype}"
    dtype = a.dtype
    if isinstance(dtype, np.dtype) and dtype != object:
        assert a.to_numpy().tobytes() == b.to_numpy().tobytes(), f"{where}: values differ"
    elif dtype == object:
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_item_same(x, y, f"{where}[{i}]")
    elif isinstance(dtype, pd.DatetimeTZDtype):
        assert type(dtype.tz) is type(b.dtype.tz), f"{where}: tz {b.dtype.tz!r} != {dtype.tz!r}"
        assert a.array.asi8.tobytes() == b.array.asi8.tobytes(), f"{where}: values differ"
    elif isinstance(dtype, pd.CategoricalDtype):
        assert a.array.codes.tobytes() == b.array.codes.tobytes(), f"{where}: codes differ"
        assert_index_same(dtype.categories, b.dtype.categories, f"{where}.categories")
        assert dtype.ordered == b.dtype.ordered, where
    elif isinstance(a.array, pd.arrays.BooleanArray | pd.arrays.IntegerArray | pd.arrays.FloatingArray):
        assert np.array_equal(a.isna(), b.isna()), f"{where}: masks differ"
        keep = ~np.asarray(a.isna())
        assert a.array._data[keep].tobytes() == b.array._data[keep].tobytes(), f"{where}: values differ"
    else:  # strings, periods
        assert list(a.isna()) == list(b.isna()), f"{where}: missing values differ"
        assert list(a[~a.isna()]) == list(b[~b.isna()]), f"{where}: values differ"


def assert_index_same(a: pd.Index, b: pd.Index, where: str = "index") -> None:
    assert type(a) is type(b), f"{where}: {type(b).__name__} instead of {type(a).__name__}"
    pdt.assert_index_equal(b, a, exact=True, check_exact=True, check_names=True, check_categorical=True)
    assert [type(n) for n in a.names] == [type(n) for n in b.names], f"{where}: names {b.names} != {a.names}"
    if isinstance(a, pd.RangeIndex):
        assert (a.start, a.stop, a.step) == (b.start, b.stop, b.step), where
    elif isinstance(a, pd.MultiIndex):
        for i, (x, y) in enumerate(zip(a.levels, b.levels, strict=True)):
            assert_index_same(x, y, f"{where}.levels[{i}]")
        assert [c.tobytes() for c in a.codes] == [c.tobytes() for c in b.codes], f"{where}: codes differ"
    else:
        if isinstance(a, pd.DatetimeIndex | pd.TimedeltaIndex):
            assert a.freq == b.freq, f"{where}: freq {b.freq} != {a.freq}"
        assert_values_same(a, b, where)


def assert_series_same(a: pd.Series, b: pd.Series, where: str = "series") -> None:
    assert type(b) is pd.Series, where
    pdt.assert_series_equal(b, a, check_exact=True, check_index_type=True, check_series_type=True,
                            check_names=True, check_freq=True, check_flags=True)  # fmt: skip
    assert type(a.name) is type(b.name) and a.attrs == b.attrs, where
    assert_index_same(a.index, b.index, f"{where}.index")
    assert_values_same(a, b, where)


def assert_frame_same(a: pd.DataFrame, b: pd.DataFrame, where: str = "frame") -> None:
    assert type(b) is pd.DataFrame, where
    pdt.assert_frame_equal(b, a, check_exact=True, check_dtype=True, check_index_type=True,
                           check_column_type=True, check_frame_type=True, check_names=True,
                           check_flags=True, check_freq=True)  # fmt: skip
    assert a.attrs == b.attrs, where
    assert_index_same(a.index, b.index, f"{where}.index")
    assert_index_same(a.columns, b.columns, f"{where}.columns")
    for i in range(a.shape[1]):
        assert_values_same(a.iloc[:, i], b.iloc[:, i], f"{where}[{i}]")


def roundtrip_frame(df: pd.DataFrame, path: Path, **settings: Any) -> None:
    """Every reading route gives back exactly `df`: read, eager read, nested in a dict, column by column
    (the first and last few columns of wide frames)."""
    settings.setdefault("durable", False)  # no fsync: these files are thrown away
    zarchive.save(df, path, **settings)
    assert_frame_same(df, zarchive.read(path), "read")
    assert_frame_same(df, zarchive.read(path, lazy=False), "read-eager")
    nested = path.with_name(path.stem + "-nested.zarc")
    zarchive.save({"df": df, "note": "next to a frame"}, nested, **settings)
    with zarchive.open(nested) as arc:
        assert_frame_same(df, arc["df"], "open[df]")
        keys = arc.keys("df")
        assert len(keys) == df.shape[1] and len(set(keys)) == len(keys)
        for i, key in enumerate(keys):
            if 4 <= i < len(keys) - 4:
                continue
            path_key = key.replace("~", "~0").replace("/", "~1")
            assert_series_same(df.iloc[:, i], arc[f"df/{path_key}"], f"column {key!r}")


# --- columns of every supported dtype ---------------------------------------------------------------
def _ints(dtype: str, n: int, rng: np.random.Generator) -> np.ndarray:
    info = np.iinfo(dtype)
    arr = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    arr[: min(n, 2)] = [info.min, info.max][: min(n, 2)]
    return arr


def _floats(dtype: str, n: int, rng: np.random.Generator) -> np.ndarray:
    arr = (rng.standard_normal(n) * 100).astype(dtype)
    specials = np.array([np.nan, -0.0, np.inf, -np.inf], dtype=dtype)
    arr[: min(n, 4)] = specials[: min(n, 4)]
    if n > 5 and dtype == "float64":  # a NaN with a payload must keep its bits
        arr[5] = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000123))[0]
    return arr


def _strings(n: int, rng: np.random.Generator, escapes: bool) -> list[Any]:
    words = ["alpha", "Grüße", "日本語", "", " spaced ", "emoji 🎉"]
    if escapes:
        words += ['say "hi"', "back\\slash", "new\nline", "tab\t", "\x00nul", "\x7f"]
    out: list[Any] = [f"{words[i % len(words)]}{int(v)}" for i, v in enumerate(rng.integers(0, 1000, n))]
    for i in range(0, n, 5):
        out[i] = None
    return out


def _datetimes(unit: str, n: int, rng: np.random.Generator) -> np.ndarray:
    arr = rng.integers(-(10**9), 2 * 10**9, n).astype("M8[s]").astype(f"M8[{unit}]")
    if unit == "ns":
        arr = arr + rng.integers(0, 10**9, n).astype("m8[ns]")
    if n > 1:
        arr[1] = np.datetime64("NaT")
    return arr


def _tz_column(tz: Any, n: int, rng: np.random.Generator) -> Any:
    return pd.array(_datetimes("ns", n, rng)).tz_localize("UTC").tz_convert(tz)


def _masked(dtype: str, n: int, rng: np.random.Generator) -> Any:
    if dtype == "boolean":
        values: list[Any] = list(rng.random(n) < 0.5)
    elif dtype.startswith("Float"):
        values = list(_floats(dtype.lower(), n, rng)[4:]) + [1.5] * min(n, 4)
    else:
        values = list(_ints(dtype.lower(), n, rng))
    for i in range(1, n, 3):
        values[i] = None
    return pd.array(values, dtype=dtype)


def _objects(n: int) -> np.ndarray:
    items = [1, "text", None, math.nan, pd.NA, 2.5, (1, "a"), pd.Timestamp("2021-03-04 05:06:07.000000008"),
             b"bytes", [1, [2]], {"k": 1}, True, pd.NaT, np.int16(7), dt.date(2020, 1, 2), 2**70]  # fmt: skip
    out = np.empty(n, dtype=object)
    for i in range(n):
        out[i] = items[i % len(items)]
    return out


def _categorical(kind: str, n: int, rng: np.random.Generator) -> pd.Categorical:
    pick = rng.integers(-1, 3, n)  # -1: missing
    if kind == "str":
        return pd.Categorical.from_codes(pick, categories=["low", "mid", "high"])
    if kind == "int-ordered":
        return pd.Categorical.from_codes(pick, dtype=pd.CategoricalDtype([30, 10, 20], ordered=True))
    if kind == "datetime":
        return pd.Categorical.from_codes(pick, categories=pd.date_range("2020", periods=3, freq="D"))
    return pd.Categorical.from_codes(pick, dtype=pd.CategoricalDtype(pd.Index([1, "b", 2.5], dtype=object)))


COLUMN_KINDS: dict[str, Any] = {
    **{d: partial(_ints, d) for d in ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]},
    **{d: partial(_floats, d) for d in ["float16", "float32", "float64"]},
    "bool": lambda n, r: r.random(n) < 0.5,
    "complex64": lambda n, r: (r.standard_normal(n) + 1j * r.standard_normal(n)).astype("complex64"),
    "complex128": lambda n, r: r.standard_normal(n) + 1j * np.append([np.nan], r.standard_normal(n))[:n],
    "str": lambda n, r: pd.array(_strings(n, r, False), dtype="str"),
    "str-escapes": lambda n, r: pd.array(_strings(n, r, True), dtype="str"),
    "string": lambda n, r: pd.array(_strings(n, r, True), dtype="string"),
    "string-no-missing": lambda n, r: pd.array([f"s{i}" for i in range(n)], dtype="string"),
    "object-mixed": lambda n, r: _objects(n),
    "object-str": lambda n, r: np.array(_strings(n, r, True), dtype=object),
    "object-str-nan": lambda n, r: np.array([math.nan if x is None else x for x in _strings(n, r, False)], dtype=object),
    "object-str-none-and-nan": lambda n, r: np.array(["a", None, math.nan] * (n // 3) + ["b"] * (n % 3), dtype=object),
    # "str" as pandas makes it without pyarrow (pyarrow's strings cannot hold a lone surrogate)
    "str-surrogates": lambda n, r: pd.array(
        [f"x\ud800{i}" if i % 2 else None for i in range(n)], dtype=pd.StringDtype("python", na_value=np.nan)
    ),
    "object-str-surrogates": lambda n, r: np.array([f"\udfff{i}" for i in range(n)], dtype=object),
    **{f"category-{k}": partial(_categorical, k) for k in ["str", "int-ordered", "datetime", "object"]},
    **{f"datetime64[{u}]": partial(_datetimes, u) for u in ["s", "ms", "us", "ns"]},
    "tz-zoneinfo": lambda n, r: _tz_column(BERLIN, n, r),
    "tz-zoneinfo-utc": lambda n, r: _tz_column(zoneinfo.ZoneInfo("UTC"), n, r),
    "tz-utc": lambda n, r: _tz_column(dt.UTC, n, r),
    "tz-fixed-offset": lambda n, r: _tz_column(dt.timezone(dt.timedelta(hours=5, minutes=30)), n, r),
    "tz-named-offset": lambda n, r: _tz_column(dt.timezone(-dt.timedelta(hours=3), "BRT"), n, r),
    "tz-dateutil": lambda n, r: _tz_column(dateutil.tz.gettz("America/New_York"), n, r),
    "tz-dateutil-utc": lambda n, r: _tz_column(dateutil.tz.tzutc(), n, r),
    "tz-dateutil-offset": lambda n, r: _tz_column(dateutil.tz.tzoffset("X", 3600), n, r),
    "tz-seconds-unit": lambda n, r: pd.array(_datetimes("s", n, r)).tz_localize("UTC").tz_convert(BERLIN),
    "timedelta64[ns]": lambda n, r: _datetimes("ns", n, r) - np.datetime64("2000-01-01", "ns"),
    "timedelta64[s]": lambda n, r: _datetimes("s", n, r) - np.datetime64("2000-01-01", "s"),
    **{d: partial(_masked, d) for d in
       ["Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Float32", "Float64", "boolean"]},
    "Int64-no-missing": lambda n, r: pd.array(np.arange(n), dtype="Int64"),
    "period[M]": lambda n, r: pd.period_range("2020-01", periods=n, freq="M").array,
}  # fmt: skip


def make_column(kind: str, n: int, seed: int = 0) -> Any:
    return COLUMN_KINDS[kind](n, np.random.default_rng(seed))


def as_series(values: Any, index: pd.Index | None = None, name: Any = None) -> pd.Series:
    """A Series of exactly these values (pandas would turn an object array of str into 'str')."""
    dtype = object if getattr(values, "dtype", None) == object else None
    return pd.Series(values, index=index, name=name, dtype=dtype)


@pytest.mark.parametrize("size", list(ROWS), ids=list(ROWS))
@pytest.mark.parametrize("kind", list(COLUMN_KINDS))
def test_column_round_trips(tmp_path: Path, kind: str, size: str) -> None:
    n = ROWS[size]
    values = make_column(kind, n)
    index = pd.Index(np.arange(n) * 3, name="row")
    df = pd.DataFrame({"col": as_series(values, index), "other": np.arange(n, dtype=np.int32)}, index=index)
    assert df["col"].dtype == values.dtype
    roundtrip_frame(df, tmp_path / "f.zarc")
    s = as_series(values, name=("series", 1))
    zarchive.save(s, tmp_path / "s.zarc", durable=False)
    assert_series_same(s, zarchive.read(tmp_path / "s.zarc"))


@pytest.mark.parametrize(
    ("kind", "layout"),
    [
        ("object-str", "utf8"),
        ("object-str-nan", "utf8"),
        ("object-str-none-and-nan", "items"),
        ("object-mixed", "items"),
        ("str-escapes", "utf8"),
        ("category-str", "categorical"),
    ],
)
def test_text_columns_take_the_string_layout(tmp_path: Path, kind: str, layout: str) -> None:
    """Text columns are stored as one string member (Arrow's layout, "utf8"), whatever their dtype, unless
    the missing values differ in kind (None next to NaN): then item by item, so each comes back as it was."""
    df = pd.DataFrame({"t": as_series(make_column(kind, ROWS["member"]))})
    zarchive.save(df, tmp_path / "t.zarc", durable=False)
    with zarchive.open(tmp_path / "t.zarc") as arc:
        assert arc.manifest["root"]["data"][0]["layout"] == layout


@pytest.mark.parametrize("kind", [k for k in COLUMN_KINDS if k not in ("float16",)])
def test_index_of_each_dtype_round_trips(tmp_path: Path, kind: str) -> None:
    values = make_column(kind, 9, seed=1)
    if kind.startswith("object"):
        idx = pd.Index(values, name="labels", dtype=object)
    else:
        idx = pd.Index(values, name="labels")
    zarchive.save({"idx": idx}, tmp_path / "i.zarc", **SMALL)
    assert_index_same(idx, zarchive.read(tmp_path / "i.zarc")["idx"])


def test_frames_in_members_are_named_by_object_path_and_mapped(tmp_path: Path) -> None:
    n = ROWS["member"]
    df = pd.DataFrame({"loss": np.linspace(0, 1, n), "name": pd.array(_strings(n, np.random.default_rng(0), False),
                                                                          dtype="str")})  # fmt: skip
    obj = {"metrics": df, "config": {"lr": 0.1}, "step": 3}
    zarchive.save(obj, tmp_path / "m.zarc", compress=False)
    names = set(zipfile.ZipFile(tmp_path / "m.zarc").namelist())
    assert {"metrics/loss.npy", "metrics/name.utf8", "metrics/name/offsets.npy", "metrics/name/valid.npy"} <= names
    back = zarchive.read(tmp_path / "m.zarc")
    assert back["config"] == {"lr": 0.1} and back["step"] == 3
    assert_frame_same(df, back["metrics"])
    base = back["metrics"]["loss"].to_numpy()
    while isinstance(base, np.ndarray) and base.base is not None:  # a view of the mapped file, not a copy
        base = base.base
    assert isinstance(base, memoryview | mmap.mmap)
    zarchive.save(obj, tmp_path / "z.zarc")
    assert "metrics/name.utf8.zst" in zipfile.ZipFile(tmp_path / "z.zarc").namelist()


def test_numeric_columns_are_written_without_copies() -> None:
    from zarchive.engine.context import SaveContext

    za = zarchive.ZArchive()
    df = pd.DataFrame({"a": np.arange(1000.0), "b": np.arange(1000), "c": pd.array(range(1000), dtype="Int32")})
    ctx = SaveContext(za.registry, za.settings)
    ctx.save({"df": df})
    plans = {m.base_name: m for m in ctx.members}
    for name, column in (("df/a.npy", df["a"].to_numpy()), ("df/b.npy", df["b"].to_numpy()),
                         ("df/c.npy", df["c"].array._data)):  # fmt: skip
        *_, (_, data) = plans[name].parts()
        assert np.shares_memory(np.frombuffer(data, dtype=np.uint8), column), name


@pytest.mark.skipif(_has_pyarrow(), reason="pyarrow is installed")
def test_pyarrow_strings_load_without_pyarrow(tmp_path: Path) -> None:
    s = pd.Series(pd.array(["a", None, "b"], dtype="string"))
    zarchive.save(s, tmp_path / "s.zarc")
    parts = unpack((tmp_path / "s.zarc").read_bytes())
    parts.manifest["root"]["values"]["storage"] = "pyarrow"  # as written where pyarrow is installed
    (tmp_path / "p.zarc").write_bytes(pack(parts))
    with pytest.warns(UserWarning, match="pyarrow"):
        assert_series_same(s, zarchive.read(tmp_path / "p.zarc"))
    with pytest.raises(zarchive.FieldMismatchError):
        zarchive.read(tmp_path / "p.zarc", error_mode="except")


def test_lazy_column_reads_only_that_column(tmp_path: Path) -> None:
    n = ROWS["member"]
    df = pd.DataFrame({"a": np.arange(n, dtype=np.float64), "b": np.arange(n, dtype=np.float64) * 2},
                      index=pd.date_range("2020", periods=n, freq="min", name="t"))  # fmt: skip
    path = tmp_path / "lazy.zarc"
    zarchive.save({"df": df}, path, compress=False)
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:  # damage the data of column b only
        info = z.getinfo("df/b.npy")
    start = info.header_offset + 30 + len(info.filename) + struct.unpack("<H", raw[info.header_offset + 28 :][:2])[0]
    raw[start + info.file_size - 8] ^= 0xFF
    path.write_bytes(bytes(raw))
    with zarchive.open(path) as arc:
        assert arc.keys("df") == ["a", "b"]
        assert_series_same(df["a"], arc["df/a"])
        assert "DataFrame 600 rows x 2 columns" in arc.summary("df")
        with pytest.raises(zarchive.IntegrityError) as err:
            arc["df/b"]
        assert err.value.member == "df/b.npy"


# --- labels, indexes, shapes ------------------------------------------------------------------------
INDEXES: dict[str, Any] = {
    "range-stepped": lambda n: pd.RangeIndex(5, 5 + 3 * n, 3, name="r"),
    "range-negative-step": lambda n: pd.RangeIndex(100, 100 - 2 * n, -2),
    "int-named-tuple": lambda n: pd.Index(np.arange(n) * 7, name=("a", 1)),
    "str": lambda n: pd.Index([f"row{i}" for i in range(n)], name="id"),
    "object-mixed": lambda n: pd.Index([i if i % 2 else f"s{i}" for i in range(n)], dtype=object),
    "duplicates": lambda n: pd.Index([i // 2 for i in range(n)], name=0),
    "datetime-freq": lambda n: pd.date_range("2021-01-01", periods=n, freq="D", name="day"),
    "datetime-tz-freq": lambda n: pd.date_range("2021-03-27", periods=n, freq="h", tz=BERLIN),
    "datetime-no-freq": lambda n: pd.DatetimeIndex(_datetimes("ms", n, np.random.default_rng(2))),
    "timedelta-freq": lambda n: pd.timedelta_range("1s", periods=n, freq="15s", name="dt"),
    "categorical": lambda n: pd.CategoricalIndex(["a", "b", "c"] * (n // 3) + ["a"] * (n % 3), name="cat"),
    "period": lambda n: pd.period_range("2020Q1", periods=n, freq="Q", name="q"),
    "float": lambda n: pd.Index(np.linspace(-1, 1, n)),
    "bool": lambda n: pd.Index([bool(i % 2) for i in range(n)]),
    "nullable": lambda n: pd.Index(pd.array([None if i == 1 else i for i in range(n)], dtype="Int32")),
    "multi": lambda n: pd.MultiIndex.from_arrays(
        [[f"g{i % 3}" for i in range(n)], np.arange(n) * 10, pd.date_range("2020", periods=n, freq="s")],
        names=["group", None, ("time", 0)]),
    "multi-missing": lambda n: pd.MultiIndex.from_arrays([[None if i % 4 == 1 else f"k{i % 3}" for i in range(n)],
                                                          pd.array(range(n), dtype="Int16")]),
    "multi-unused-levels": lambda n: pd.MultiIndex(levels=[["z", "y", "x"], [3, 1]],
                                                   codes=[[2, 0] * (n // 2) + [2] * (n % 2), [0] * n]),
}  # fmt: skip


@pytest.mark.parametrize("size", list(ROWS), ids=list(ROWS))
@pytest.mark.parametrize("kind", list(INDEXES))
def test_row_and_column_indexes_round_trip(tmp_path: Path, kind: str, size: str) -> None:
    n = ROWS[size]
    df = pd.DataFrame({"x": np.arange(n), "y": pd.array(["v"] * n, dtype="str")}, index=INDEXES[kind](n))
    roundtrip_frame(df, tmp_path / "rows.zarc")
    n = min(n, 260)  # still more labels than external_list_threshold
    wide = pd.DataFrame(np.arange(2 * n).reshape(2, n), columns=INDEXES[kind](n))
    roundtrip_frame(wide, tmp_path / "cols.zarc")


def test_brain_networks_multiindex_columns(tmp_path: Path) -> None:
    df = pd.read_csv(DATA / "brain_networks_head.csv", header=[0, 1, 2], index_col=0)
    assert isinstance(df.columns, pd.MultiIndex) and df.columns.names == ["network", "node", "hemi"]
    roundtrip_frame(df, tmp_path / "b.zarc")
    roundtrip_frame(df, tmp_path / "b-small.zarc", **SMALL)
    with zarchive.open(tmp_path / "b.zarc") as arc:
        assert arc.keys()[:3] == ["1,1,lh", "1,1,rh", "2,1,lh"]
        assert_series_same(df[("1", "1", "rh")], arc["1,1,rh"])


def test_iris(tmp_path: Path) -> None:
    df = pd.read_csv(DATA / "iris.csv")
    df["species_cat"] = df["species"].astype("category")
    roundtrip_frame(df, tmp_path / "iris.zarc")
    roundtrip_frame(df, tmp_path / "iris-small.zarc", **SMALL)


@pytest.mark.skipif(not (DATA.parent.parent.parent / "shared" / "data").is_dir(), reason="no shared data")
def test_shared_data_sets_in_full(tmp_path: Path) -> None:
    shared = DATA.parent.parent.parent / "shared" / "data"
    roundtrip_frame(pd.read_csv(shared / "brain_networks.csv", header=[0, 1, 2], index_col=0), tmp_path / "b.zarc")
    roundtrip_frame(pd.read_csv(shared / "iris.csv"), tmp_path / "i.zarc")


LABELS: dict[str, list[Any]] = {
    "ints": [0, 1, 2],
    "tuples": [("a", 1), ("a", 2), ("b", 1)],
    "mixed": [1, "a", ("t", 2)],
    "duplicates": ["a", "b", "a"],
    "odd-strings": ["", "a/b", "x~y"],
    "none-and-nan": [None, math.nan, "n"],
    "timestamps": list(pd.date_range("2020", periods=3, freq="D")),
    "colliding-keys": ["1", 1, "1#1"],
}


@pytest.mark.parametrize("kind", list(LABELS))
def test_column_labels_of_any_type(tmp_path: Path, kind: str) -> None:
    labels = LABELS[kind]
    df = pd.DataFrame([[1, "x", 2.5], [3, "y", 4.5]])
    df.columns = pd.Index(labels, tupleize_cols=False) if kind == "tuples" else labels
    df.columns.name = "features"
    roundtrip_frame(df, tmp_path / "l.zarc")


def test_duplicate_columns_stay_reachable(tmp_path: Path) -> None:
    df = pd.DataFrame([[1, 2, 3]], columns=["a", "a", "b"])
    zarchive.save(df, tmp_path / "d.zarc")
    with zarchive.open(tmp_path / "d.zarc") as arc:
        assert arc.keys() == ["a", "a#1", "b"]
        assert arc["a#1"].tolist() == [2] and arc["a#1"].name == "a"


def test_many_columns_lazy(tmp_path: Path) -> None:
    df = pd.DataFrame(np.arange(600).reshape(2, 300), columns=[f"c{i}" for i in range(300)])
    roundtrip_frame(df.iloc[:, :40], tmp_path / "w40.zarc")
    zarchive.save(df, tmp_path / "w.zarc")
    assert_frame_same(df, zarchive.read(tmp_path / "w.zarc"))
    with zarchive.open(tmp_path / "w.zarc") as arc:
        assert arc.keys() == list(df.columns)
        assert_series_same(df["c299"], arc["c299"])


EMPTY: dict[str, Any] = {
    "nothing": lambda: pd.DataFrame(),
    "no-rows-typed": lambda: pd.DataFrame({k: pd.Series(make_column(k, 0)) for k in
                                           ["int8", "str", "string", "category-str", "tz-zoneinfo", "Int64", "object-mixed"]}),
    "no-columns": lambda: pd.DataFrame(index=pd.date_range("2020", periods=3, freq="D", name="d")),
    "no-columns-object": lambda: pd.DataFrame(index=[1, 2], columns=pd.Index([], dtype=object)),
    "no-rows-multi": lambda: pd.DataFrame(columns=pd.MultiIndex.from_tuples([("a", 1)]), dtype=float),
}  # fmt: skip


@pytest.mark.parametrize("kind", list(EMPTY))
def test_empty_frames(tmp_path: Path, kind: str) -> None:
    df = EMPTY[kind]()
    roundtrip_frame(df, tmp_path / "e.zarc")
    roundtrip_frame(df, tmp_path / "e-small.zarc", **SMALL)


@pytest.mark.parametrize("name", [None, "s", 0, 2.5, ("a", 1), pd.Timestamp("2020-01-01", tz="UTC"), True])
def test_series_names_and_attrs(tmp_path: Path, name: Any) -> None:
    s = pd.Series(pd.array(["x", None], dtype="string"), name=name)
    s.attrs = {"unit": "m", "n": 2}
    zarchive.save([s, pd.Series([], dtype="str", name=name)], tmp_path / "s.zarc")
    back = zarchive.read(tmp_path / "s.zarc")
    assert_series_same(s, back[0])
    assert back[0].name == name


def test_frame_attrs_and_flags(tmp_path: Path) -> None:
    df = pd.DataFrame({"a": [1, 2]}).set_flags(allows_duplicate_labels=False)
    df.attrs = {"source": "test", "version": (1, 2)}
    roundtrip_frame(df, tmp_path / "a.zarc")
    assert zarchive.read(tmp_path / "a.zarc").flags.allows_duplicate_labels is False


# --- pandas scalars ---------------------------------------------------------------------------------
SCALARS: dict[str, Any] = {
    "timestamp-ns": pd.Timestamp("2021-03-04 05:06:07.123456789"),
    "timestamp-s": pd.Timestamp(np.datetime64("1677-01-01T00:00:00", "s")),
    "timestamp-zoneinfo": pd.Timestamp("2021-07-31 02:30", tz=BERLIN),
    "timestamp-dst-fold": pd.Timestamp("2021-10-31 00:30", tz="UTC").tz_convert(BERLIN),
    "timestamp-offset": pd.Timestamp("2021-01-01 12:00", tz=dt.timezone(dt.timedelta(hours=-7))),
    "timestamp-dateutil": pd.Timestamp("2021-01-01", tz=dateutil.tz.gettz("Asia/Tokyo")),
    "timedelta": pd.Timedelta(days=-3, nanoseconds=5),
    "timedelta-s": pd.Timedelta(np.timedelta64(10**12, "s")),
    "nat": pd.NaT,
    "na": pd.NA,
    "period": pd.Period("2020-05", freq="M"),
    "period-quarter": pd.Period("2020Q3", freq="Q-JAN"),
}


def test_pandas_scalars_in_a_config(tmp_path: Path) -> None:
    config = dict(SCALARS, nested=[pd.NA, pd.NaT, None, math.nan])
    zarchive.save(config, tmp_path / "c.zarc")
    back = zarchive.read(tmp_path / "c.zarc")
    assert list(back) == list(config)
    for key, value in SCALARS.items():
        assert_item_same(value, back[key], key)
        if isinstance(value, pd.Timestamp):
            assert value.asm8 == back[key].asm8 and value.fold == back[key].fold, key
    for i, (x, y) in enumerate(zip(config["nested"], back["nested"], strict=True)):
        assert_item_same(x, y, f"nested[{i}]")
    with zarchive.open(tmp_path / "c.zarc") as arc:
        assert "pandas Timestamp 2021-03-04T05:06:07.123456789" == arc.summary("timestamp-ns")


def test_pytz_zones(tmp_path: Path) -> None:
    pytz = pytest.importorskip("pytz")
    for tz in (pytz.timezone("America/Chicago"), pytz.utc, pytz.FixedOffset(-150)):
        s = pd.Series(pd.date_range("2020-03-07", periods=30, freq="7h", tz=tz))
        zarchive.save({"s": s, "t": s.iloc[3]}, tmp_path / "p.zarc", **SMALL)
        back = zarchive.read(tmp_path / "p.zarc")
        assert_series_same(s, back["s"])
        assert_item_same(s.iloc[3], back["t"], "t")


# --- random frames ----------------------------------------------------------------------------------
_NA_OR = st.sampled_from([None, math.nan, pd.NA])
_HYP_KINDS: dict[str, Any] = {
    "int64": lambda n: st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n).map(
        lambda v: np.array(v, dtype=np.int64)),
    "uint8": lambda n: st.lists(st.integers(0, 255), min_size=n, max_size=n).map(lambda v: np.array(v, np.uint8)),
    "float64": lambda n: st.lists(st.floats(), min_size=n, max_size=n).map(lambda v: np.array(v, np.float64)),
    "float32": lambda n: st.lists(st.floats(width=32), min_size=n, max_size=n).map(lambda v: np.array(v, np.float32)),
    "bool": lambda n: st.lists(st.booleans(), min_size=n, max_size=n).map(lambda v: np.array(v, dtype=bool)),
    "str": lambda n: st.lists(st.text(max_size=8) | st.none(), min_size=n, max_size=n).map(
        lambda v: pd.array(v, dtype="str")),
    "string": lambda n: st.lists(st.text(max_size=8) | _NA_OR, min_size=n, max_size=n).map(
        lambda v: pd.array(v, dtype="string")),
    "object": lambda n: st.lists(st.integers() | st.floats() | st.text(max_size=5) | st.booleans() | _NA_OR,
                                 min_size=n, max_size=n).map(lambda v: _object_array(v)),
    "Int64": lambda n: st.lists(st.integers(-(2**63), 2**63 - 1) | st.none(), min_size=n, max_size=n).map(
        lambda v: pd.array(v, dtype="Int64")),
    "Float32": lambda n: st.lists(st.floats(width=32) | st.none(), min_size=n, max_size=n).map(
        lambda v: pd.array(v, dtype="Float32")),
    "boolean": lambda n: st.lists(st.booleans() | st.none(), min_size=n, max_size=n).map(
        lambda v: pd.array(v, dtype="boolean")),
    "category": lambda n: st.lists(st.sampled_from(["a", "b", "c"]) | st.none(), min_size=n, max_size=n).map(
        lambda v: pd.Categorical(v, categories=["c", "a", "b", "unused"])),
    "datetime": lambda n: st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n).map(
        lambda v: np.array(v, dtype=np.int64).view("M8[ns]")),
    "datetime-tz": lambda n: st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n).map(
        lambda v: pd.array(np.array(v, dtype=np.int64).view("M8[ns]")).tz_localize("UTC").tz_convert(BERLIN)),
    "timedelta": lambda n: st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n).map(
        lambda v: np.array(v, dtype=np.int64).view("m8[us]")),
}  # fmt: skip


def _object_array(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


@st.composite
def frames(draw: st.DrawFn) -> pd.DataFrame:
    n = draw(st.integers(0, 12))
    kinds = draw(st.lists(st.sampled_from(list(_HYP_KINDS)), max_size=5))
    labels = draw(st.lists(st.text(max_size=3) | st.integers(-3, 3), min_size=len(kinds), max_size=len(kinds)))
    data = {i: draw(_HYP_KINDS[k](n)) for i, k in enumerate(kinds)}
    index = draw(st.sampled_from(["range", "ints", "strs", "dates"]))
    idx: pd.Index = {
        "range": pd.RangeIndex(0, 2 * n, 2),
        "ints": pd.Index(draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n)), dtype=np.int64),
        "strs": pd.Index([f"r{i}" for i in range(n)], name="rows"),
        "dates": pd.date_range("2000", periods=n, freq="D"),
    }[index]
    df = pd.DataFrame(data, index=idx)
    df.columns = pd.Index(labels, dtype=object)
    return df


@given(df=frames(), external=st.booleans())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_random_frames_round_trip(tmp_path: Path, df: pd.DataFrame, external: bool) -> None:
    roundtrip_frame(df, tmp_path / "h.zarc", **(SMALL if external else {}))


# --- what is refused ----------------------------------------------------------------------------------
REFUSED: dict[str, Any] = {
    "sparse": (lambda: pd.arrays.SparseArray([0, 1, 0]), "Sparse"),
    "interval": (lambda: pd.arrays.IntervalArray.from_breaks([0, 1, 2, 3]), "interval"),
    "tzlocal": (lambda: pd.array(np.arange(3).astype("M8[s]")).tz_localize(dateutil.tz.tzlocal()), "tzlocal"),
}


@pytest.mark.parametrize("kind", list(REFUSED))
def test_unsupported_columns_raise_naming_the_column(tmp_path: Path, kind: str) -> None:
    make, word = REFUSED[kind]
    df = pd.DataFrame({"ok": [1, 2, 3], "bad col": make()})
    with pytest.raises(zarchive.SaveError, match=word) as err:
        zarchive.save({"run": {"table": df}}, tmp_path / "x.zarc")
    assert err.value.path == "run/table/bad col"
    assert "bad col" in str(err.value)
    with pytest.raises(zarchive.SaveError, match=word):
        zarchive.save(pd.Series(make()), tmp_path / "y.zarc")
    assert not (tmp_path / "x.zarc").exists()


def test_unsupported_indexes_raise(tmp_path: Path) -> None:
    df = pd.DataFrame({"a": [1, 2]}, index=pd.IntervalIndex.from_breaks([0, 1, 2]))
    with pytest.raises(zarchive.SaveError, match="IntervalIndex") as err:
        zarchive.save({"df": df}, tmp_path / "x.zarc")
    assert err.value.path == "df/(index)"


# --- hostile manifests --------------------------------------------------------------------------------
def _frame_node(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["root"]["df"]


def _col(name: str) -> Any:
    return lambda m: _frame_node(m)["data"][["i", "s", "c", "tz", "m"].index(name)]


HOSTILE: dict[str, tuple[Any, str]] = {
    "short-column": (lambda m: _frame_node(m).__setitem__("shape", [7, 5]), "df"),
    "column-not-array": (lambda m: _frame_node(m)["data"].__setitem__(0, {"a": 1}), "df/i"),
    "column-2d": (lambda m: _col("i")(m).__setitem__("shape", [3, 2]), "df/i"),
    "codes-out-of-range": (lambda m: _col("c")(m)["codes"].__setitem__("data", [5, 0, 0, 0, 0, 0]), "df/c"),
    "codes-float": (lambda m: _col("c")(m).__setitem__("codes", {"$type": "numpy.ndarray", "dtype": "<f8",
                                                                  "shape": [6], "data": [0.0] * 6}), "df/c"),
    "string-count": (lambda m: _col("s")(m).__setitem__("count", 3), "df/s"),
    "string-values-not-str": (lambda m: _col("s")(m).__setitem__("values", [1, 2, 3, 4, 5]), "df/s"),
    "string-storage": (lambda m: _col("s")(m).__setitem__("storage", "evil"), "df/s"),
    "mask-not-bool": (lambda m: _col("m")(m)["mask"].__setitem__("dtype", "<i1"), "df/m/mask"),
    "masked-dtype": (lambda m: _col("m")(m).__setitem__("dtype", "Int8"), "df/m"),
    "unknown-layout": (lambda m: _col("m")(m).__setitem__("layout", "pickle"), "df/m"),
    "tz-traversal": (lambda m: _col("tz")(m).__setitem__("tz", "../../etc/passwd"), "df/tz"),
    "tz-unknown-zone": (lambda m: _col("tz")(m).__setitem__("tz", "Mars/Olympus"), "df/tz"),
    "tz-dateutil-unknown": (lambda m: _col("tz")(m).update(tz="Mars/Olympus", tz_lib="dateutil"), "df/tz"),
    "tz-lib": (lambda m: _col("tz")(m).__setitem__("tz_lib", "os"), "df/tz"),
    "index-class": (lambda m: _frame_node(m)["columns"].__setitem__("class", "IntervalIndex"), "df/(columns)"),
    "index-freq": (lambda m: _frame_node(m)["index"].__setitem__("freq", "__import__('os')"), "df/(index)"),
    "index-freq-mismatch": (lambda m: _frame_node(m)["index"].__setitem__("freq", "h"), "df/(index)"),
    "range-step-0": (lambda m: _frame_node(m).__setitem__("columns", {"$type": "pandas.Index", "kind": "range",
                                                                       "start": 0, "stop": 5, "step": 0}), "df"),
}  # fmt: skip


@pytest.fixture(scope="module")
def hostile_base(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    df = pd.DataFrame(
        {
            "i": np.arange(6),
            "s": pd.array(["a", None, "b", "c", "d", "e"], dtype="str"),
            "c": pd.Categorical(["x", "y"] * 3),
            "tz": pd.date_range("2020", periods=6, freq="h", tz=BERLIN),
            "m": pd.array([1, None, 2, 3, 4, 5], dtype="Int64"),
        },
        index=pd.date_range("2020", periods=6, freq="D"),
    )
    path = tmp_path_factory.mktemp("hostile") / "base.zarc"
    zarchive.save({"df": df}, path)
    return path.read_bytes()


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_manifests_fail_cleanly(tmp_path: Path, hostile_base: bytes, case: str) -> None:
    edit, where = HOSTILE[case]
    parts = unpack(hostile_base)
    edit(parts.manifest)
    path = tmp_path / "h.zarc"
    path.write_bytes(pack(parts))
    with pytest.raises(zarchive.ZArchiveError) as err:
        zarchive.read(path)
    assert isinstance(err.value, zarchive.FormatError | zarchive.UnknownTypeError), repr(err.value)
    assert err.value.path is not None and err.value.path.startswith(where), f"{err.value.path!r}: {err.value}"


def test_hostile_string_member(tmp_path: Path) -> None:
    # a lone surrogate: UTF-8 cannot hold it, so the column is written as escaped .jsonl
    s = pd.Series(pd.array([f"v{i}" for i in range(300)] + ["\ud800"], dtype=pd.StringDtype("python", na_value=np.nan)))
    zarchive.save({"s": s}, tmp_path / "ok.zarc")
    parts = unpack((tmp_path / "ok.zarc").read_bytes())
    (name,) = [n for n in parts.members if n.endswith(".jsonl.zst")]
    good = parts.members[name]
    bad_members = {
        "number-line": good.replace(b'"v7"', b"1234", 1),
        "unquoted-quote": good.replace(b'"v7"', b'"v"7', 1),
        "null-line": good.replace(b'"v7"', b"null", 1),
        "control-char": good.replace(b'"v7"', b'"v\x017"', 1),
        "missing-newline": good[:-1],
        "bad-utf8": good.replace(b'"v7"', b'"\xff7"', 1),
        "extra-line": good + b'"v301"\n',
    }
    for case, data in bad_members.items():
        p = parts.copy()
        p.members[name] = data
        p.manifest["root"]["s"]["values"]["nbytes"] = len(data)
        (tmp_path / "bad.zarc").write_bytes(pack(p))
        with pytest.raises(zarchive.FormatError) as err:
            zarchive.read(tmp_path / "bad.zarc")
        assert err.value.member == name, case
    escaped = parts.copy()  # the escaped form of the same strings is valid JSON and reads the same
    escaped.members[name] = good.replace(b'"v7"', b'"\\u00767"', 1)
    escaped.manifest["root"]["s"]["values"]["nbytes"] = len(escaped.members[name])
    (tmp_path / "esc.zarc").write_bytes(pack(escaped))
    assert_series_same(s, zarchive.read(tmp_path / "esc.zarc")["s"])


def test_manifest_is_readable(tmp_path: Path) -> None:
    df = pd.DataFrame({"when": pd.date_range("2020", periods=3, freq="D"), "who": ["a", "b", None]},
                      index=pd.Index([10, 20, 30], name="id"))  # fmt: skip
    zarchive.save({"df": df}, tmp_path / "r.zarc")
    with zipfile.ZipFile(tmp_path / "r.zarc") as z:
        node = json.loads(z.read("manifest.json"))["root"]["df"]
    assert node["shape"] == [3, 2]
    assert node["column_keys"] == ["when", "who"]
    assert node["dtypes"] == ["datetime64[us]", "str"]
    assert node["index"]["name"] == "id" and node["index"]["dtype"] == "int64"
    assert node["data"][1]["values"] == ["a", "b"] and node["data"][1]["mask"]["data"] == [False, False, True]
