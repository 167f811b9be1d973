"""One memory budget per read, per open file and per command (issue: bounded reads).

The JSON a reader parses is charged at an upper estimate of the objects parsing builds, before it is
parsed; what a read plans is checked against what is left; `extract` and `convert` check what they
would write before writing it. The defaults (1 GiB + 16 x the file's size) let every file a default
save writes be read, and refuse small files that ask for much more.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import forkrun
import numpy as np
import pytest
import torch
from hostile.cases_bounded import manifest_around
from hostile.make_corpus import with_root
from hypothesis import given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.container.budget import DEFAULT_READ_BYTES_PER_FILE_BYTE, default_read_budget, json_memory_estimate
from zarchive.container.jsontext import loads_strict

ROOT = Path(__file__).resolve().parent.parent


def _parse_peak(text: bytes) -> int:
    """Peak bytes traced while loads_strict parses `text` (the result kept alive until measured)."""
    tracemalloc.start()
    try:
        value = loads_strict(memoryview(text), member="m")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del value
    return peak


@pytest.mark.parametrize(
    "item", ["[]", "{}", "0", '""', "[0]", '{"a":0}', "1.5", "[[]]", '"ab"', "true", '[[[{"k":[]}]]]', "-1e300"]
)
def test_the_estimate_bounds_what_parsing_builds(item: str) -> None:
    text = ("[" + ",".join([item] * (2_000_000 // (len(item) + 1))) + "]").encode()
    assert _parse_peak(text) <= json_memory_estimate(text)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=8) | st.dictionaries(st.text(max_size=8), inner, max_size=8),
    max_leaves=200,
)


@settings(max_examples=60, deadline=None)
@given(value=json_values, repeat=st.integers(1, 2000))
def test_the_estimate_bounds_parsing_of_any_json(value: Any, repeat: int) -> None:
    text = json.dumps([value] * repeat, ensure_ascii=False, separators=(",", ":")).encode()
    assert _parse_peak(text) <= json_memory_estimate(text) + 65536  # (+ the parser's fixed overhead)


def _tiny_nodes_archive(path: Path, n: int) -> int:
    """An archive whose manifest root is a list of `n` empty lists; its manifest's size."""
    manifest = manifest_around("[" + ",".join(["[]"] * n) + "]")
    path.write_bytes(with_root(None, manifest_bytes=manifest))
    return len(manifest)


def test_a_manifest_of_tiny_nodes_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """48 MB of `[],` builds 2.5 GB of lists; the default budget of a 48 MB file is 1.8 GB."""
    path = tmp_path / "tiny.zarc"
    size = _tiny_nodes_archive(path, 16_000_000)
    assert size > 48_000_000 and default_read_budget(path.stat().st_size) < 2 << 30
    tracemalloc.start()
    try:
        for lazy in (True, False):
            with pytest.raises(zarchive.UnsafeArchiveError, match="parsing this JSON allocates up to") as e:
                zarchive.open(path, lazy=lazy)
            assert e.value.member == "manifest.json" and "max_read_bytes" in str(e.value)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * size  # the file's bytes (read in, and counted in one copy), never the objects
    got = forkrun.cli("ls", path, cwd=ROOT)
    assert got.returncode == 2 and "max_read_bytes" in got.stderr, got.stderr


def test_a_bigger_budget_reads_what_the_default_refuses(tmp_path: Path) -> None:
    path = tmp_path / "tiny.zarc"
    _tiny_nodes_archive(path, 200_000)
    with pytest.raises(zarchive.UnsafeArchiveError, match="max_read_bytes=10,000,000"):
        zarchive.read(path, max_read_bytes=10_000_000)
    assert zarchive.read(path, max_read_bytes=200_000_000) == [[]] * 200_000


def test_jsonl_members_are_charged_before_they_are_parsed(tmp_path: Path) -> None:
    path = tmp_path / "l.zarc"
    zarchive.save({"rows": [{"a": i} for i in range(50_000)]}, path)  # a .jsonl member, compressed
    with zarchive.open(path, max_read_bytes=3_000_000) as arc:  # the manifest and metadata fit
        with pytest.raises(zarchive.UnsafeArchiveError, match="parsing this JSON") as e:
            arc["rows"]
        assert e.value.member is not None and ".jsonl" in e.value.member
    assert zarchive.read(path)["rows"][-1] == {"a": 49_999}


def test_a_default_save_is_read_by_a_default_read_and_json_counts_in_the_writer(tmp_path: Path) -> None:
    """The writer charges the same estimate: a save whose JSON would not fit a default read of the
    file it writes is refused; a big but ordinary one is written and read."""
    ok = {"index": {f"key{i}": i for i in range(200_000)}, "names": [f"n{i}" for i in range(100_000)]}
    zarchive.save(ok, tmp_path / "ok.zarc")
    assert zarchive.read(tmp_path / "ok.zarc") == ok


def _zeros_archive(path: Path) -> None:
    zarchive.save({"z": np.zeros(8 << 20, dtype=np.int64)}, path)  # 64 MiB of zeros, compressed to KBs


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return forkrun.cli(*argv, cwd=ROOT)  # a process of its own, forked from a server that imported torch


def test_extract_is_refused_past_its_budget_before_writing_anything(tmp_path: Path) -> None:
    path = tmp_path / "z.zarc"
    _zeros_archive(path)
    out = tmp_path / "out"
    got = _cli("extract", "--max-bytes", "10000000", str(path), str(out))
    assert got.returncode == 2 and "over --max-bytes=10,000,000" in got.stderr, got.stderr
    assert not out.exists() or not any(out.iterdir())
    got = _cli("extract", str(path), str(out))  # the default: 1 GiB + 16 x the file
    assert got.returncode == 0, got.stderr
    assert sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) > 64 << 20


def test_extract_holds_one_decoded_member_at_a_time(tmp_path: Path) -> None:
    """Every member is decoded, written and dropped: the peak is one member, not all of them."""
    path = tmp_path / "m.zarc"
    zarchive.save({f"z{i}": np.zeros(4 << 20, dtype=np.int64) for i in range(6)}, path)  # 6 x 32 MiB
    code = (
        "import resource, sys\n"
        "from zarchive import cli\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "assert cli.main(['extract', sys.argv[1], sys.argv[2]]) == 0\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n"
    )
    got = subprocess.run(
        [sys.executable, "-c", code, str(path), str(tmp_path / "o")],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    grew_mb = int(got.stdout.split()[-1])
    assert grew_mb < 120, grew_mb  # one 32 MiB member (and its compressed bytes), never 192 MiB


def _stride0_archive(path: Path) -> None:
    base = torch.arange(16, dtype=torch.float32)  # 64 bytes
    view = base.as_strided((50_000, 16), (0, 1))  # 3.2 MB when written whole
    zarchive.save({"base": base, "view": view}, path)


def test_convert_checks_the_bytes_it_would_write_before_copying(tmp_path: Path) -> None:
    path = tmp_path / "s.zarc"
    _stride0_archive(path)
    with zarchive.open(path) as arc:  # the archive itself holds the 64 bytes once
        assert arc["view"].stride() == (0, 1)
    from zarchive.formats.convert_in import convert

    with pytest.raises(zarchive.UnsafeArchiveError, match="max_bytes=1,000,000"):
        convert(path, tmp_path / "s.safetensors", max_bytes=1_000_000)
    assert not (tmp_path / "s.safetensors").exists()
    got = _cli("convert", "--max-bytes", "1000000", str(path), str(tmp_path / "s.safetensors"))
    assert got.returncode == 2 and "max_bytes=1,000,000" in got.stderr, got.stderr
    convert(path, tmp_path / "s.safetensors")  # the default budget of a small file: 1 GiB + 16 x
    from safetensors.torch import load_file

    assert torch.equal(load_file(tmp_path / "s.safetensors")["view"], torch.arange(16.0).expand(50_000, 16))


def test_convert_of_a_small_file_expanding_to_gigabytes_is_refused_by_default(tmp_path: Path) -> None:
    path = tmp_path / "g.zarc"
    base = torch.arange(16, dtype=torch.float32)
    zarchive.save({"base": base, "view": base.as_strided((50_000_000, 16), (0, 1))}, path)  # 3.2 GB whole
    assert path.stat().st_size < 100_000
    got = _cli("convert", str(path), str(tmp_path / "g.safetensors"))
    assert got.returncode == 2 and "over max_bytes" in got.stderr and "the default" in got.stderr, got.stderr


def test_the_default_budget_is_documented_with_its_figure() -> None:
    assert DEFAULT_READ_BYTES_PER_FILE_BYTE == 16
    safety = (ROOT / "docs" / "safety.md").read_text()
    assert "1 GiB plus 16 times the file's size" in safety
    assert "1 GiB plus 16 times" in (ROOT / "spec" / "reading.md").read_text()


def test_zanj_json_is_charged_like_ours(tmp_path: Path) -> None:
    path = tmp_path / "big.zanj"
    main = '{"__format__": "ZANJ", "root": [' + ",".join(["[]"] * 2_000_000) + "]}"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("__zanj__.json", main)
        z.writestr("__zanj_meta__.json", "{}")
    assert path.stat().st_size < 1_000_000  # deflated: 6 MB of JSON in a small file
    with pytest.raises(zarchive.UnsafeArchiveError, match="parsing this JSON") as e:
        zarchive.read(path, max_read_bytes=100_000_000)
    assert e.value.member == "__zanj__.json"
    os.unlink(path)
