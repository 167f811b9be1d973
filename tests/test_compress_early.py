"""Members compressed while a save's walk goes on (zarchive/container/compress_early.py).

The file must not depend on which path compressed a member: a synchronous save (early compression
on) and save_async (off: it copies members after the walk) write the same members byte for byte. The
codec each member gets is the trial's; what is taken early is bounded; a walk that fails leaves the
file that was there; one usable core takes nothing early (the walk has it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import zarchive
from zarchive.container.compress_early import EarlyCompression
from zarchive.container.member_plan import MemberPlan

ROWS = 20_000


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    names = np.char.add("user_", rng.integers(0, 2000, ROWS).astype("U6"))
    return pd.DataFrame(
        {
            "name": pd.array(names, dtype=pd.StringDtype("python", na_value=np.nan)),  # a dictionary, built last
            "id": np.arange(ROWS, dtype=np.int64) * 3,  # compresses
            "score": rng.normal(size=ROWS),  # floats: kept as they are
            "tag": pd.Series([f"t{i % 7}" for i in range(ROWS)], dtype=object),
            "noise": rng.integers(0, 2**63 - 1, ROWS),  # the trial says no
            "flag": rng.random(ROWS) < 0.2,
        }
    )


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist() if n != "metadata.json"}


def test_early_and_late_compression_write_the_same_members(tmp_path: Path) -> None:
    obj = {"table": _frame(), "log": [f"line {i}" for i in range(3000)], "blob": bytes(range(256)) * 400}
    zarchive.save(obj, tmp_path / "sync.zarc")
    zarchive.ZArchive().save_async(obj, tmp_path / "async.zarc").result()
    early, late = _members(tmp_path / "sync.zarc"), _members(tmp_path / "async.zarc")
    assert list(early) == list(late)
    assert early == late
    names = set(early)
    assert "table/id.npy.bgz" in names and "table/score.npy" in names and "table/noise.npy" in names
    assert "table/flag.npy.zst" in names  # (bools, tried and compressed early)
    meta = json.loads(zipfile.ZipFile(tmp_path / "sync.zarc").read("metadata.json"))
    assert meta["members"]["table/id.npy.bgz"]["codec"] == "bgzstd"
    back = zarchive.read(tmp_path / "sync.zarc")
    pd.testing.assert_frame_equal(back["table"], obj["table"], check_exact=True)
    assert back["log"] == obj["log"] and back["blob"] == obj["blob"]


def test_python_text_columns_are_saved_last_and_the_manifest_keeps_the_order(tmp_path: Path) -> None:
    df = _frame()
    zarchive.save({"df": df}, tmp_path / "f.zarc")
    with zipfile.ZipFile(tmp_path / "f.zarc") as z:
        names = z.namelist()
        manifest = json.loads(z.read("manifest.json"))
    first = {c: min(i for i, m in enumerate(names) if m.startswith(f"df/{c}")) for c in df.columns}
    assert max(first[c] for c in ("id", "score", "noise", "flag")) < min(first["name"], first["tag"]), names
    assert manifest["root"]["df"]["column_keys"] == list(df.columns)


def _plan(name: str, data: bytes, compress: str = "try") -> MemberPlan:
    return MemberPlan(base_name=name, parts=lambda: [(None, memoryview(data))], compress=compress)  # type: ignore[arg-type]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one usable core: nothing is taken early")
def test_offers_are_tried_compressed_and_bounded() -> None:
    repetitive = b"abcd" * 50_000
    random_bytes = np.random.default_rng(0).integers(0, 256, 200_000, dtype=np.uint8).tobytes()
    early = EarlyCompression(3, limit=650_000)
    plans = [
        _plan("a.npy", repetitive),
        _plan("b.npy", random_bytes),
        _plan("c.npy", repetitive, "always"),
        _plan("d.npy", repetitive),  # over the limit: the usual path
        _plan("e.npy", repetitive, "never"),
        _plan("f.jsonl", repetitive, "always"),  # JSON: tallied as written, never early
    ]
    for p in plans:
        early.offer(p)
    early.walk_done()  # (what is still waiting gets every core)
    a, b, c, d, e, f = plans
    assert a.early is not None and b.early is not None and c.early is not None
    assert d.early is None and e.early is None and f.early is None
    frame_a, frame_c = a.early.result(timeout=60), c.early.result(timeout=60)
    assert b.early.result(timeout=60) is None  # zstd does not pay on random bytes
    assert frame_a is not None and frame_c is not None
    import zstandard

    assert zstandard.ZstdDecompressor().decompress(b"".join(frame_a.chunks)) == repetitive
    assert frame_a.size == a.size == len(repetitive) and frame_a.stored_size < len(repetitive) // 10


def test_a_walk_that_fails_leaves_the_file_that_was_there(tmp_path: Path) -> None:
    path = tmp_path / "t.zarc"
    zarchive.save({"x": 1}, path)
    before = path.read_bytes()
    bad = _frame()
    bad["z"] = pd.array([object()] * ROWS, dtype=object)  # saved last (an object column): cannot be saved
    with pytest.raises(zarchive.SaveError):
        zarchive.save({"df": bad}, path)
    assert path.read_bytes() == before
    assert zarchive.read(path) == {"x": 1}


def test_one_usable_core_takes_nothing_early(tmp_path: Path) -> None:
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))});"
        "from zarchive.container.compress_early import EarlyCompression;"
        "from zarchive.container.member_plan import MemberPlan;"
        "p = MemberPlan(base_name='a.npy', parts=lambda: [(None, memoryview(b'ab' * 100000))]);"
        "EarlyCompression(3).offer(p); print(p.early is None)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "True"
