"""zarchive.inspection.diff on tables: a pandas frame's or Series' row index (labels compared exactly,
in pieces), column labels and their order, dtypes; pandas and polars frames written fresh, and
`zarchive diff`'s exit status on them (0 same, 1 changed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.inspection.diff import ArchiveDiff, TableChange, diff_archives
from zarchive.inspection.diff_tables import first_difference, index_difference

ROOT = Path(__file__).resolve().parent.parent


def _diff(tmp_path: Path, a: Any, b: Any, **kw: Any) -> ArchiveDiff:
    zarchive.save({"t": a}, tmp_path / "a.zarc")
    zarchive.save({"t": b}, tmp_path / "b.zarc")
    return diff_archives(tmp_path / "a.zarc", tmp_path / "b.zarc", **kw)


def _part(d: ArchiveDiff, part: str, path: str = "t") -> TableChange:
    (found,) = [t for t in d.tables if t.path == path and t.part == part]
    return found


def _frame(index: Any = None) -> pd.DataFrame:
    n = 5 if index is None else len(index)
    return pd.DataFrame({"x": np.arange(n, dtype=np.float64), "s": [f"r{i}" for i in range(n)]}, index=index)


def test_equal_frames_are_same(tmp_path: Path) -> None:
    d = _diff(tmp_path, _frame(), _frame())
    assert [(t.part, t.status) for t in d.tables] == [("index", "same"), ("columns", "same"), ("dtypes", "same")]
    assert not d.changed()


def test_shifted_range_index_is_a_change(tmp_path: Path) -> None:
    a = _frame()
    b = a.copy()
    b.index = b.index + 10
    d = _diff(tmp_path, a, b)
    index = _part(d, "index")
    assert index.status == "changed" and index.detail == "row 0: 0 -> 10"
    assert (index.a, index.b) == ("RangeIndex(0, 5, 1)", "RangeIndex(10, 15, 1)")
    # the columns' values are equal: the index is what changed, and the columns do not say otherwise
    assert {t.path: t.status for t in d.tensors} == {"t/x": "same"}
    assert {v.path: v.status for v in d.values} == {"t/s": "same"}
    assert d.changed()
    text = d.render(only_changed=True)
    line = next(x for x in text.splitlines() if " index " in x)
    assert line.split()[:3] == ["t", "index", "changed"] and line.endswith("row 0: 0 -> 10") and "t/x" not in text
    out = json.loads(json.dumps(d.to_json(), allow_nan=False))
    assert out["changed"] is True
    assert {"path": "t", "part": "index", "status": "changed", "a": "RangeIndex(0, 5, 1)",
            "b": "RangeIndex(10, 15, 1)", "detail": "row 0: 0 -> 10"} in out["tables"]  # fmt: skip


def test_range_index_equals_its_int_index(tmp_path: Path) -> None:
    """A RangeIndex and the Index of int64 with the same labels hold the same rows (pandas' 'equiv')."""
    d = _diff(tmp_path, _frame(), _frame(pd.Index(np.arange(5, dtype=np.int64))))
    assert _part(d, "index").status == "same" and not d.changed()
    d = _diff(tmp_path, _frame(), _frame(pd.Index(np.arange(5, dtype=np.float64))))
    assert _part(d, "index").detail == "dtype int64 -> float64"


def test_datetime_index(tmp_path: Path) -> None:
    days = pd.date_range("2024-01-01", periods=6, freq="D")
    moved = days.delete(2).insert(2, pd.Timestamp("2024-02-01"))
    d = _diff(tmp_path, _frame(days), _frame(moved))
    assert _part(d, "index").detail == "row 2: 2024-01-03 00:00:00 -> 2024-02-01 00:00:00"
    assert _part(d, "index").b == f"DatetimeIndex[6] {days.dtype}"
    assert not _diff(tmp_path, _frame(days), _frame(days.copy())).changed()
    # the same instants at another resolution are another index, exactly
    d = _diff(tmp_path, _frame(days.as_unit("s")), _frame(days.as_unit("ns")))
    assert _part(d, "index").detail == "dtype datetime64[s] -> datetime64[ns]"
    utc = days.tz_localize("UTC")
    d = _diff(tmp_path, _frame(days), _frame(utc))
    assert _part(d, "index").detail == (
        f"dtype {days.dtype} -> {utc.dtype}; row 0: 2024-01-01 00:00:00 -> 2024-01-01 00:00:00+00:00"
    )


def test_multi_index(tmp_path: Path) -> None:
    mi = pd.MultiIndex.from_product([["a", "b"], [1, 2, 3]], names=["key", "n"])
    other = pd.MultiIndex.from_tuples([*mi[:4], ("b", 9), mi[5]], names=["key", "n"])
    d = _diff(tmp_path, _frame(mi), _frame(other))
    assert _part(d, "index").detail == 'row 4: ("b", 2) -> ("b", 9)'
    renamed = mi.set_names(["key", "step"])
    assert (
        _part(_diff(tmp_path, _frame(mi), _frame(renamed)), "index").detail == 'names ["key", "n"] -> ["key", "step"]'
    )
    assert not _diff(tmp_path, _frame(mi), _frame(mi.copy())).changed()
    # the same labels from other levels and codes (an unused level value) are the same index
    relevelled = pd.MultiIndex(
        levels=[["a", "b", "z"], [1, 2, 3]], codes=[[0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2]], names=["key", "n"]
    )
    assert _part(_diff(tmp_path, _frame(mi), _frame(relevelled)), "index").status == "same"


def test_length_and_series_index(tmp_path: Path) -> None:
    a = pd.Series([1.0, 2.0, 3.0], index=["a", "b", "c"], name="loss")
    d = _diff(tmp_path, a, pd.Series([1.0, 2.0, 3.0], index=["a", "b", "d"], name="loss"))
    assert [(t.part, t.status, t.detail) for t in d.tables] == [("index", "changed", 'row 2: "c" -> "d"')]
    assert {t.path: t.status for t in d.tensors} == {"t": "same"}
    d = _diff(tmp_path, _frame(), _frame().iloc[:4])
    assert _part(d, "index").detail == "length 5 -> 4"


def test_column_order_and_labels(tmp_path: Path) -> None:
    df = _frame()
    d = _diff(tmp_path, df, df[["s", "x"]])
    columns = _part(d, "columns")
    assert columns.status == "changed" and columns.detail == 'same columns, another order; column 0: "x" -> "s"'
    assert (columns.a, columns.b) == (["x", "s"], ["s", "x"])
    assert {t.path: t.status for t in d.tensors} == {"t/x": "same"} and d.changed()
    # labels that print alike but are not equal: the int 0 and the text "0"
    d = _diff(tmp_path, pd.DataFrame({0: [1.0]}), pd.DataFrame({"0": [1.0]}))
    assert _part(d, "columns").detail == f'dtype int64 -> {pd.Index(["0"]).dtype}; column 0: 0 -> "0"'


def test_dtypes(tmp_path: Path) -> None:
    df = _frame()
    d = _diff(tmp_path, df, df.astype({"x": "float32"}))
    assert _part(d, "dtypes").detail == '"x": float64 -> float32'
    assert _part(d, "dtypes").a == {"x": "float64", "s": df.dtypes["s"].name}


def test_polars_column_order_and_dtypes(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    df = pl.DataFrame({"x": [1.0, 2.0], "s": ["a", "b"], "i": [1, 2]})
    d = _diff(tmp_path, df, df.select("s", "x", "i"))
    assert [(t.part, t.status) for t in d.tables] == [("columns", "changed"), ("dtypes", "same")]
    assert _part(d, "columns").detail.startswith("same columns, another order") and d.changed()
    d = _diff(tmp_path, df, df.with_columns(pl.col("i").cast(pl.Int32)))
    assert _part(d, "dtypes").detail == '"i": Int64 -> Int32'
    assert not _diff(tmp_path, df, df.clone()).changed()


def test_big_index_in_pieces(tmp_path: Path) -> None:
    """An index of 300,000 labels differing at one row past two pieces: found exactly."""
    n = 300_000
    labels = np.arange(n, dtype=np.int64) * 3
    moved = labels.copy()
    moved[150_001] += 1
    a = pd.DataFrame({"x": np.zeros(n)}, index=pd.Index(labels))
    b = pd.DataFrame({"x": np.zeros(n)}, index=pd.Index(moved))
    d = _diff(tmp_path, a, b)
    assert _part(d, "index").detail == "row 150,001: 450003 -> 450004"
    assert {t.path: t.status for t in d.tensors} == {"t/x": "same"}


def test_index_over_the_budget_is_refused(tmp_path: Path) -> None:
    n = 1 << 20
    a = pd.DataFrame({"x": np.zeros(n, dtype=np.int8)}, index=pd.Index(np.arange(n, dtype=np.int64)))
    b = pd.DataFrame({"x": np.zeros(n, dtype=np.int8)}, index=pd.Index(np.arange(n, dtype=np.int64) + 1))
    with pytest.raises(zarchive.ZArchiveError):
        _diff(tmp_path, a, b, max_read_bytes=2 << 20)


def test_index_memory_is_reading_the_two_indexes(tmp_path: Path) -> None:
    """Two 4M-label DatetimeIndexes (32 MiB each): the diff's peak is what reading the two indexes
    costs (the archive's own reads) and a few pieces more, never another copy of an index (an
    elementwise comparison of the two would add 32 MiB or more)."""
    import tracemalloc

    n = 1 << 22
    days = pd.date_range("2000-01-01", periods=n, freq="s", unit="s")
    last = pd.DatetimeIndex(["1999-01-01"]).as_unit("s")
    for name, index in (("a", days), ("b", days.delete(n - 1).append(last))):
        zarchive.save({"t": pd.DataFrame({"x": np.zeros(n, dtype=np.int8)}, index=index)}, tmp_path / f"{name}.zarc")
    del days, index
    tracemalloc.start()
    try:
        with zarchive.open(tmp_path / "a.zarc") as a, zarchive.open(tmp_path / "b.zarc") as b:
            loaded = [arc.load_node(arc.node("t")["index"], "t") for arc in (a, b)]
        _, reading = tracemalloc.get_traced_memory()
        del loaded
        tracemalloc.reset_peak()
        d = diff_archives(tmp_path / "a.zarc", tmp_path / "b.zarc")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert _part(d, "index").detail == f"row {n - 1:,}: 2000-02-18 13:05:03 -> 1999-01-01 00:00:00"
    assert peak < reading + (16 << 20), f"peak {peak / 2**20:.0f} MiB, reading the indexes {reading / 2**20:.0f} MiB"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-3, 3), min_size=0, max_size=40),
    st.lists(st.integers(-3, 3), min_size=0, max_size=40),
    st.integers(1, 7),
)
def test_first_difference_is_the_first(xs: list[int], ys: list[int], piece: int) -> None:
    ia, ib = pd.Index(xs, dtype=np.int64), pd.Index(ys, dtype=np.int64)
    expected = next((i for i, (x, y) in enumerate(zip(xs, ys)) if x != y), None)
    assert first_difference(ia, ib, piece=piece) == expected
    assert (index_difference(ia, ib, piece=piece) == "") == (xs == ys)


@pytest.mark.parametrize(
    ("a", "b", "first"),
    [((0, 10, 1), (0, 10, 1), None), ((0, 10, 1), (1, 11, 1), 0), ((0, 10, 1), (0, 20, 2), 1),
     ((0, 1, 1), (0, 5, 3), None), ((5, 5, 1), (6, 6, 1), None), ((0, 10**18, 1), (0, 10**18 + 1, 1), None),
     ((0, 10**18, 1), (0, 10**18, 2), 1), ((3, -7, -2), (3, -7, -2), None)],
    ids=str,
)  # fmt: skip
def test_ranges_by_arithmetic(a: tuple[int, int, int], b: tuple[int, int, int], first: int | None) -> None:
    """Two RangeIndexes (one of 10**18 labels among them) compared without walking them."""
    ra, rb = pd.RangeIndex(*a), pd.RangeIndex(*b)
    assert first_difference(ra, rb) == first
    if len(ra) < 100 and len(rb) < 100:
        assert first_difference(pd.Index(list(ra)), pd.Index(list(rb)), piece=3) == first


def test_nan_labels_equal_nan() -> None:
    a = pd.Index([1.0, float("nan"), 3.0])
    assert index_difference(a, a.copy(), piece=1) == ""
    assert index_difference(a, pd.Index([1.0, 2.0, 3.0]), piece=2) == "row 1: nan -> 2.0"


# --- the command line: exit 0 same, 1 changed ---


def _cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zarchive", *map(str, args)],
        capture_output=True, text=True, timeout=120, check=False, cwd=str(cwd),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def test_cli_exit_status_on_index(tmp_path: Path) -> None:
    days = pd.date_range("2024-01-01", periods=4, freq="D")
    zarchive.save({"t": _frame(days)}, tmp_path / "a.zarc")
    zarchive.save({"t": _frame(days.copy())}, tmp_path / "same.zarc")
    zarchive.save({"t": _frame(days + pd.Timedelta(hours=1))}, tmp_path / "moved.zarc")
    same = _cli("diff", "a.zarc", "same.zarc", cwd=tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "tables: 0 changed of 3" in same.stdout
    moved = _cli("diff", "--only-changed", "a.zarc", "moved.zarc", cwd=tmp_path)
    assert moved.returncode == 1, moved.stdout + moved.stderr
    line = next(x for x in moved.stdout.splitlines() if " index " in x)
    assert "changed" in line and "row 0: 2024-01-01 00:00:00 -> 2024-01-01 01:00:00" in line
    as_json = _cli("diff", "--json", "--only-changed", "a.zarc", "moved.zarc", cwd=tmp_path)
    assert as_json.returncode == 1
    out = json.loads(as_json.stdout)
    assert [(t["path"], t["part"], t["status"]) for t in out["tables"]] == [("t", "index", "changed")]


def test_range_of_10_18_rows_is_not_walked(tmp_path: Path) -> None:
    """A 60-byte RangeIndex naming 10**18 rows, renamed: the diff says so at once."""
    d = _diff(
        tmp_path,
        pd.DataFrame(index=pd.RangeIndex(10**18, name="a")),
        pd.DataFrame(index=pd.RangeIndex(10**18, name="b")),
    )
    assert _part(d, "index").detail == 'names ["a"] -> ["b"]'


# --- malformed indexes: refused with a ZArchiveError, in a child under an address-space limit ---
MALFORMED = {
    "range_of_10_40": {"kind": "range", "start": 10**40, "stop": 10**41, "step": 1, "name": None},
    "range_step_0": {"kind": "range", "start": 0, "stop": 4, "step": 0, "name": None},
    "range_of_text": {"kind": "range", "start": "a", "stop": 4, "step": 1, "name": None},
    "length_lie": {"length": 10**12},
    "unknown_kind": {"kind": "zzz"},
    "unknown_class": {"class": "os.system"},
    "multi_without_levels": {"kind": "multi", "length": 4, "names": [None], "levels": [], "codes": []},
}
CHILD = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4_000_000_000, 4_000_000_000))
sys.path[:0] = [{root!r}]
import zarchive
from zarchive.inspection.diff import diff_archives
out = {{}}
for name in {names!r}:
    try:
        d = diff_archives({ok!r}, f"{{{folder!r}}}/{{name}}.zarc")
        out[name] = ["compared", [t.detail for t in d.tables if t.part == "index"]]
    except zarchive.ZArchiveError as e:
        out[name] = ["refused", type(e).__name__, str(e)]
    except Exception as e:
        out[name] = ["raw", type(e).__name__, str(e)]
print(json.dumps(out))
"""


def test_malformed_indexes_are_refused(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from rewrite import rewrite

    ok = tmp_path / "ok.zarc"
    zarchive.save({"t": pd.DataFrame({"x": np.arange(4.0)}, index=pd.Index([10, 11, 12, 13]))}, ok, compress=False)
    for name, fields in MALFORMED.items():

        def edit(manifest: dict[str, Any], fields: dict[str, Any] = fields) -> None:
            index = manifest["root"]["t"]["index"]
            if fields.get("kind") in ("range", "multi"):
                index.clear()
                index["$type"] = "pandas.Index"
            index.update(fields)

        rewrite(ok, tmp_path / f"{name}.zarc", manifest_edit=edit)
    code = CHILD.format(root=str(ROOT), names=list(MALFORMED), ok=str(ok), folder=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    for name, reply in out.items():
        assert reply[0] == "refused" and reply[1] == "FormatError" and "/t" in reply[2], (name, reply)
