"""A member read whole is held in pieces, so each value read owns its memory (container.pieces)."""

from __future__ import annotations

import ctypes
import gc
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.container.pieces import ALONE_FROM, RUN_BYTES, Pieces, cuts

MB = 1_000_000


@st.composite
def _member(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]]]:
    """A member size and disjoint entries in it, some big, some small, with gaps."""
    sizes = draw(
        st.lists(
            st.one_of(st.integers(1, 4096), st.integers(ALONE_FROM - 2, ALONE_FROM + 2), st.integers(1, 3 * RUN_BYTES)),
            max_size=40,
        )
    )
    entries, at = [], draw(st.integers(0, 100))
    for n in sizes:
        entries.append((at, n))
        at += n + draw(st.sampled_from([0, 0, 0, 7, 5000]))
    return at + draw(st.integers(0, 100)), entries


@given(_member())
@settings(max_examples=300, deadline=None)
def test_cuts_keep_every_entry_whole_and_big_ones_alone(member: tuple[int, list[tuple[int, int]]]) -> None:
    size, entries = member
    at = cuts(size, entries)
    assert at[0] == 0 and at[-1] == size and all(a < b for a, b in itertools.pairwise(at))
    spans = list(itertools.pairwise(at))
    for offset, n in entries:
        inside = [(a, b) for a, b in spans if a <= offset and offset + n <= b]
        assert len(inside) == 1, f"entry {offset}+{n} is cut"
        if n >= ALONE_FROM:
            assert inside[0] == (offset, offset + n)
    # small entries share runs of at most RUN_BYTES, unless one gap alone is longer
    for a, b in spans:
        if b - a > RUN_BYTES and (a, b - a) not in entries:
            inner = [(o, n) for o, n in entries if a <= o < b]
            assert len(inner) <= 1 or all(n < ALONE_FROM for _, n in inner)


def test_cuts_ignore_entries_that_overlap_or_leave_the_member() -> None:
    assert cuts(10, [(0, 20)]) == [0, 10]
    assert cuts(ALONE_FROM * 3, [(0, ALONE_FROM), (5, ALONE_FROM)]) == [0, ALONE_FROM, ALONE_FROM * 3]
    assert cuts(0, []) == [0]


@given(_member(), st.data())
@settings(max_examples=100, deadline=None)
def test_pieces_slice_like_one_buffer(member: tuple[int, list[tuple[int, int]]], data: st.DataObject) -> None:
    size, entries = member
    pieces = Pieces(cuts(size, entries))
    ref = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    at = 0
    for view in pieces.views(0, size):
        view[:] = ref[at : at + view.nbytes].tobytes()
        at += view.nbytes
    assert at == size
    begin = data.draw(st.integers(0, size))
    end = data.draw(st.integers(begin, size))
    assert bytes(pieces[begin:end]) == ref[begin:end].tobytes()
    for offset, n in entries:  # every value is a view of one piece (no copy)
        view = pieces[offset : offset + n]
        view[:1] = b"\xff"
        assert pieces[offset : offset + 1] == b"\xff"


def _settle() -> None:
    """Collect, then hand the C library's free memory back to the system (glibc's malloc_trim), so that
    RssAnon counts what is alive: in a long pytest run, memory that earlier tests freed would
    otherwise be reused by the read without RssAnon growing."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # (not glibc)
        pass


def _rss() -> int:
    """Anonymous memory resident (RssAnon): not file pages, which this VM's DAMON pages out at any
    time (a test measuring all of RSS failed when 73 MB of a long pytest run's files left meanwhile)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.parametrize("compress_weights", [False, True], ids=["plain", "compressed"])
def test_a_tensor_kept_from_a_full_read_keeps_only_its_own_memory(tmp_path: Path, compress_weights: bool) -> None:
    """Before, every tensor of a state dict was a slice of one buffer for the whole member: keeping
    one layer-norm weight kept all 200 MB."""
    g = torch.Generator().manual_seed(0)
    state = {f"layer{i}.weight": torch.randn(10_000_000, generator=g) * 0.02 for i in range(5)}
    state["norm.weight"] = torch.ones(768)
    path = tmp_path / "sd.zarc"
    zarchive.save(state, path, compress_weights=compress_weights)
    del state
    _settle()
    before = _rss()
    read = zarchive.read(path)
    assert _rss() - before > 100 * MB  # (the measure can tell: 200 MB were read)
    kept = read["norm.weight"]
    del read
    _settle()
    assert _rss() - before < 20 * MB
    assert torch.equal(kept, torch.ones(768))


def test_entry_ranges_read_both_table_forms_and_skip_junk() -> None:
    from zarchive.container.metadata_table import EntryTables

    members = {
        "rows": {"size": 100, "entries": [["a", 0, 10, "00000000"], ["b", 10, 90, "00000000"], ["c", "x", 1, ""], 7]},
        "objects": {"size": 100, "entries": {"a": {"offset": 5, "size": 5, "crc32": "00000000"}, "b": None}},
        "none": {"size": 100},
        "odd": {"size": 100, "entries": "text"},
    }
    tables = EntryTables(members)
    assert tables.ranges("rows") == [(0, 10), (10, 90)]
    assert tables.ranges("objects") == [(5, 5)]
    assert tables.ranges("none") == [] and tables.ranges("odd") == []


def test_compressed_members_are_cut_per_tensor_and_an_npy_member_stays_whole(tmp_path: Path) -> None:
    """A safetensors member of compressed weights decodes into one piece per big tensor; an .npy
    member (read whole by its handler: a copy if it were cut) into one piece, its header included."""
    from zarchive.container.archive_reader import ArchiveReader
    from zarchive.container.source import open_local

    g = torch.Generator().manual_seed(1)
    state = {f"w{i}": torch.randn(600_000, generator=g) * 0.02 for i in range(3)}
    array = (np.random.default_rng(0).standard_normal(1_500_000) * 0.02).astype(np.float32)
    path = tmp_path / "c.zarc"
    zarchive.save({"state": state, "array": array}, path, compress_weights=True)
    reader = ArchiveReader(open_local(path))
    try:
        chunked = {n: e for n, e in reader.metadata["members"].items() if e.get("codec") == "bgzstd"}
        counts = {n: len(reader.chunked(n).read_pieces().buffers) for n in chunked}
    finally:
        reader.close()
    assert sorted(counts.values()) == [1, 3], counts
    read = zarchive.read(path)
    assert np.array_equal(read["array"], array)
    assert all(torch.equal(read["state"][k], v) for k, v in state.items())
