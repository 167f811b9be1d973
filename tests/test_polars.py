"""polars DataFrame and Series (format 1.3): exact round trips of every supported dtype, lazy columns,
the planner's view, hostile nodes, the optional import, and ZANJ 0.6's polars files."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hostile.craft import pack, unpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zarchive

pl = pytest.importorskip("polars")
from polars.testing import assert_frame_equal, assert_series_equal

MEMBERS = {"external_list_threshold": 2, "external_array_threshold": 2}  # every column in members
INLINE = {"external_list_threshold": 10**6, "external_array_threshold": 10**6}  # every column inline
ROOT = Path(__file__).resolve().parent.parent


def every_dtype(n: int = 9) -> Any:
    """A frame with a column of each supported dtype, nulls in every nullable one."""
    r = n // 3 + 1

    def rep(values: list[Any]) -> list[Any]:
        return (values * r)[:n]

    return pl.DataFrame(
        [
            pl.Series("i8", rep([-128, None, 127]), dtype=pl.Int8),
            pl.Series("i16", rep([1, None, -3]), dtype=pl.Int16),
            pl.Series("i32", rep([2**31 - 1, None, 0]), dtype=pl.Int32),
            pl.Series("i64", rep([-(2**63), None, 7]), dtype=pl.Int64),
            pl.Series("u8", rep([255, None, 0]), dtype=pl.UInt8),
            pl.Series("u16", rep([1, 2, None]), dtype=pl.UInt16),
            pl.Series("u32", rep([2**32 - 1, None, 5]), dtype=pl.UInt32),
            pl.Series("u64", rep([2**64 - 1, 0, None]), dtype=pl.UInt64),
            pl.Series("f16", rep([1.5, None, float("inf")]), dtype=pl.Float16),
            pl.Series("f32", rep([1.5, float("nan"), None]), dtype=pl.Float32),
            pl.Series("f64", rep([-0.0, None, 1e300]), dtype=pl.Float64),
            pl.Series("bool", rep([True, None, False]), dtype=pl.Boolean),
            pl.Series("str", rep(["héllo 🎉", None, ""]), dtype=pl.String),
            pl.Series("utf8", rep(["a\x00b", "new\nline", None]), dtype=pl.Utf8),
            pl.Series("cat", rep(["x", "y", None]), dtype=pl.Categorical),
            pl.Series("enum", rep(["b", None, "a"]), dtype=pl.Enum(["b", "a", "unused"])),
            pl.Series("date", rep([dt.date(2024, 2, 29), None, dt.date(1, 1, 1)]), dtype=pl.Date),
            pl.Series("time", rep([dt.time(1, 2, 3, 4), None, dt.time(23, 59, 59)]), dtype=pl.Time),
            pl.Series("dt_ns_tz", rep([dt.datetime(2024, 3, 31, 2, 30), None, dt.datetime(1900, 1, 1)]),
                      dtype=pl.Datetime("ns", "Europe/Paris")),
            pl.Series("dt_us_utc", rep([dt.datetime(2024, 1, 1), None, dt.datetime(1970, 1, 1)]),
                      dtype=pl.Datetime("us", "UTC")),
            pl.Series("dt_ms", rep([dt.datetime(2024, 1, 1, 0, 0, 0, 1000), None, dt.datetime(3000, 1, 1)]),
                      dtype=pl.Datetime("ms")),
            pl.Series("dur_ns", rep([dt.timedelta(days=-3), None, dt.timedelta(microseconds=1)]),
                      dtype=pl.Duration("ns")),
            pl.Series("dur_ms", rep([dt.timedelta(seconds=1), None, dt.timedelta(0)]), dtype=pl.Duration("ms")),
            pl.Series("list", rep([[1, None], [], None]), dtype=pl.List(pl.Int32)),
            pl.Series("list_list_str", rep([[["a"], None], [[]], None]), dtype=pl.List(pl.List(pl.String))),
            pl.Series("list_dt", rep([[dt.datetime(2024, 1, 1)], None, []]), dtype=pl.List(pl.Datetime("ns", "Asia/Tokyo"))),
            pl.Series("struct", rep([{"a": 1, "b": "x"}, None, {"a": None, "b": "y"}]),
                      dtype=pl.Struct({"a": pl.Int64, "b": pl.String})),
            pl.Series("struct_nested", rep([{"l": [1.5], "s": {"e": "b"}}, {"l": None, "s": None}, None]),
                      dtype=pl.Struct({"l": pl.List(pl.Float64), "s": pl.Struct({"e": pl.Enum(["a", "b"])})})),
            pl.Series("null", [None] * n, dtype=pl.Null),
        ]
    )  # fmt: skip


def check_frame(back: Any, df: Any) -> None:
    assert type(back) is pl.DataFrame
    assert back.schema == df.schema, (back.schema, df.schema)
    assert_frame_equal(back, df, check_exact=True)


@pytest.mark.parametrize("layout", [{}, MEMBERS, INLINE], ids=["default", "members", "inline"])
@pytest.mark.parametrize("rows", [0, 1, 9, 600])
def test_every_dtype_round_trips_exactly(tmp_path: Path, roundtrip: Any, layout: dict[str, int], rows: int) -> None:
    df = every_dtype(rows)
    for route, back in roundtrip(df, **layout):
        check_frame(back, df)
        assert route
    for i in range(df.width):
        s = df.to_series(i)
        zarchive.save(s, tmp_path / "s.zarc", durable=False, **layout)
        back = zarchive.read(tmp_path / "s.zarc")
        assert back.dtype == s.dtype and back.name == s.name
        assert_series_equal(back, s, check_exact=True)


def test_text_columns_use_the_pandas_utf8_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without pyarrow, a long text column: offsets, a .utf8 member and a validity array, as pandas'
    "utf8" layout (format 1.3; with pyarrow, columns take the "arrow" layout of format 1.5)."""
    df = pl.DataFrame({"s": ["ab", None, "日本"] * 200, "c": pl.Series(["x", "y", "x"] * 200, dtype=pl.Categorical)})
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as where pyarrow is not installed: import fails
    zarchive.save(df, tmp_path / "t.zarc", durable=False, compress=False)
    monkeypatch.delitem(sys.modules, "pyarrow")
    names = set(zipfile.ZipFile(tmp_path / "t.zarc").namelist())
    assert {"s.utf8", "s/offsets.npy", "s/valid.npy", "c.utf8", "c/offsets.npy"} <= names
    with zarchive.open(tmp_path / "t.zarc") as arc:
        node = arc.node("s")
        assert node["$type"] == "polars.Series" and node["layout"] == "utf8" and node["nbytes"] == 200 * 8
    check_frame(zarchive.read(tmp_path / "t.zarc"), df)


def test_one_column_reads_without_the_rest(tmp_path: Path) -> None:
    df = every_dtype(600)
    zarchive.save({"df": df}, tmp_path / "d.zarc", durable=False)
    with zarchive.open(tmp_path / "d.zarc") as arc:
        assert arc.keys("df") == df.columns
        for name in ("str", "list_dt", "struct"):
            assert_series_equal(arc[f"df/{name}"], df[name], check_exact=True)


def test_planner_counts_the_bytes_of_text_columns(tmp_path: Path) -> None:
    df = pl.DataFrame({"s": [f"value {i}" for i in range(50_000)]})
    zarchive.save(df, tmp_path / "t.zarc", durable=False)
    with pytest.raises(zarchive.UnsafeArchiveError, match="over max_read_bytes"):
        zarchive.read(tmp_path / "t.zarc", max_read_bytes=1_000_000)  # 50,000 str objects: more than that
    check_frame(zarchive.read(tmp_path / "t.zarc", max_read_bytes=20_000_000), df)


@pytest.mark.parametrize(
    "dtype",
    [pl.Object, pl.Decimal(10, 2), pl.Binary, pl.Array(pl.Int8, 2), pl.Int128],
    ids=["object", "decimal", "binary", "array", "int128"],
)
def test_unsupported_dtypes_are_refused_naming_the_column(tmp_path: Path, dtype: Any) -> None:
    values = {
        "object": [object()],
        "decimal": [1],
        "binary": [b"x"],
        "array": [[1, 2]],
        "int128": [1],
    }[str(dtype.base_type().__name__).lower() if dtype is not pl.Object else "object"]
    s = pl.Series("bad", values, dtype=dtype)
    with pytest.raises(zarchive.SaveError) as err:
        zarchive.save({"df": pl.DataFrame([s])}, tmp_path / "x.zarc", durable=False)
    assert err.value.path == "df/bad"
    assert not (tmp_path / "x.zarc").exists()


# --- hostile nodes ----------------------------------------------------------------------------------
def _node(m: dict[str, Any], name: str) -> dict[str, Any]:
    frame = m["root"]
    return frame["data"][frame["column_keys"].index(name)]


HOSTILE: dict[str, Any] = {
    "kind-unknown": lambda m: _node(m, "i64")["dtype"].update(kind="Pickle"),
    "data-wrong-dtype": lambda m: _node(m, "i64")["data"].update(dtype="<f8"),
    "data-short": lambda m: _node(m, "i64").update(length=3),
    "tz-unknown": lambda m: _node(m, "dt_ns_tz")["dtype"].update(tz="Mars/Olympus"),
    "tz-traversal": lambda m: _node(m, "dt_ns_tz")["dtype"].update(tz="../../etc/passwd"),
    "unit-unknown": lambda m: _node(m, "dur_ns")["dtype"].update(unit="fortnight"),
    "enum-value-outside": lambda m: _node(m, "enum")["dtype"].update(categories=["b"]),
    "enum-duplicates": lambda m: _node(m, "enum")["dtype"].update(categories=["a", "a", "b"]),
    "list-offsets-decrease": lambda m: _node(m, "list")["offsets"].update(data=[0, 2, 1] + [2] * 7),
    "list-offsets-past-end": lambda m: _node(m, "list")["offsets"].__setitem__("data", [0, 2, 2, 2, 4, 4, 4, 6, 6, 99]),
    "list-missing-with-values": lambda m: _node(m, "list")["offsets"].__setitem__("data", [0, 2, 2, 3, 5, 5, 5, 7, 7, 7]),
    "struct-missing-field": lambda m: _node(m, "struct")["fields"].pop(),
    "text-wrong-count": lambda m: _node(m, "str")["strings"].pop(),
    "text-not-str": lambda m: _node(m, "str")["strings"].__setitem__(0, 5),
    "valid-not-bool": lambda m: _node(m, "str")["valid"].update(dtype="|u1"),
    "duplicate-names": lambda m: _node(m, "i16").update(name="i8"),
    "shape-lies": lambda m: m["root"].update(shape=[10, m["root"]["shape"][1]]),
    "dtype-deep": lambda m: _node(m, "i64").update(dtype=_deep_list(40)),
}  # fmt: skip


def _deep_list(levels: int) -> dict[str, Any]:
    dtype: dict[str, Any] = {"kind": "Int64"}
    for _ in range(levels):
        dtype = {"kind": "List", "inner": dtype}
    return dtype


@pytest.fixture(scope="module")
def hostile_base(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("polars") / "base.zarc"
    with pytest.MonkeyPatch.context() as mp:  # the column-by-column layout (format 1.3), written without pyarrow
        mp.setitem(sys.modules, "pyarrow", None)
        zarchive.save(every_dtype(9), path, durable=False, external_list_threshold=100, external_array_threshold=100)
    return path.read_bytes()


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_polars_nodes_fail_cleanly(tmp_path: Path, hostile_base: bytes, case: str) -> None:
    parts = unpack(hostile_base)
    HOSTILE[case](parts.manifest)
    path = tmp_path / "h.zarc"
    path.write_bytes(pack(parts))
    with pytest.raises(zarchive.FormatError) as err:
        zarchive.read(path)
    assert err.value.path is not None, str(err.value)


# --- hypothesis -------------------------------------------------------------------------------------
SCALARS = {
    "Int64": st.integers(-(2**63), 2**63 - 1),
    "UInt16": st.integers(0, 2**16 - 1),
    "Float64": st.floats(allow_nan=True, allow_infinity=True),
    "Boolean": st.booleans(),
    "String": st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12),
    "Datetime": st.datetimes(min_value=dt.datetime(1700, 1, 1), max_value=dt.datetime(2300, 1, 1)),
}
DTYPES = {
    "Int64": pl.Int64,
    "UInt16": pl.UInt16,
    "Float64": pl.Float64,
    "Boolean": pl.Boolean,
    "String": pl.String,
    "Datetime": pl.Datetime("us", "America/New_York"),
}


@st.composite
def columns(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(sorted(SCALARS)))
    nested = draw(st.sampled_from(["plain", "list", "struct"]))
    n = draw(st.integers(0, 40))
    item = st.none() | SCALARS[kind]
    dtype = DTYPES[kind]
    if nested == "list":
        values = draw(st.lists(st.none() | st.lists(item, max_size=4), min_size=n, max_size=n))
        return pl.Series("c", values, dtype=pl.List(dtype))
    if nested == "struct":
        values = draw(st.lists(st.none() | st.fixed_dictionaries({"f": item}), min_size=n, max_size=n))
        return pl.Series("c", values, dtype=pl.Struct({"f": dtype}))
    return pl.Series("c", draw(st.lists(item, min_size=n, max_size=n)), dtype=dtype)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cols=st.lists(columns(), min_size=1, max_size=3), small=st.booleans())
def test_hypothesis_round_trip(tmp_path: Path, cols: list[Any], small: bool) -> None:
    n = min(len(c) for c in cols)
    df = pl.DataFrame([c.head(n).alias(f"c{i}") for i, c in enumerate(cols)])
    path = tmp_path / "h.zarc"
    zarchive.save({"df": df, "s": cols[0]}, path, durable=False, **(MEMBERS if small else {}))
    back = zarchive.read(path)
    check_frame(back["df"], df)
    assert back["s"].dtype == cols[0].dtype
    assert_series_equal(back["s"], cols[0], check_exact=True)


# --- optional dependency ----------------------------------------------------------------------------
def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_polars_is_imported_only_for_polars_objects(tmp_path: Path) -> None:
    zarchive.save({"df": pl.DataFrame({"a": [1]})}, tmp_path / "p.zarc", durable=False)
    code = f"""
import sys, zarchive, numpy as np
zarchive.save({{"x": np.arange(3), "t": "text"}}, {str(tmp_path / "n.zarc")!r}, durable=False)
zarchive.read({str(tmp_path / "n.zarc")!r})
assert "polars" not in sys.modules, "a save and read without polars objects imported polars"
zarchive.read({str(tmp_path / "p.zarc")!r})
assert "polars" in sys.modules
"""
    out = _run(code)
    assert out.returncode == 0, out.stderr


def test_without_polars_a_polars_file_names_the_extra(tmp_path: Path) -> None:
    zarchive.save({"df": pl.DataFrame({"a": [1]})}, tmp_path / "p.zarc", durable=False)
    code = f"""
import sys
sys.modules["polars"] = None  # as if polars were not installed
import zarchive
try:
    zarchive.read({str(tmp_path / "p.zarc")!r})
except zarchive.ZArchiveError as e:
    print(type(e).__name__, e)
"""
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert "UnknownTypeError" in out.stdout and "zarchive[polars]" in out.stdout, out.stdout


# --- ZANJ 0.6's polars files ------------------------------------------------------------------------
def test_zanj_polars_files_read_as_zanj_reads_them(tmp_path: Path) -> None:
    zanj = pytest.importorskip("zanj")
    data = {
        "small": pl.DataFrame({"a": [1, 2, None], "b": ["x", None, "é"], "c": [1.5, 2.5, float("inf")]}),
        "big": pl.DataFrame({"i": list(range(300)), "s": [f"r{i}" for i in range(300)], "f": [True, False] * 150}),
        "empty": pl.DataFrame(schema={"a": pl.String, "b": pl.String}),
        "nested": {"inside": pl.DataFrame({"k": [1]}), "n": 3},
    }
    path = tmp_path / "p.zanj"
    zanj.ZANJ().save(data, str(path))
    with zipfile.ZipFile(path) as z:
        manifest = z.read("__zanj__.json").decode()
    assert "polars.DataFrame:external" in manifest
    want = zanj.ZANJ().read(str(path))
    got = zarchive.read(path)
    for key in ("small", "big", "empty"):
        check_frame(got[key], want[key])
        assert got[key].columns == data[key].columns
    check_frame(got["nested"]["inside"], want["nested"]["inside"])
    assert got["nested"]["n"] == 3
    with zarchive.open(path) as arc:
        check_frame(arc["big"], want["big"])
    from zarchive.formats.convert_in import convert

    convert(path, tmp_path / "p.zarc")  # `zarchive convert`: the frames become polars nodes
    with zarchive.open(tmp_path / "p.zarc") as arc:
        assert arc.node("big")["$type"] == "polars.DataFrame"
    check_frame(zarchive.read(tmp_path / "p.zarc")["big"], want["big"])


def test_hostile_zanj_polars_rows_fail_cleanly(tmp_path: Path) -> None:
    zanj = pytest.importorskip("zanj")
    path = tmp_path / "p.zanj"
    zanj.ZANJ().save({"df": pl.DataFrame({"a": [1, 2]})}, str(path))
    with zipfile.ZipFile(path) as z:
        files = {n: z.read(n) for n in z.namelist()}
    for bad in (b'{"a": 1}\n{"a": "text"}\n', b"[1, 2]\n", b'{"a": 1}\n\n'):
        with zipfile.ZipFile(tmp_path / "bad.zanj", "w") as z:
            for n, data in files.items():
                z.writestr(n, bad if n.endswith(".jsonl") else data)
        with pytest.raises(zarchive.ZArchiveError):
            zarchive.read(tmp_path / "bad.zanj")
