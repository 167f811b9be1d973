"""Text columns in the "utf8" layout read where pyarrow is missing, as after a plain install
(spec/pandas.md 5.2): the rows are split from the text with a separator after each string, its buffer
laid out from the offsets before the data member is read (utf8_column.Gaps). Every value comes back
exactly, with and without pyarrow; bad offsets are refused before the data is read."""

from __future__ import annotations

import io
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hostile.craft import pack, unpack
from hostile.make_corpus import CASES, CORPUS_DIR, Case
from hypothesis import given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.container.utf8_column import Gaps, check_offsets, decode_utf8, encode_utf8

TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12)  # NULs and controls too
ASCII = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x7F), max_size=12)
# (python storage: what "str" and "string" are where pyarrow is not installed; pyarrow storage is
# test_columns.py's)
DTYPES = [object, pd.StringDtype("python", na_value=np.nan), pd.StringDtype("python")]


@contextmanager
def _without_pyarrow(blocked: bool) -> Iterator[None]:
    """`import pyarrow` raises ImportError inside (as where it is not installed) when `blocked`."""
    with pytest.MonkeyPatch.context() as mp:
        if blocked:
            mp.setitem(sys.modules, "pyarrow", None)
        yield


@settings(max_examples=200, deadline=None)
@given(values=st.lists(TEXT | ASCII, max_size=60))
def test_gaps_laid_out_first_give_the_same_strings(values: list[str]) -> None:
    offsets, data = encode_utf8(values)
    for off in (offsets, offsets.astype(np.int32)):
        checked = check_offsets(off, len(data), len(values), member="m")
        gaps = Gaps(checked) if values else None
        assert decode_utf8(checked, data, len(values), member="m", gaps=gaps) == values


def test_gaps_of_other_offsets_are_not_used() -> None:
    """A layout made for another column (another size or count) is made afresh, not trusted."""
    values = ["ab", "", "c"]
    offsets, data = encode_utf8(values)
    other = Gaps(check_offsets(np.array([0, 1, 5]), 5, 2, member="m"))
    assert decode_utf8(offsets, data, 3, member="m", gaps=other) == values


def test_data_holding_a_nul_takes_another_separator() -> None:
    """The buffer holds a NUL at each separator; data holding NUL bytes gets another separator."""
    values = ["a\x00b", "", "\x00", "é\x00"]
    offsets, data = encode_utf8(values)
    checked = check_offsets(offsets, len(data), len(values), member="m")
    gaps = Gaps(checked)
    assert decode_utf8(checked, data, len(values), member="m", gaps=gaps) == values


@pytest.mark.parametrize("dtype", DTYPES, ids=["object", "str", "string"])
@pytest.mark.parametrize("blocked", [True, False], ids=["numpy-only", "pyarrow-if-installed"])
@settings(max_examples=25, deadline=None)
@given(values=st.lists(st.none() | TEXT | ASCII, min_size=0, max_size=300))
def test_text_columns_round_trip_without_pyarrow(dtype: Any, blocked: bool, values: list[str | None]) -> None:
    s = pd.Series(values, dtype=dtype)
    df = pd.DataFrame({"t": s, "n": np.arange(len(s))})
    df.columns = pd.Index(["t", "n"], dtype=object)  # (pandas' default "str" is pyarrow storage here)
    buf = io.BytesIO()
    with _without_pyarrow(blocked):
        zarchive.save(df, buf, external_list_threshold=3)
        back = zarchive.read(buf.getvalue())
    pd.testing.assert_frame_equal(back, df, check_exact=True)
    assert back["t"].dtype == s.dtype


def _utf8_file(values: list[str]) -> Any:
    """The parts of a file holding Series "s" of `values` in the utf8 layout (many distinct values)."""
    buf = io.BytesIO()
    zarchive.save({"s": pd.Series(values, dtype=DTYPES[1])}, buf, durable=False)
    parts = unpack(buf.getvalue())
    assert parts.manifest["root"]["s"]["values"]["layout"] == "utf8"
    return parts


@pytest.mark.parametrize("blocked", [True, False], ids=["numpy-only", "pyarrow-if-installed"])
def test_offsets_past_the_data_are_refused_naming_the_member(blocked: bool) -> None:
    """Offsets that end past the data member's size: a FormatError naming the data member (the
    offsets are checked against the node's `nbytes`, which the plan checked against the member)."""
    parts = _utf8_file([f"row {i}" for i in range(400)])
    node = parts.manifest["root"]["s"]["values"]
    offsets = np.zeros(401, dtype=np.int64)
    offsets[1:] = np.arange(1, 401) * (node["nbytes"] // 400 + 1)  # (ends past the data)
    del parts.members[node["offsets"]["$ref"]]
    buf = io.BytesIO()
    np.save(buf, offsets)
    parts.members["s/bad_offsets.npy"] = buf.getvalue()
    node["offsets"] = {"$type": "numpy.ndarray", "$ref": "s/bad_offsets.npy", "dtype": "<i8", "shape": [401]}
    with _without_pyarrow(blocked), pytest.raises(zarchive.FormatError, match="string offsets run from 0") as err:
        zarchive.read(pack(parts))
    assert err.value.member == node["$ref"]


@pytest.mark.parametrize("blocked", [True, False], ids=["numpy-only", "pyarrow-if-installed"])
def test_a_data_member_of_another_size_is_refused(blocked: bool) -> None:
    parts = _utf8_file([f"row {i}" for i in range(400)])
    node = parts.manifest["root"]["s"]["values"]
    parts.members[node["$ref"]] = parts.members[node["$ref"]] + b"x"
    with _without_pyarrow(blocked), pytest.raises(zarchive.ZArchiveError) as err:
        zarchive.read(pack(parts))
    assert err.value.member == node["$ref"]


TEXT_CASES = [c for c in CASES if c.name.startswith(("utf8_", "dict_")) and c.when == "read"]


@pytest.mark.parametrize("case", TEXT_CASES, ids=lambda c: c.name)
def test_hostile_text_columns_without_pyarrow(case: Case) -> None:
    """The hostile corpus's text columns read where pyarrow is missing: each raises its error (or,
    marked valid, reads), whether the full read lays out the text before its data or not."""
    path = os.path.join(CORPUS_DIR, case.name + ".zarc")
    with _without_pyarrow(True):
        for lazy in (True, False):
            if case.error is None:
                zarchive.read(path, lazy=lazy)
                continue
            with pytest.raises(zarchive.ZArchiveError) as info:
                zarchive.read(path, lazy=lazy)
            assert type(info.value).__name__ in case.error.split("|"), str(info.value)
            assert re.search(case.match, str(info.value)), str(info.value)


def test_gaps_of_other_offsets_of_the_same_sizes_are_not_used() -> None:
    """A layout made from other offsets with the same count and data size (the separators in other
    places) is made afresh too: only the offsets it was laid out from use it."""
    values = ["ab", "c"]
    offsets, data = encode_utf8(values)
    other = Gaps(check_offsets(np.array([0, 1, 3]), 3, 2, member="m"))
    assert decode_utf8(offsets, data, 2, member="m", gaps=other) == values
