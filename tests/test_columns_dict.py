"""Text columns that repeat values, stored with a dictionary (format 1.4, the pandas "dict" layout;
spec/pandas.md 5.3): when the writer picks it, round trips of every text dtype with repeated and
missing values, the numpy-only recipe of the spec, and the refusal of bad codes."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hostile.craft import pack, unpack
from hypothesis import given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.handlers.pandas_text import _codes_give_back, dictionary_codes
from zarchive.nodes import BUILTIN_SCHEMAS

EXAMPLES = Path(__file__).resolve().parent.parent / "spec" / "examples"
TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12)
DTYPES = ["str", "string", "object", pd.StringDtype("python", na_value=np.nan)]
# pandas' "str" without pyarrow installed: python storage, which the dictionary layout is for (columns
# stored by pyarrow are written from their own Arrow buffers, in the utf8 layout)
STR = pd.StringDtype("python", na_value=np.nan)


def layout_of(obj: Any, **settings: Any) -> tuple[str, dict[str, Any]]:
    buf = io.BytesIO()
    zarchive.save({"s": obj}, buf, **settings)
    with zarchive.open(buf.getvalue()) as arc:
        node = arc.node("s")["values"] if isinstance(obj, pd.Series) else arc.node("s")
    return node["layout"], node


@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=30, deadline=None)
@given(
    words=st.lists(TEXT, min_size=1, max_size=6, unique=True),
    picks=st.lists(st.integers(-1, 5), min_size=0, max_size=300),
)
def test_repeated_text_round_trips(dtype: Any, words: list[str], picks: list[int]) -> None:
    """Values drawn from a few words, None where the pick is -1: every text dtype comes back exactly
    (dtype, missing values, order), through a dictionary or not."""
    values = [None if p < 0 else words[p % len(words)] for p in picks]
    s = pd.Series(values, dtype=dtype)
    df = pd.DataFrame({"t": s, "n": np.arange(len(s))}, index=pd.Index(values, dtype=dtype))
    buf = io.BytesIO()
    zarchive.save(df, buf, external_list_threshold=2)
    back = zarchive.read(buf.getvalue())
    pd.testing.assert_frame_equal(back, df, check_exact=True)
    assert back["t"].dtype == s.dtype and back.index.dtype == df.index.dtype


@pytest.mark.parametrize("missing", [None, np.nan])
def test_object_text_keeps_its_missing_value(missing: Any) -> None:
    s = pd.Series(["x", missing, "y", "x"] * 100, dtype=object)
    layout, node = layout_of(s)
    assert layout == "dict" and node["missing"] == ("None" if missing is None else "NaN")
    back = zarchive.read(_saved(s))
    pd.testing.assert_series_equal(back, s, check_exact=True)
    assert back[1] is missing or (missing is not None and np.isnan(back[1]))


def _saved(obj: Any, **settings: Any) -> bytes:
    buf = io.BytesIO()
    zarchive.save(obj, buf, **settings)
    return buf.getvalue()


def test_the_writer_picks_a_dictionary_only_where_it_pays() -> None:
    repeated = pd.Series(pd.array(["a", None, "é", "b"] * 300, dtype=STR))
    layout, node = layout_of(repeated)
    assert layout == "dict" and node["count"] == 3 and node["codes"]["dtype"] == "|i1"
    assert "valid" not in node and "mask" not in node
    distinct = pd.Series(pd.array([f"v{i}" for i in range(1200)], dtype=STR))
    assert layout_of(distinct)[0] == "utf8"
    half = pd.Series(pd.array([f"v{i // 2}" for i in range(1200)], dtype=STR))  # 600 distinct: half
    assert layout_of(half)[0] == "dict"
    over = pd.Series(pd.array([f"v{i // 2}" for i in range(1201)], dtype=STR))  # 601 distinct of 1201
    assert layout_of(over)[0] == "utf8"
    wide = pd.Series(pd.array([f"v{i % 300}" for i in range(1200)], dtype=STR))
    assert layout_of(wide)[1]["codes"]["dtype"] == "<i2"


@pytest.mark.parametrize(("distinct", "dictionary"), [(1000, True), (200_000, False)])
def test_large_columns_are_sampled_first(distinct: int, dictionary: bool) -> None:
    """Columns of more rows than 4 samples decide on a sample: 1,000 values repeated over 200,000
    rows (shuffled) take a dictionary, 200,000 distinct ones do not."""
    rng = np.random.default_rng(3)
    values = np.char.add("w", (rng.permutation(200_000) % distinct).astype("U7")).astype(object)
    values[::7] = None
    coded = dictionary_codes(values, len(range(0, 200_000, 7)))
    assert (coded is not None) == dictionary
    if coded is not None:
        codes, uniques = coded
        assert codes.dtype == np.int16 and len(uniques) == distinct
        assert (uniques[codes[codes >= 0]] == values[codes >= 0]).all() and (codes[::7] == -1).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_strings_that_differ_after_a_nul_keep_their_values(dtype: Any) -> None:
    """pandas 3.0.0's factorize gives '', '\\x00', 'a' and 'a\\x00b' two codes between them (it compares up
    to the first NUL): found on the dependency floors. Each value must come back as saved, whichever
    layout the writer then picks."""
    s = pd.Series(["", "\x00", "a", "a\x00b", None, "a\x00c"] * 50, dtype=dtype)
    pd.testing.assert_series_equal(zarchive.read(_saved(s)), s, check_exact=True)
    values = np.array(s.astype(object).where(s.notna(), None).tolist(), dtype=object)
    coded = dictionary_codes(values, 50)
    if coded is not None:
        codes, uniques = coded
        assert len(uniques) == 5 and (uniques[codes[codes >= 0]] == values[codes >= 0]).all()


def test_codes_that_lose_a_value_are_not_used() -> None:
    """The check behind the test above, fed the codes pandas 3.0.0 gives: the column is not coded."""
    values = np.array(["", "\x00", "a", "a\x00b"] * 3, dtype=object)
    conflated = (np.array([0, 0, 1, 1] * 3), np.array(["", "a"], dtype=object))
    assert not _codes_give_back(values, *conflated)
    assert _codes_give_back(values, np.array([0, 1, 2, 3] * 3), values[:4])


def test_a_lone_surrogate_in_a_repeated_column_keeps_the_jsonl_layout() -> None:
    s = pd.Series(["a", "\ud800", None] * 200, dtype=pd.StringDtype("python"))
    assert layout_of(s)[0] == "strings"
    pd.testing.assert_series_equal(zarchive.read(_saved(s)), s)


def test_the_dict_layout_is_format_1_4() -> None:
    assert BUILTIN_SCHEMAS["pandas.array"].since == "1.5"  # "dict" came in 1.4, "arrow" (test_arrow_columns.py) in 1.5
    assert zarchive.read(EXAMPLES / "columns_dict.zarc")["frame"].shape == (40, 5)


def test_the_spec_recipe_reads_a_dict_column_with_numpy_alone(tmp_path: Path) -> None:
    """spec/pandas.md 5.3: unzip the uncompressed example, read the dictionary and the codes with numpy."""
    path = EXAMPLES / "columns_dict.uncompressed.zarc"
    with zipfile.ZipFile(path) as z:
        z.extractall(tmp_path)
        manifest = json.loads(z.read("manifest.json"))
    expected = zarchive.read(path)["frame"]

    def array(n: dict[str, Any]) -> np.ndarray:  # an .npy member, or a small array inline
        return np.load(tmp_path / n["$ref"]) if "$ref" in n else np.array(n["data"], dtype=n["dtype"])

    seen = 0
    for i, key in enumerate(manifest["root"]["frame"]["column_keys"]):
        node = manifest["root"]["frame"]["data"][i]
        if node.get("layout") != "dict":
            continue
        offsets = array(node["offsets"])
        data = (tmp_path / node["$ref"]).read_bytes()
        dictionary = [data[a:b].decode("utf-8") for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
        codes = array(node["codes"])
        text = [dictionary[c] if c >= 0 else None for c in codes.tolist()]
        assert text == [None if pd.isna(v) else v for v in expected[key].tolist()], key
        seen += 1
    assert seen == 4


# --- bad files ------------------------------------------------------------------------------------------
def _dict_file(tmp_path: Path) -> tuple[Path, Any]:
    s = pd.Series(pd.array(["a", None, "b", "c"] * 100, dtype=STR))
    zarchive.save({"s": s}, tmp_path / "ok.zarc", durable=False)
    return tmp_path / "ok.zarc", unpack((tmp_path / "ok.zarc").read_bytes())


def _codes(values: list[float] | list[int], dtype: str) -> dict[str, Any]:
    return {"$type": "numpy.ndarray", "dtype": dtype, "shape": [len(values)], "data": values}


BAD_CODES: dict[str, tuple[Any, str]] = {
    "out-of-range": (_codes([0, 1, 3] + [0] * 397, "|i1"), "codes must lie in -1..2"),
    "below-minus-one": (_codes([0, -2] + [0] * 398, "|i1"), "codes must lie in -1..2"),
    "float": (_codes([0.0] * 400, "<f8"), "signed integer"),
    "unsigned": (_codes([0] * 400, "|u1"), "signed integer"),
    "more-than-rows": (_codes([0] * 401, "|i1"), "400 values"),
    "two-d": ({"$type": "numpy.ndarray", "dtype": "|i1", "shape": [200, 2], "data": [[0, 0]] * 200}, "1-D"),
}


@pytest.mark.parametrize("case", list(BAD_CODES))
def test_bad_codes_are_format_errors_naming_the_path(tmp_path: Path, case: str) -> None:
    codes, match = BAD_CODES[case]
    _, parts = _dict_file(tmp_path)
    parts.manifest["root"]["s"]["values"]["codes"] = codes
    (tmp_path / "bad.zarc").write_bytes(pack(parts))
    with pytest.raises(zarchive.FormatError, match=match) as err:
        zarchive.read(tmp_path / "bad.zarc")
    assert err.value.path == "s/codes"


def test_a_count_that_does_not_fit_the_offsets_names_the_member(tmp_path: Path) -> None:
    _, parts = _dict_file(tmp_path)
    node = parts.manifest["root"]["s"]["values"]
    node["count"] = 4
    (tmp_path / "bad.zarc").write_bytes(pack(parts))
    with pytest.raises(zarchive.FormatError, match="4 string offsets for 4 strings|5 string") as err:
        zarchive.read(tmp_path / "bad.zarc")
    assert err.value.member == node["$ref"] and err.value.path == "s"


def test_a_dictionary_with_duplicates_reads_as_its_values(tmp_path: Path) -> None:
    """Writers store each distinct value once; a reader does not rely on it: duplicate dictionary
    values are allowed and read as the values they are (spec/pandas.md 5.3)."""
    _, parts = _dict_file(tmp_path)
    node = parts.manifest["root"]["s"]["values"]
    (member,) = [n for n in parts.members if n.endswith(".utf8")]  # too small to compress
    parts.members[member] = b"abca"
    node.update(count=4, nbytes=4, offsets=_codes([0, 1, 2, 3, 4], "<i8"))
    node["codes"] = _codes([3, -1, 1, 2] * 100, "|i1")
    (tmp_path / "dup.zarc").write_bytes(pack(parts))
    back = zarchive.read(tmp_path / "dup.zarc")["s"]
    pd.testing.assert_series_equal(back, pd.Series(pd.array(["a", None, "b", "c"] * 100, dtype=STR)))


def test_the_planner_counts_a_dictionary_columns_rows(tmp_path: Path) -> None:
    s = pd.Series(pd.array(["a", "b"] * 200_000, dtype=STR))
    zarchive.save({"s": s}, tmp_path / "t.zarc", durable=False)
    with pytest.raises(zarchive.UnsafeArchiveError, match="over max_read_bytes"):
        zarchive.read(tmp_path / "t.zarc", max_read_bytes=1_000_000)
    pd.testing.assert_series_equal(zarchive.read(tmp_path / "t.zarc", max_read_bytes=20_000_000)["s"], s)


@pytest.mark.parametrize("na_value", [np.nan, pd.NA], ids=["str", "string"])
def test_arrow_backed_text_is_coded_by_arrow_and_read_back_by_it(na_value: Any) -> None:
    """With pyarrow installed (pandas' default `str` is then Arrow-backed), repeated text is written
    as the same dict layout, coded by Arrow's hash table, and read back decoded by Arrow into an
    Arrow-backed array; all-distinct text keeps the utf8 layout."""
    pytest.importorskip("pyarrow")
    dtype = pd.StringDtype("pyarrow", na_value=na_value)
    s = pd.Series(pd.array(["a", None, "é", "b", "a\x00b", ""] * 300, dtype=dtype))
    layout, node = layout_of(s)
    assert layout == "dict" and node["storage"] == "pyarrow" and node["count"] == 5 and node["codes"]["dtype"] == "|i1"
    back = zarchive.read(_saved({"s": s}))["s"]
    assert type(back.array) is type(s.array) and back.dtype == s.dtype
    pd.testing.assert_series_equal(back, s, check_exact=True)
    distinct = pd.Series(pd.array([f"v{i}" for i in range(1200)], dtype=dtype))
    assert layout_of(distinct)[0] == "utf8"
    big = pd.Series(pd.array(np.char.add("w", (np.arange(200_000) % 1000).astype("U4")), dtype=dtype))
    assert layout_of(big)[0] == "dict"  # decided on a sample first, as for python storage
    pd.testing.assert_series_equal(zarchive.read(_saved({"s": big}))["s"], big)


def test_an_arrow_backed_read_refuses_a_dictionary_that_is_not_utf8(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    s = pd.Series(pd.array(["ab", "cd"] * 1000, dtype=pd.StringDtype("pyarrow", na_value=np.nan)))
    path = tmp_path / "a.zarc"
    zarchive.save({"s": s}, path, compress=False)
    with zarchive.open(path) as arc:
        member = arc.node("s")["values"]["$ref"]
    raw = bytearray(path.read_bytes())
    at = raw.find(b"abcd")
    assert at > 0
    raw[at : at + 2] = b"\xff\xfe"
    with pytest.raises(zarchive.ZArchiveError) as err:
        zarchive.ZArchive(verify=False).read(bytes(raw))
    assert err.value.member == member


def test_a_long_value_repeated_over_many_rows_is_not_copied_into_every_row(tmp_path: Path) -> None:
    """Arrow text gives every row its own copy of its value: a few long values over many rows would
    cost rows x length. Where that is over the read's budget, the column comes back in python storage
    (rows sharing one string per value) with a warning, its values intact."""
    pytest.importorskip("pyarrow")
    dtype = pd.StringDtype("pyarrow", na_value=np.nan)
    s = pd.Series(pd.array(["x" * 10_000, "y" * 10_000] * 5_000, dtype=dtype))  # 100 MB as Arrow text
    path = tmp_path / "long.zarc"
    zarchive.save({"s": s}, path)
    assert path.stat().st_size < 200_000
    with pytest.warns(UserWarning, match="loaded with python storage"):
        back = zarchive.ZArchive(max_read_bytes=20_000_000).read(path)["s"]
    assert back.dtype == pd.StringDtype("python", na_value=np.nan)
    assert back.tolist() == s.tolist() and back.iloc[0] is back.iloc[2]
    assert zarchive.read(path)["s"].dtype == dtype  # within the default budget: Arrow text
