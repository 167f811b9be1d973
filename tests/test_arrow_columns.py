"""Columns in Arrow's buffer layout (format 1.5, the `arrow.array` node; spec/pandas.md 5.8): pyarrow
arrays of every supported type with nulls (property-based), sliced arrays, pandas ArrowDtype columns as
pandas, Parquet, CSV and polars make them, exact dtypes; the refusals of malformed buffers."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zarchive

pa = pytest.importorskip("pyarrow")

# --- pyarrow arrays, property-based ---

SCALARS: list[tuple[Any, st.SearchStrategy[Any]]] = [
    (pa.int8(), st.integers(-128, 127)),
    (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    (pa.uint16(), st.integers(0, 2**16 - 1)),
    (pa.uint64(), st.integers(0, 2**64 - 1)),
    (pa.float32(), st.floats(width=32, allow_nan=False)),
    (pa.float64(), st.floats(allow_nan=False)),
    (pa.bool_(), st.booleans()),
    (pa.string(), st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=8)),
    (
        pa.large_string(),
        st.text(max_size=8).filter(lambda s: s.encode("utf-8", "surrogatepass") == s.encode("utf-8", "ignore")),
    ),
    (pa.binary(), st.binary(max_size=8)),
    (pa.large_binary(), st.binary(max_size=8)),
    (pa.date32(), st.dates()),
    (pa.timestamp("us", tz="Europe/Paris"), st.datetimes(min_value=dt.datetime(1900, 1, 1), timezones=st.just(dt.UTC))),
    (pa.timestamp("ns"), st.datetimes(min_value=dt.datetime(1700, 1, 1), max_value=dt.datetime(2200, 1, 1))),
    (pa.time64("us"), st.times()),
    (pa.duration("ms"), st.timedeltas(min_value=dt.timedelta(days=-9999), max_value=dt.timedelta(days=9999))),
    (pa.decimal128(12, 3), st.decimals(min_value=-(10**8), max_value=10**8, places=3, allow_nan=False)),
]


def nullable(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), values)


@st.composite
def typed_values(draw: st.DrawFn, depth: int = 0) -> tuple[Any, st.SearchStrategy[Any]]:
    """(an Arrow type, a strategy for one value of it, None allowed)."""
    kind = draw(st.sampled_from(["scalar"] * 3 + (["list", "struct"] if depth < 2 else [])))
    if kind == "scalar":
        t, values = draw(st.sampled_from(SCALARS))
        return t, nullable(values)
    if kind == "list":
        inner, values = draw(typed_values(depth + 1))
        make = draw(st.sampled_from([pa.list_, pa.large_list]))
        return make(inner), nullable(st.lists(values, max_size=4))
    count = draw(st.integers(0, 3))
    children = [draw(typed_values(depth + 1)) for _ in range(count)]
    t = pa.struct([(f"f{i}", ct) for i, (ct, _) in enumerate(children)])
    row = st.fixed_dictionaries({f"f{i}": cv for i, (_, cv) in enumerate(children)})
    return t, nullable(row) if count else st.none()


@st.composite
def arrow_arrays(draw: st.DrawFn) -> Any:
    t, values = draw(typed_values())
    arr = pa.array(draw(st.lists(values, max_size=30)), type=t)
    if draw(st.booleans()) and len(arr) > 2:  # a window of a bigger array: offsets that do not start at 0
        start = draw(st.integers(0, len(arr) - 1))
        arr = arr.slice(start, draw(st.integers(0, len(arr) - start)))
    if draw(st.booleans()) and not pa.types.is_nested(t) and len(arr):
        arr = arr.dictionary_encode()
    return arr


def roundtrip(obj: Any, path: Path, **kw: Any) -> Any:
    zarchive.save(obj, path, **kw)
    return zarchive.read(path)


@settings(max_examples=60, deadline=None)
@given(arr=arrow_arrays(), threshold=st.sampled_from([2, 100_000]))
def test_arrow_arrays_round_trip(tmp_path_factory: pytest.TempPathFactory, arr: Any, threshold: int) -> None:
    """Inline buffers (short) and `.npy` members (threshold 2) alike; the type exactly, values exactly."""
    path = tmp_path_factory.mktemp("a") / "a.zarc"
    back = roundtrip({"a": arr}, path, external_array_threshold=threshold)["a"]
    assert back.type == arr.type
    assert back.equals(arr)
    assert back.offset == 0


def test_every_type_with_nulls(tmp_path: Path) -> None:
    arrays = [
        pa.nulls(3),
        pa.array([True, None, False] * 400).slice(5),
        pa.array([1.5, None, float("inf")], pa.float16()),
        pa.array([dt.time(1, 2), None], pa.time32("s")),
        pa.array([dt.datetime(2020, 1, 1), None], pa.date64()),
        pa.array([decimal.Decimal("-1.5"), None], pa.decimal128(38, 1)),
        pa.array([{"a": [1, None]}, None, {"a": None}], pa.struct([("a", pa.large_list(pa.int8()))])),
        pa.array(["x", "y", None, "x"], pa.large_string()).dictionary_encode(),
        pa.DictionaryArray.from_arrays(pa.array([0, None, 1], pa.int8()), pa.array(["u", "v"]), ordered=True),
        pa.array([[{"k": "v"}], [], None], pa.list_(pa.field("element", pa.struct([("k", pa.string())]), False))),
    ]
    back = roundtrip({str(i): a for i, a in enumerate(arrays)}, tmp_path / "a.zarc", external_array_threshold=2)
    for i, a in enumerate(arrays):
        assert back[str(i)].type == a.type and back[str(i)].equals(a), i


def test_unsupported_types_are_refused_by_name(tmp_path: Path) -> None:
    for arr in (pa.array([{"a": 1}], pa.map_(pa.string(), pa.int64())), pa.array(["x"], pa.string_view())):
        with pytest.raises(zarchive.SaveError, match="cannot be saved"):
            zarchive.save({"a": arr}, tmp_path / "a.zarc")


# --- pandas ArrowDtype columns ---


def arrow_frame(n: int = 50) -> pd.DataFrame:
    five = n // 5
    return pd.DataFrame(
        {
            "i": pd.array([1, None, 3, 4, 5] * five, dtype="int64[pyarrow]"),
            "ts": pd.Series(pd.date_range("2020", periods=n, tz="Europe/Paris")).astype(
                pd.ArrowDtype(pa.timestamp("us", tz="Europe/Paris"))
            ),
            "ls": pd.array(["a", None, "bb", "c", "é"] * five, dtype=pd.ArrowDtype(pa.large_string())),
            "sa": pd.array(["a", None, "bb", "c", "d"] * five, dtype=pd.ArrowDtype(pa.string())),
            "l": pd.array([[1, 2], None, [], [3], [None]] * five, dtype=pd.ArrowDtype(pa.list_(pa.int64()))),
            "st": pd.array(
                [{"a": 1, "b": "x"}, None, {"a": None, "b": None}, {"a": 2, "b": "y"}, {"a": 3, "b": "z"}] * five,
                dtype=pd.ArrowDtype(pa.struct([("a", pa.int64()), ("b", pa.string())])),
            ),
            "d": pd.Series(
                pa.array(["x", "y", None, "x", "y"] * five).dictionary_encode(),
                dtype=pd.ArrowDtype(pa.dictionary(pa.int32(), pa.string())),
            ),
            "b": pd.array([True, None, False, True, True] * five, dtype="bool[pyarrow]"),
            "f": pd.array([1.5, None, float("nan"), 2.0, -0.0] * five, dtype="double[pyarrow]"),
            "dec": pd.array(
                [decimal.Decimal("1.25"), None, decimal.Decimal("-3.50"), decimal.Decimal(0), decimal.Decimal(9)]
                * five,
                dtype=pd.ArrowDtype(pa.decimal128(10, 2)),
            ),
        },
        index=pd.Index(np.arange(n), dtype="int32[pyarrow]"),
    )


@pytest.mark.parametrize("threshold", [4, 100_000], ids=["members", "inline"])
def test_pandas_arrow_dtypes_round_trip_exactly(tmp_path: Path, threshold: int) -> None:
    df = arrow_frame()
    back = roundtrip(df, tmp_path / "a.zarc", external_array_threshold=threshold)
    assert list(back.dtypes) == list(df.dtypes)
    pd.testing.assert_frame_equal(back, df, check_exact=True)
    s = df["st"].rename("s")
    pd.testing.assert_series_equal(roundtrip(s, tmp_path / "s.zarc"), s, check_exact=True)


def test_frames_as_parquet_csv_and_polars_give_them(tmp_path: Path) -> None:
    buf = io.BytesIO()
    arrow_frame().to_parquet(buf)
    buf.seek(0)
    frames = [pd.read_parquet(buf, dtype_backend="pyarrow")]
    csv = "a,b,c,d\n1,x,2020-01-01,1.5\n,y,,\n3,,2020-01-03,2.5\n"
    frames.append(pd.read_csv(io.StringIO(csv), dtype_backend="pyarrow", parse_dates=["c"]))
    pl = pytest.importorskip("polars")
    plf = pl.DataFrame(
        {
            "a": [1, None],
            "s": ["x", None],
            "c": pl.Series(["u", "v"], dtype=pl.Categorical),
            "l": [[1], None],
            "st": [{"p": 1.5, "q": "w"}, None],
            "t": [dt.datetime(2020, 1, 1), None],
        }
    ).with_columns(pl.col("t").dt.replace_time_zone("Asia/Tokyo"))
    frames.append(plf.to_pandas(use_pyarrow_extension_array=True))
    for i, df in enumerate(frames):
        back = roundtrip(df, tmp_path / f"{i}.zarc")
        pd.testing.assert_frame_equal(back, df, check_exact=True)


def test_one_column_reads_without_the_rest(tmp_path: Path) -> None:
    df = arrow_frame(5000)
    zarchive.save({"frame": df}, tmp_path / "a.zarc")
    with zarchive.open(tmp_path / "a.zarc") as z:
        col = z["frame"]["l"]
        pd.testing.assert_series_equal(col, df["l"], check_exact=True)


# --- malformed arrays are refused before pyarrow builds on them ---


def _find(node: Any, tid: str) -> dict[str, Any]:
    """The first arrow.array node of type id `tid` in a manifest tree."""
    if isinstance(node, dict):
        if node.get("$type") == "arrow.array" and node["type"]["id"] == tid:
            return node
        items = list(node.values())
    elif isinstance(node, list):
        items = node
    else:
        items = []
    for v in items:
        try:
            return _find(v, tid)
        except LookupError:
            continue
    raise LookupError(tid)


def _deep_type(levels: int) -> dict[str, Any]:
    t: dict[str, Any] = {"id": "int64"}
    for _ in range(levels):
        t = {"id": "list", "item": {"name": "item", "type": t, "nullable": True}}
    return t


HOSTILE: dict[str, Any] = {
    "offsets-decrease": lambda m: _find(m, "utf8")["buffers"][1].update(data=[0, 3, 1, 4, 5, 6]),
    "offsets-past-end": lambda m: _find(m, "utf8")["buffers"][1].update(data=[0, 1, 2, 3, 4, 99]),
    "offsets-not-from-0": lambda m: _find(m, "utf8")["buffers"][1].update(data=[1, 1, 2, 3, 4, 5]),
    "offsets-count": lambda m: _find(m, "utf8")["buffers"][1].update(data=[0, 1, 2, 3, 5], shape=[5]),
    "null-count-lies": lambda m: _find(m, "int64").update(null_count=0),
    "bitmap-short": lambda m: _find(m, "int64")["buffers"][0].update(data=[], shape=[0]),
    "validity-missing": lambda m: _find(m, "int64")["buffers"].__setitem__(0, None),
    "buffer-dtype": lambda m: _find(m, "int64")["buffers"][1].update(dtype="<f8"),
    "buffers-count": lambda m: _find(m, "int64")["buffers"].pop(),
    "list-child-short": lambda m: _find(m, "list")["buffers"][1].update(data=[0, 1, 1, 1, 2, 9]),
    "struct-child-length": lambda m: _find(m, "struct")["children"][0].update(length=4),
    "child-type-differs": lambda m: _find(m, "struct")["children"][0].update(type={"id": "int8"}),
    "dictionary-index-out": lambda m: _find(m, "dictionary")["buffers"][1].update(data=[0, 7, 0, 1, 0]),
    "type-unknown": lambda m: _find(m, "int64").update(type={"id": "pickle"}),
    "tz-traversal": lambda m: _find(m, "timestamp")["type"].update(tz="../../etc/passwd"),
    "tz-unknown": lambda m: _find(m, "timestamp")["type"].update(tz="Mars/Olympus"),
    "type-deep": lambda m: _find(m, "int64").update(type=_deep_type(300)),
    "unexpected-field": lambda m: _find(m, "int64").update(extra={"$type": "numpy.ndarray"}),
}


@pytest.fixture(scope="module")
def hostile_base(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    df = pd.DataFrame(
        {
            "i": pd.array([1, None, 3, 4, 5], dtype="int64[pyarrow]"),
            "s": pd.array(["a", "b", None, "d", "é"], dtype=pd.ArrowDtype(pa.string())),
            "l": pd.array([[1], None, [], [2], []], dtype=pd.ArrowDtype(pa.list_(pa.int64()))),
            "st": pd.array([{"a": 1}] * 5, dtype=pd.ArrowDtype(pa.struct([("a", pa.int64())]))),
            "d": pd.Series(pa.array(["x", "y", "x", "y", "x"]).dictionary_encode(), dtype="object").astype(
                pd.ArrowDtype(pa.dictionary(pa.int32(), pa.string()))
            ),
            "t": pd.array([1, 2, 3, 4, 5], dtype=pd.ArrowDtype(pa.timestamp("us", tz="UTC"))),
        }
    )
    path = tmp_path_factory.mktemp("arrow") / "base.zarc"
    zarchive.save(df, path, durable=False)
    return path.read_bytes()


def test_the_hostile_base_reads(tmp_path: Path, hostile_base: bytes) -> None:
    (tmp_path / "b.zarc").write_bytes(hostile_base)
    assert zarchive.read(tmp_path / "b.zarc")["s"].tolist()[4] == "é"


@pytest.mark.parametrize("case", list(HOSTILE))
def test_malformed_arrow_arrays_fail_cleanly(tmp_path: Path, hostile_base: bytes, case: str) -> None:
    from hostile.craft import pack, unpack

    parts = unpack(hostile_base)
    HOSTILE[case](parts.manifest)
    path = tmp_path / "h.zarc"
    path.write_bytes(pack(parts))
    with pytest.raises((zarchive.FormatError, zarchive.UnsafeArchiveError)) as err:
        zarchive.read(path)
    assert err.value.path is not None, str(err.value)


def test_bad_utf8_is_refused(tmp_path: Path) -> None:
    from hostile.craft import pack, unpack

    zarchive.save({"a": pa.array(["ab", "cd"])}, tmp_path / "a.zarc", durable=False)
    parts = unpack((tmp_path / "a.zarc").read_bytes())
    _find(parts.manifest, "utf8")["buffers"][2].update(data=[0x61, 0xFF, 0x63, 0x64])
    (tmp_path / "h.zarc").write_bytes(pack(parts))
    with pytest.raises(zarchive.FormatError, match="UTF-8|utf8|Invalid"):
        zarchive.read(tmp_path / "h.zarc")


# --- the spec's numpy-only recipe ---

SPEC = Path(__file__).resolve().parent.parent / "spec"


def _arrow_columns(node: Any) -> list[dict[str, Any]]:
    """Every `arrow` layout pandas array node of a manifest tree, in order."""
    if isinstance(node, dict):
        if node.get("$type") == "pandas.array" and node.get("layout") == "arrow":
            return [node]
        return [c for v in node.values() for c in _arrow_columns(v)]
    if isinstance(node, list):
        return [c for v in node for c in _arrow_columns(v)]
    return []


def test_the_spec_recipe_rebuilds_the_values_with_numpy_alone(tmp_path: Path) -> None:
    """spec/pandas.md 5.4: the recipe, run on the uncompressed example's members, gives what pyarrow reads."""
    import base64
    import json
    import math
    import runpy
    import zipfile

    text = (SPEC / "pandas.md").read_text(encoding="utf-8")
    section = text[text.index("### 5.4") : text.index("## 6 ")]
    recipe = section.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "recipe.py").write_text(recipe, encoding="utf-8")
    namespace = runpy.run_path(str(tmp_path / "recipe.py"))  # the spec's own code, not a file's
    path = SPEC / "examples" / "columns_arrow.uncompressed.zarc"
    frame = zarchive.read(path)["frame"]
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("manifest.json"))

        def load(node: dict[str, Any]) -> np.ndarray:
            if "$ref" in node:
                return np.load(io.BytesIO(z.read(node["$ref"])))
            if "data" in node:
                return np.array(node["data"], dtype=node["dtype"])
            return np.frombuffer(base64.b64decode(node["base64"]), dtype=node["dtype"])

        columns = _arrow_columns(manifest["root"])
        assert len(columns) == 1 + len(frame.columns)  # the index, then each column
        for node, series in zip(columns[1:], (frame[c] for c in frame.columns)):
            got = namespace["values"](node["array"], load)
            arr = pa.array(series.array)
            if pa.types.is_timestamp(arr.type):
                arr = arr.cast(pa.int64())
            want = arr.to_pylist()
            same = [g == w or (isinstance(g, float) and math.isnan(g) and math.isnan(w)) for g, w in zip(got, want)]
            assert len(got) == len(want) and all(same), (series.name, got, want)


def test_polars_columns_take_the_arrow_layout(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    df = pl.DataFrame(
        {
            "e": pl.Series(["b", None, "a"] * 100, dtype=pl.Enum(["a", "b", "c"])),
            "t": pl.Series([1, None, 3] * 100).cast(pl.Datetime("ms", "Europe/Paris")),
            "l": [[1.5], None, []] * 100,
        }
    )
    zarchive.save({"df": df}, tmp_path / "p.zarc", durable=False)
    with zarchive.open(tmp_path / "p.zarc") as arc:
        node = arc.node("df/e")
        assert node["layout"] == "arrow" and node["array"]["type"]["id"] == "dictionary"
        assert arc["df/t"].dtype == pl.Datetime("ms", "Europe/Paris")
    back = zarchive.read(tmp_path / "p.zarc")["df"]
    assert back.schema == df.schema and back.equals(df)


def test_an_unsupported_arrow_dtype_is_refused_naming_the_column(tmp_path: Path) -> None:
    df = pd.DataFrame({"ok": [1], "bad": pd.Series(["x"], dtype=pd.ArrowDtype(pa.string_view()))})
    with pytest.raises(zarchive.SaveError, match="string_view") as err:
        zarchive.save(df, tmp_path / "a.zarc")
    assert "bad" in str(err.value)
    assert not (tmp_path / "a.zarc").exists()


def test_without_pyarrow_an_arrow_file_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    zarchive.save({"a": pa.array([1, None])}, tmp_path / "a.zarc", durable=False)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as where pyarrow is not installed: import fails
    with pytest.raises(zarchive.ZArchiveError, match=r"zarchive\[arrow\]"):
        zarchive.read(tmp_path / "a.zarc")
