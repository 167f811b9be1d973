"""The ZANJ reader charges what it builds from file data to the read's budget before building it: a
DataFrame (or polars frame) at rows x columns, inline array data only as the shape the plan counted.

A 27.5 KB `.zanj` of 12,000 empty rows and 12,000 column names used to become a 12,000 x 12,000 frame
(3.4 GB, 24 s); hostile files are read in children forked by tests/hostile/worker.py under an
address-space limit a little above what the process has."""

from __future__ import annotations

import importlib.util
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hostile.worker import Worker
from zanj import ZANJ

import zarchive
from zarchive.errors import FormatError, UnsafeArchiveError
from zarchive.formats.zanj.handlers import table_nbytes


def zanj_file(path: Path, root: Any, members: dict[str, str] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in (members or {}).items():
            z.writestr(name, text)
        z.writestr("__zanj__.json", json.dumps(root))
        z.writestr("__zanj_meta__.json", "{}")
    return path


def empty_frame(path: Path, rows: int, columns: int, *, ref: bool, fmt: str = "pandas.DataFrame") -> Path:
    """A frame of `rows` empty rows (every cell missing) and `columns` column names."""
    node: dict[str, Any] = {"__muutils_format__": fmt, "columns": [f"c{i}" for i in range(columns)]}
    if ref:
        node["$ref"] = "df.jsonl"
        return zanj_file(path, {"df": node}, {"df.jsonl": "{}\n" * rows})
    node["data"] = [{}] * rows
    return zanj_file(path, {"df": node})


@pytest.mark.parametrize("ref", [False, True], ids=["inline", "jsonl"])
def test_an_empty_rows_x_columns_frame_is_refused_before_it_is_built(tmp_path: Path, ref: bool) -> None:
    path = empty_frame(tmp_path / "f.zanj", 8000, 8000, ref=ref)  # 64 M cells from a file of ~20 KB
    assert path.stat().st_size < 40_000
    reply = Worker.get().call(op="read", path=str(path), mem_mb=600, timeout=120, verify=False)
    assert reply.get("exc") == "UnsafeArchiveError" and reply["zarchive_error"], reply
    assert "8,000 rows x 8,000 columns" in reply["msg"] and "max_read_bytes" in reply["msg"], reply
    assert "/df" in reply["msg"] and (not ref or "df.jsonl" in reply["msg"]), reply
    assert reply["peak_mb"] < 100, reply


@pytest.mark.parametrize("ref", [False, True], ids=["inline", "jsonl"])
def test_a_frame_is_charged_at_its_size(tmp_path: Path, ref: bool) -> None:
    path = empty_frame(tmp_path / "f.zanj", 300, 300, ref=ref)
    cost = table_nbytes(300, 300)
    arc = zarchive.ZArchive(max_read_bytes=cost).open(path)  # its JSON fits; the JSON and the frame do not
    with arc, pytest.raises(UnsafeArchiveError, match="300 rows x 300 columns") as e:
        arc.load()
    assert e.value.path == "df" and e.value.member == ("df.jsonl" if ref else None)
    with zarchive.ZArchive(max_read_bytes=cost + (2 << 20)).open(path) as arc:
        frame = arc.load()["df"]
    assert frame.shape == (300, 300) and frame.isna().all().all()


def test_real_zanj_frames_read_within_their_budget(tmp_path: Path) -> None:
    """ZANJ writes every cell of a row (`{"x": 0, ...}`): the JSON, charged when parsed, costs more
    than the table built from it, so the table's charge refuses no file its JSON does not."""
    df = pd.DataFrame({"x": np.arange(2000), "y": [f"s{i}" for i in range(2000)], "z": np.linspace(0, 1, 2000)})
    path = tmp_path / "real.zanj"
    ZANJ(external_list_threshold=10).save({"df": df, "small": df.head(3)}, str(path))
    got = zarchive.read(path)
    pd.testing.assert_frame_equal(got["df"], df, check_dtype=False)
    pd.testing.assert_frame_equal(got["small"], df.head(3), check_dtype=False)


@pytest.mark.skipif(importlib.util.find_spec("polars") is None, reason="polars is not installed")
def test_a_polars_frame_is_charged_too(tmp_path: Path) -> None:
    path = empty_frame(tmp_path / "p.zanj", 300, 300, ref=True, fmt="polars.DataFrame:external")
    arc = zarchive.ZArchive(max_read_bytes=table_nbytes(300, 300)).open(path)
    with arc, pytest.raises(UnsafeArchiveError, match="300 rows x 300 columns"):
        arc.load()


def array_node(dtype: str, shape: list[int], data: Any) -> dict[str, Any]:
    return {"__muutils_format__": "numpy.ndarray:array_list_meta", "dtype": dtype, "shape": shape, "data": data}


def test_inline_array_data_longer_than_its_shape_is_refused_before_numpy_allocates(tmp_path: Path) -> None:
    """shape [1] of a 400 KB string dtype plans 400 KB; 20,000 items would make numpy allocate 8 GB."""
    path = zanj_file(tmp_path / "a.zanj", {"a": array_node("<U100000", [1], [0] * 20_000)})
    reply = Worker.get().call(op="read", path=str(path), mem_mb=300, timeout=60, verify=False)
    assert reply.get("exc") == "FormatError" and "does not nest" in reply["msg"], reply


@pytest.mark.parametrize(
    "shape, data",
    [([2, 2], [[1, 2], [3]]), ([2, 2], [[1, 2], [3, [4]]]), ([2], [[1], [2]]), ([], [1]), ([3], "abc"), ([1, 1], [{}])],
    ids=["ragged", "deeper", "deeper-last", "scalar-list", "string", "dict"],
)
def test_inline_array_data_must_nest_as_its_shape(tmp_path: Path, shape: list[int], data: Any) -> None:
    path = zanj_file(tmp_path / "a.zanj", {"a": array_node("<i8", shape, data)})
    with pytest.raises(FormatError, match="nest"):
        zarchive.read(path)


def test_inline_arrays_still_read(tmp_path: Path) -> None:
    path = zanj_file(
        tmp_path / "a.zanj",
        {
            "m": array_node("<i8", [2, 3], [[1, 2, 3], [4, 5, 6]]),
            "z": {"__muutils_format__": "numpy.ndarray:zero_dim", "dtype": "float32", "shape": [], "data": 1.5},
            "e": array_node("<f8", [0, 4], []),
        },
    )
    got = zarchive.read(path)
    assert got["m"].tolist() == [[1, 2, 3], [4, 5, 6]] and got["z"] == np.float32(1.5) and got["e"].shape == (0, 4)


def test_a_jsonl_member_parses_within_the_estimate_it_was_charged() -> None:
    """A `.jsonl` member is charged at the budget's JSON estimate before it is parsed; splitting it
    into one string per line first (the old parse) took 1.8 times that for lines of a few bytes."""
    import tracemalloc

    from zarchive.container.budget import json_memory_estimate
    from zarchive.formats.zanj.nodes import parse_jsonl

    data = memoryview(b"10\n" * 1_000_000)
    tracemalloc.start()
    try:
        values = parse_jsonl(data, "x.jsonl")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(values) == 1_000_000 and values[-1] == 10
    assert peak <= json_memory_estimate(data), (peak, json_memory_estimate(data))


def test_zanj_json_declaring_more_than_the_budget_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    """400 MiB of JSON whitespace deflated to 400 KB: its parse is estimated piece by piece and
    refused before the member is inflated whole (the old reader inflated it, then charged it)."""
    import zlib

    from hostile.craft import ZEntry, build_zip

    mib = 1 << 20
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(b" " * mib) + c.flush(zlib.Z_FULL_FLUSH)
    body = block * 400 + c.compress(b"{}") + c.flush()
    crc = 0
    for _ in range(400):
        crc = zlib.crc32(b" " * mib, crc)
    crc = zlib.crc32(b"{}", crc)
    main = ZEntry("__zanj__.json", body, method=8, crc=crc, cd_usize=400 * mib + 2)
    path = tmp_path / "j.zanj"
    path.write_bytes(build_zip([main, ZEntry("__zanj_meta__.json", b"{}")]))
    reply = Worker.get().call(op="read", path=str(path), mem_mb=300, timeout=120, verify=False)
    assert reply.get("exc") == "UnsafeArchiveError" and "parsing this JSON" in reply["msg"], reply
    assert "__zanj__.json" in reply["msg"] and reply["peak_mb"] < 60, reply


def test_a_dtype_cast_is_charged(tmp_path: Path) -> None:
    """1 M float16 values (2 MB) cast to float64 make 8 MB more: refused under a 6 MB budget that
    reads them as stored."""
    import torch

    path = tmp_path / "t.zanj"
    ZANJ().save({"t": torch.arange(1 << 20, dtype=torch.float16)}, str(path))
    with zarchive.ZArchive(max_read_bytes=6 << 20).open(path) as arc:
        assert arc.load()["t"].dtype == torch.float16
    arc = zarchive.ZArchive(max_read_bytes=6 << 20).open(path)
    with arc, pytest.raises(UnsafeArchiveError, match="casting the tensor to torch.float64") as e:
        arc.load(dtype=torch.float64)
    assert e.value.path == "t"


def test_a_zip_member_with_an_empty_name_is_a_zarchive_error(tmp_path: Path) -> None:
    """zipfile's ZipInfo.is_dir() raises IndexError on an empty name (found by the verify fuzzer)."""
    path = tmp_path / "empty-name.zanj"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("__zanj__.json", '{"__format__": "ZANJ", "root": 1}')
        z.writestr("__zanj_meta__.json", "{}")
        z.writestr(zipfile.ZipInfo(""), b"x")
    for call in (zarchive.read, zarchive.open, zarchive.verify):
        with pytest.raises(zarchive.ZArchiveError):
            call(path)
