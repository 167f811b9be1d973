"""ZipWriter's writes: buffers from DIRECT_WRITE on go to the file descriptor, around the file object's
buffer (one copy fewer); smaller ones through it; the file comes out the same either way."""

from __future__ import annotations

import zipfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarchive.container.zipwriter import ZipWriter


@settings(max_examples=15, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 1, 100, 256 << 10, (256 << 10) + 3, 700_001]), min_size=1, max_size=6))
def test_big_writes_go_straight_to_the_file(sizes: list[int], tmp_path_factory: pytest.TempPathFactory) -> None:
    """Buffers from DIRECT_WRITE on bypass the file object's buffer; small ones go through it, in order."""
    path = tmp_path_factory.mktemp("zw") / "a.zip"
    blobs = [bytes([i + 1]) * n for i, n in enumerate(sizes)]
    with open(path, "w+b", buffering=1 << 20) as f:
        zw = ZipWriter(f)
        for i, blob in enumerate(blobs):
            w = zw.open_entry(f"m{i}", align=64)
            w.write(blob[:50])
            w.write(memoryview(blob)[50:])
            w.write(b"tail")
            w.close()
        end = zw.finish([])
        assert f.tell() == end
    assert path.stat().st_size == end
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        assert [zf.read(f"m{i}") for i in range(len(blobs))] == [b + b"tail" for b in blobs]
