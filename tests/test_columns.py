"""Text columns in Arrow's string layout (format 1.3, the pandas "utf8" layout; spec/pandas.md 5.2):
the encoder and decoder, round trips of every text dtype, the numpy-only recipe of the spec, the
planner's budget and the refusal of a newer reader's shape."""

from __future__ import annotations

import io
import itertools
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
from zarchive.container.utf8_column import decode_utf8, encode_utf8
from zarchive.nodes import BUILTIN_SCHEMAS

EXAMPLES = Path(__file__).resolve().parent.parent / "spec" / "examples"
TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=20)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(TEXT, max_size=60))
def test_encode_then_decode_gives_the_strings(values: list[str]) -> None:
    offsets, data = encode_utf8(values)
    assert offsets.dtype == np.int64 and len(offsets) == len(values) + 1
    assert data == "".join(values).encode("utf-8")
    assert [data[a:b].decode() for a, b in itertools.pairwise(offsets.tolist())] == values
    assert decode_utf8(offsets, data, len(values), member="m") == values
    assert decode_utf8(offsets.astype(np.int32), data, len(values), member="m") == values


def test_data_holding_every_separator_byte_is_sliced() -> None:
    """The fast path needs one byte the data does not hold; without one the strings are sliced."""
    values = ["".join(map(chr, range(32))) + "\x7f", "Grüße", "", "日本語 🎉"] * 3
    offsets, data = encode_utf8(values)
    assert decode_utf8(offsets, data, len(values), member="m") == values


def test_missing_rows_are_empty_in_the_offsets() -> None:
    present = np.array([True, False, True, False])
    offsets, data = encode_utf8(["é", "z"], present)
    assert offsets.tolist() == [0, 2, 2, 3, 3] and data == "éz".encode()


@pytest.mark.parametrize(
    ("offsets", "data", "match"),
    [
        ([0, 2, 1, 3], b"abc", "decrease"),
        ([0, 1, 2, 4], b"abc", "run from 0 to 4"),
        ([1, 2, 3, 3], b"abc", "run from 1"),
        ([0, 1, 3], b"abc", "3 string offsets for 3 strings"),
        ([0, 1, 2, 3], b"a\xffc", "UTF-8"),
        ([0, 1, 2, 4], "aé".encode() + b"!", "UTF-8"),  # a string ends inside "é"
    ],
)
def test_bad_columns_are_format_errors_naming_the_member(offsets: list[int], data: bytes, match: str) -> None:
    with pytest.raises(zarchive.FormatError, match=match) as err:
        decode_utf8(np.array(offsets, dtype=np.int64), data, 3, member="col.utf8")
    assert err.value.member == "col.utf8"


def test_float_offsets_are_refused() -> None:
    with pytest.raises(zarchive.FormatError, match="int64 or int32"):
        decode_utf8(np.array([0.0, 1.0]), b"a", 1, member="m")


@pytest.mark.parametrize("dtype", ["str", "string", "object", pd.StringDtype("python", na_value=np.nan)])
@settings(max_examples=25, deadline=None)
@given(values=st.lists(st.none() | TEXT, min_size=0, max_size=400))
def test_text_columns_round_trip(dtype: Any, values: list[str | None]) -> None:
    s = pd.Series(values, dtype=dtype)
    df = pd.DataFrame({"t": s, "n": np.arange(len(s))})
    buf = io.BytesIO()
    zarchive.save(df, buf, external_list_threshold=3)
    back = zarchive.read(buf.getvalue())
    pd.testing.assert_frame_equal(back, df, check_exact=True)
    assert back["t"].dtype == s.dtype


def test_a_lone_surrogate_keeps_the_jsonl_layout(tmp_path: Path) -> None:
    s = pd.Series(["a", "\ud800", None] * 200, dtype=pd.StringDtype("python"))
    zarchive.save({"s": s}, tmp_path / "s.zarc", durable=False)
    with zarchive.open(tmp_path / "s.zarc") as arc:
        assert arc.node("s")["values"]["layout"] == "strings"
        pd.testing.assert_series_equal(arc["s"], s)


def test_one_column_reads_alone(tmp_path: Path) -> None:
    df = pd.DataFrame({"a": pd.array([f"v{i}" for i in range(1000)], dtype="str"), "b": np.arange(1000)})
    zarchive.save({"df": df}, tmp_path / "d.zarc", durable=False)
    with zarchive.open(tmp_path / "d.zarc") as arc:
        pd.testing.assert_series_equal(arc["df/a"], df["a"])
        node = arc.node("df/a")["values"]
        assert node["layout"] == "utf8" and node["$ref"] == "df/a.utf8.zst"


def test_the_spec_recipe_reads_a_text_column_with_numpy_alone(tmp_path: Path) -> None:
    """spec/pandas.md 5.2: unzip the uncompressed example, read offsets, data and validity with numpy."""
    path = EXAMPLES / "columns_text.uncompressed.zarc"
    with zipfile.ZipFile(path) as z:
        z.extractall(tmp_path)
        manifest = json.loads(z.read("manifest.json"))
    expected = zarchive.read(path)["frame"]

    def array(n: dict[str, Any]) -> np.ndarray:  # an .npy member, or a small array inline
        return np.load(tmp_path / n["$ref"]) if "$ref" in n else np.array(n["data"], dtype=n["dtype"])

    seen = 0
    for i, key in enumerate(manifest["root"]["frame"]["column_keys"]):
        node = manifest["root"]["frame"]["data"][i]
        if node.get("layout") != "utf8":
            continue
        offsets = array(node["offsets"])
        data = (tmp_path / node["$ref"]).read_bytes()
        valid = array(node["valid"]) if "valid" in node else np.ones(len(offsets) - 1, bool)
        text = [
            data[a:b].decode("utf-8") if ok else None
            for a, b, ok in zip(offsets[:-1].tolist(), offsets[1:].tolist(), valid.tolist())
        ]
        assert text == [None if pd.isna(v) else v for v in expected[key].tolist()], key
        seen += 1
    assert seen == 4


def test_the_planner_counts_text_column_bytes(tmp_path: Path) -> None:
    df = pd.DataFrame({"s": pd.array([f"value {i}" for i in range(50_000)], dtype="str")})
    zarchive.save(df, tmp_path / "t.zarc", durable=False)
    with pytest.raises(zarchive.UnsafeArchiveError, match="over max_read_bytes"):
        zarchive.read(tmp_path / "t.zarc", max_read_bytes=1_000_000)
    pd.testing.assert_frame_equal(zarchive.read(tmp_path / "t.zarc", max_read_bytes=20_000_000), df)


def test_the_utf8_layout_is_format_1_3() -> None:
    # "utf8" came in 1.3, "dict" (test_columns_dict.py) in 1.4, "arrow" (test_arrow_columns.py) in 1.5
    assert BUILTIN_SCHEMAS["pandas.array"].since == "1.5"
    assert zarchive.read(EXAMPLES / "columns_text.zarc")["frame"].shape == (12, 5)


def test_a_newer_files_unknown_text_layout_is_a_version_error(tmp_path: Path) -> None:
    df = pd.DataFrame({"s": pd.array([f"v{i}" for i in range(600)], dtype="str")})
    zarchive.save(df, tmp_path / "t.zarc", durable=False)
    parts = unpack((tmp_path / "t.zarc").read_bytes())
    parts.manifest["format_version"] = parts.meta["format_version"] = "1.99"
    parts.manifest["root"]["data"][0]["layout"] = "utf8view"
    (tmp_path / "n.zarc").write_bytes(pack(parts))
    with pytest.raises(zarchive.VersionError, match="upgrade zarchive"):
        zarchive.read(tmp_path / "n.zarc")


@pytest.mark.parametrize("probe_on", [True, False], ids=["unchecked", "public-constructor"])
def test_string_arrays_are_the_same_with_the_compat_probe_off(tmp_path: Path, probe_on: bool) -> None:
    """A read builds python-storage StringArrays without a check per item where pandas allows it
    (zarchive._compat.pandas, probe "pandas.string_simple_new"); the public constructor gives the same."""
    from zarchive._compat import disable_for_test

    df = pd.DataFrame(
        {
            "nan": pd.array(["a", None, "é"] * 300, dtype=pd.StringDtype("python", na_value=np.nan)),
            "na": pd.array(["a", None, "é"] * 300, dtype=pd.StringDtype("python")),
        }
    )
    zarchive.save(df, tmp_path / "s.zarc", durable=False)
    if probe_on:
        back = zarchive.read(tmp_path / "s.zarc")
    else:
        with disable_for_test("pandas.string_simple_new"):
            back = zarchive.read(tmp_path / "s.zarc")
    pd.testing.assert_frame_equal(back, df, check_exact=True)
    assert back["nan"].array._ndarray.dtype == object  # python storage
    back["na"].array._validate(back["na"].dtype)  # what the public constructor checks holds


# --- pyarrow-backed strings (pyarrow is optional: these run where it is installed) -------------------
def test_pyarrow_strings_adopt_the_columns_buffers(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    for dtype in ("str", pd.StringDtype("pyarrow", na_value=pd.NA)):
        # all distinct (repeated values take the dict layout: test_columns_dict.py)
        s = pd.Series(
            [None if i % 7 == 0 else f"é日本{i}" if i % 3 else "" if i == 1 else f"a{i}" for i in range(1200)],
            dtype=dtype,
        )
        df = pd.DataFrame({"t": s, "sliced": s.iloc[5:1205].reset_index(drop=True)})
        zarchive.save(df, tmp_path / "a.zarc", durable=False)
        with zarchive.open(tmp_path / "a.zarc") as arc:
            assert arc.node("t")["values"]["layout"] == arc.node("sliced")["values"]["layout"] == "utf8"
        back = zarchive.read(tmp_path / "a.zarc")
        pd.testing.assert_frame_equal(back, df, check_exact=True)
        assert type(back["t"].array) is pd.arrays.ArrowStringArray


def test_pyarrow_strings_refuse_bad_bytes(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    s = pd.Series([f"v{i}" for i in range(300)], dtype=pd.StringDtype("pyarrow"))
    zarchive.save({"s": s}, tmp_path / "ok.zarc", durable=False)
    parts = unpack((tmp_path / "ok.zarc").read_bytes())
    (name,) = [n for n in parts.members if n.endswith(".utf8.zst")]
    parts.members[name] = parts.members[name].replace(b"v7", b"\xff7", 1)
    (tmp_path / "bad.zarc").write_bytes(pack(parts))
    with pytest.raises(zarchive.FormatError) as err:
        zarchive.read(tmp_path / "bad.zarc")
    assert err.value.member == name


def test_pyarrow_strings_refuse_a_row_starting_inside_a_character(tmp_path: Path) -> None:
    """The data as a whole is valid UTF-8, but a row boundary splits a character: a FormatError (the
    reader checks the data once and each row's first byte, not each row on its own)."""
    pytest.importorskip("pyarrow")
    s = pd.Series([f"{i}é" for i in range(300)], dtype="str")
    zarchive.save({"s": s}, tmp_path / "ok.zarc", durable=False)
    parts = unpack((tmp_path / "ok.zarc").read_bytes())
    (name,) = [n for n in parts.members if n.endswith(".utf8.zst")]
    rows = "7é8é".encode()
    assert parts.members[name].count(rows) == 1
    parts.members[name] = parts.members[name].replace(rows, "77é88".encode())  # rows "77\xc3", "\xa988"
    (tmp_path / "bad.zarc").write_bytes(pack(parts))
    with pytest.raises(zarchive.FormatError, match="string 8 starts inside a UTF-8 character") as err:
        zarchive.read(tmp_path / "bad.zarc")
    assert err.value.member == name
