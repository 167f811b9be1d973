"""Reading a "dict" text column (spec/pandas.md 5.3) with every row its own str: what is made
(utf8_column.dict_rows, and the pyarrow route), when (a dictionary of more than SHARED_VALUES_MAX short
values, within the read's budget) and that the values come back the same either way. Also: a full
read hands decompressed members to the arrays it builds, which stay the read's own."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hostile.craft import pack, unpack
from hypothesis import given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.container.utf8_column import MAX_ROW_WIDTH, dict_rows, encode_utf8
from zarchive.handlers.pandas_strings import SHARED_VALUES_MAX

STR = pd.StringDtype("python", na_value=np.nan)
TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=8)


def _dictionary(values: list[str]) -> tuple[np.ndarray, bytes]:
    return encode_utf8(values)


def _expected(values: list[str], codes: list[int]) -> list[str]:
    return [values[c] if c >= 0 else "" for c in codes]


@settings(max_examples=60, deadline=None)
@given(values=st.lists(TEXT, min_size=1, max_size=20), picks=st.lists(st.integers(-1, 40), max_size=200))
def test_dict_rows_gives_each_rows_value(values: list[str], picks: list[int]) -> None:
    codes = np.array([p % len(values) if p >= 0 else -1 for p in picks], dtype=np.int32)
    offsets, data = _dictionary(values)
    assert dict_rows(offsets, data, codes, member="m") == _expected(values, codes.tolist())


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_dict_rows_takes_every_code_dtype(dtype: str) -> None:
    values = ["", "a", "é€", "z" * (MAX_ROW_WIDTH - 1), "tab\there"]
    codes = np.array([4, -1, 0, 3, 2, 1, 1, -1, 2], dtype=dtype)
    offsets, data = _dictionary(values)
    assert dict_rows(offsets, data, codes, member="m") == _expected(values, codes.tolist())


def test_dict_rows_declines_what_it_cannot_lay_out() -> None:
    """A value of MAX_ROW_WIDTH bytes or more, a NUL byte (the padding), or data holding every
    separator byte: None, and the caller shares one str per value."""
    codes = np.array([0, 1, 0], dtype=np.int8)
    for values in (["a", "b" * MAX_ROW_WIDTH], ["a", "b\x00c"], ["a", "".join(map(chr, range(1, 0x20))) + "\x7f"]):
        offsets, data = _dictionary(values)
        assert dict_rows(offsets, data, codes, member="m") is None
    empty_offsets, empty_data = _dictionary([])
    assert dict_rows(empty_offsets, empty_data, np.array([-1, -1], dtype=np.int8), member="m") == ["", ""]


def test_dict_rows_checks_every_value_used_or_not() -> None:
    offsets = np.array([0, 1, 3, 4], dtype=np.int64)
    codes = np.array([0, 0], dtype=np.int8)
    with pytest.raises(zarchive.FormatError, match="UTF-8") as err:
        dict_rows(offsets, b"a\xff\xfeb", codes, member="col.utf8")
    assert err.value.member == "col.utf8"
    cut = np.array([0, 1, 2, 4], dtype=np.int64)  # value 1 starts inside "é" (two bytes)
    with pytest.raises(zarchive.FormatError, match="inside a UTF-8 character"):
        dict_rows(cut, "aéb".encode(), codes, member="col.utf8")


# --- through the pandas reader -------------------------------------------------------------------------


def _column(distinct: int, rows: int, missing_every: int = 0) -> list[Any]:
    rng = np.random.default_rng(7)
    words = [f"w{i:06d}{'é' if i % 5 == 0 else ''}" for i in range(distinct)]
    picks = rng.integers(0, distinct, rows)
    picks[:distinct] = np.arange(distinct)  # every value used
    out: list[Any] = [words[p] for p in picks]
    if missing_every:
        out[::missing_every] = [None] * len(out[::missing_every])
    return out


def _npy(name: str, arr: np.ndarray) -> tuple[dict[str, Any], bytes]:
    buf = io.BytesIO()
    np.save(buf, arr)
    return {"$type": "numpy.ndarray", "$ref": name, "dtype": arr.dtype.str, "shape": list(arr.shape)}, buf.getvalue()


def _dict_file(values: list[Any], dtype: Any) -> bytes:
    """A file holding `values` as Series "s" in the dict layout, whatever zarchive's writer would pick
    for them (it keeps the utf8 layout for many distinct short values, as format 1.4 writers did not):
    a small dict column saved by zarchive, its dictionary and codes replaced."""
    buf = io.BytesIO()
    zarchive.save({"s": pd.Series(["a", None, "b"] * 200, dtype=dtype)}, buf, durable=False)
    parts = unpack(buf.getvalue())
    series = parts.manifest["root"]["s"]
    node = series["values"]
    assert node["layout"] == "dict"
    codes, distinct = pd.factorize(np.array(values, dtype=object))
    offsets, data = encode_utf8(distinct.tolist())
    parts.members[node["$ref"]] = data
    node["offsets"], parts.members["s/offsets.npy.zst"] = _npy("s/offsets.npy.zst", offsets)
    node["codes"], parts.members["s/codes.npy.zst"] = _npy("s/codes.npy.zst", codes.astype(np.int32))
    node.update(count=len(distinct), nbytes=len(data), length=len(values))
    series["length"] = len(values)
    series["index"]["stop"] = len(values)
    return pack(parts)


def _read_back(s: pd.Series, **settings: Any) -> Any:
    return zarchive.read(_dict_file(s.tolist(), s.dtype), **settings)


def _objects(s: pd.Series) -> int:
    values = s.array._ndarray if isinstance(s.array, pd.arrays.StringArray) else s.to_numpy()
    return len({id(v) for v in values if isinstance(v, str)})


@pytest.mark.parametrize("dtype", [STR, pd.StringDtype("python"), object], ids=["str", "string", "object"])
@pytest.mark.parametrize("pyarrow", [True, False], ids=["pyarrow", "numpy-only"])
def test_a_big_dictionary_reads_as_one_str_per_row(dtype: Any, pyarrow: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """More than SHARED_VALUES_MAX distinct values: every present row its own str (made in row order),
    missing rows the dtype's missing value, whether pyarrow makes them or utf8_column.dict_rows."""
    distinct = SHARED_VALUES_MAX + 5000
    s = pd.Series(_column(distinct, 3 * distinct + 7, missing_every=11), dtype=dtype)
    if not pyarrow:
        monkeypatch.setitem(sys.modules, "pyarrow", None)  # as where pyarrow is not installed
    back = _read_back(s)["s"]
    pd.testing.assert_series_equal(back, s, check_exact=True)
    assert _objects(back) == int(s.notna().sum())


def test_a_small_dictionary_shares_its_values() -> None:
    s = pd.Series(_column(1000, 20_000), dtype=STR)
    back = _read_back(s)["s"]
    pd.testing.assert_series_equal(back, s, check_exact=True)
    assert _objects(back) == 1000


def test_long_values_are_shared() -> None:
    words = [f"{i:06d}" + "x" * MAX_ROW_WIDTH for i in range(SHARED_VALUES_MAX + 10)]
    s = pd.Series(words * 3, dtype=STR)
    back = _read_back(s)["s"]
    pd.testing.assert_series_equal(back, s, check_exact=True)
    assert _objects(back) == len(words)


def test_a_tight_budget_reads_shared_values_instead() -> None:
    """Where one str per row would not fit max_read_bytes, the same values come back shared."""
    s = pd.Series(_column(SHARED_VALUES_MAX + 100, 4 * SHARED_VALUES_MAX), dtype=STR)
    data = _dict_file(s.tolist(), s.dtype)
    kinds = set()
    for limit in range(4_000_000, 60_000_000, 2_000_000):
        try:
            back = zarchive.read(data, max_read_bytes=limit)["s"]
        except zarchive.UnsafeArchiveError:
            continue
        pd.testing.assert_series_equal(back, s, check_exact=True)
        kinds.add(_objects(back) == len(s))
    assert kinds == {False, True}  # shared at some budgets, one per row at larger ones


# --- decompressed members go to the arrays a full read builds ----------------------------------------------


def test_a_full_read_owns_what_it_builds(tmp_path: Path) -> None:
    """A full read takes each decompressed member it names once instead of copying it: the arrays are
    writable and the read's own; a second load from the same open archive decodes them again."""
    a = (np.arange(300_000) % 7).astype(np.int8)  # (zstd: wider integers are byte-grouped)
    df = pd.DataFrame({"i": a, "t": pd.Series(_column(40_000, 300_000), dtype=STR)})
    path = tmp_path / "t.zarc"
    zarchive.save({"a": a, "df": df}, path)
    with zarchive.open(path) as arc:
        assert arc.node("a")["$ref"].endswith(".zst")
        first = arc.load()
        first["a"][:] = -1
        second = arc.load()
        np.testing.assert_array_equal(second["a"], a)
        pd.testing.assert_frame_equal(second["df"], df, check_exact=True)
        np.testing.assert_array_equal(arc["a"], a)
        assert arc.verify()
    assert (first["a"] == -1).all()
    pd.testing.assert_frame_equal(first["df"], df, check_exact=True)


# --- which layout the writer picks ------------------------------------------------------------------------


def _layout(s: pd.Series) -> str:
    buf = io.BytesIO()
    zarchive.save({"s": s}, buf, durable=False)
    with zarchive.open(buf.getvalue()) as arc:
        layout: str = arc.node("s")["values"]["layout"]
    pd.testing.assert_series_equal(zarchive.read(buf.getvalue())["s"], s, check_exact=True)
    return layout


def test_many_distinct_short_values_keep_the_utf8_layout() -> None:
    """More than SHARED_VALUES_MAX distinct values under MAX_ROW_WIDTH bytes: read back one str per row
    either way, so the writer does not factorize them (decided on a sample: a column short enough to
    be factorized whole cannot hold that many values at most half as many as its rows); long values,
    or fewer distinct ones, still take a dictionary."""
    distinct, rows = SHARED_VALUES_MAX + 2000, 300_000
    assert _layout(pd.Series(_column(distinct, rows), dtype=STR)) == "utf8"
    assert _layout(pd.Series(_column(1000, rows), dtype=STR)) == "dict"
    long = [w + "x" * MAX_ROW_WIDTH for w in _column(distinct, rows)]
    assert _layout(pd.Series(long, dtype=STR)) == "dict"


@pytest.mark.parametrize("dtype", [STR, pd.StringDtype("python"), object], ids=["str", "string", "object"])
@pytest.mark.parametrize("pyarrow", [True, False], ids=["pyarrow", "numpy-only"])
def test_utf8_columns_read_the_same_with_or_without_pyarrow(
    dtype: Any, pyarrow: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = pd.Series(_column(50_000, 60_000, missing_every=7) + ["", "é€\t", "x" * 200], dtype=dtype)
    buf = io.BytesIO()
    zarchive.save({"s": s}, buf, durable=False)
    if not pyarrow:
        monkeypatch.setitem(sys.modules, "pyarrow", None)
    with zarchive.open(buf.getvalue()) as arc:
        assert arc.node("s")["values"]["layout"] == "utf8"
    back = zarchive.read(buf.getvalue())["s"]
    pd.testing.assert_series_equal(back, s, check_exact=True)
    assert _objects(back) == int(s.notna().sum())


# --- the frame's order, and int32 offsets -------------------------------------------------------------------


def test_a_frame_plans_and_reads_its_python_built_columns_first(tmp_path: Path) -> None:
    """Text in python storage and object columns come first in the plan (whose order the members are
    decoded ahead in) and in the read; the frame keeps its columns' order, and errors inside a column
    still name its place in `data`."""
    n = 100_000
    df = pd.DataFrame(
        {
            "a": np.arange(n) % 11,
            "t": pd.Series(_column(50_000, n), dtype=STR),
            "b": np.arange(n) % 13,
            "o": pd.Series([f"o{i % 1000}" for i in range(n)], dtype=object),
        }
    )
    path = tmp_path / "f.zarc"
    zarchive.save(df, path)
    with zarchive.open(path) as arc:
        members = list(arc.plan().members)
        firsts = [m for m in members if m.startswith(("t", "o"))]
        assert members[: len(firsts)] == firsts and len(firsts) < len(members)
        pd.testing.assert_frame_equal(arc.load(), df, check_exact=True)
    parts = unpack(path.read_bytes())
    parts.manifest["root"]["data"][3]["$type"] = "no.such.type"  # refused by the plan
    with pytest.raises(zarchive.ZArchiveError, match="no.such.type") as err:
        zarchive.read(pack(parts))
    assert err.value.path == "data/3"


def test_text_in_python_storage_is_written_with_int32_offsets(tmp_path: Path) -> None:
    s = pd.Series(_column(50_000, 60_000, missing_every=5), dtype=STR)
    path = tmp_path / "s.zarc"
    zarchive.save({"s": s}, path)
    with zarchive.open(path) as arc:
        node = arc.node("s")["values"]
        assert node["layout"] == "utf8" and node["offsets"]["dtype"] == "<i4"
    pd.testing.assert_series_equal(zarchive.read(path)["s"], s, check_exact=True)
