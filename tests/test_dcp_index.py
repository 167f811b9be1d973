"""The sharded checkpoint index (zarchive.dcp.index, no torch): any tiling of a tensor into chunks
is accepted and round-trips through JSON; moving or resizing one chunk (a lying offset, an overlap,
a gap, a chunk past the edge) is refused."""

from __future__ import annotations

import itertools
import json
import math
import signal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarchive.dcp.index import Chunk, Index, TensorEntry, parse
from zarchive.errors import FormatError

SHARDS = ["shard-0123456789abcdef-00000.zarc", "shard-0123456789abcdef-00001.zarc"]


@st.composite
def tilings(draw: st.DrawFn) -> tuple[tuple[int, ...], list[tuple[tuple[int, ...], tuple[int, ...]]]]:
    """A shape and a grid of chunks covering it exactly (cuts chosen per dimension)."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=0, max_size=3)))
    cuts = []
    for n in shape:
        inner = sorted(draw(st.sets(st.integers(1, n - 1), max_size=2))) if n > 1 else []
        cuts.append([0, *inner, n])
    chunks = []
    for cell in itertools.product(*[list(itertools.pairwise(c)) for c in cuts]):
        chunks.append((tuple(a for a, _ in cell), tuple(b - a for a, b in cell)))
    return shape, chunks


def index_doc(shape: tuple[int, ...], chunks: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> dict[str, Any]:
    entry = TensorEntry(
        "model.w", ("model", "w"), "float32", shape,
        tuple(Chunk(o, s, SHARDS[i % 2], f"w@{i}") for i, (o, s) in enumerate(chunks)),
    )  # fmt: skip
    index = Index("0123456789abcdef", {name: {"rank": r, "size": 100} for r, name in enumerate(SHARDS)})
    index.entries[entry.fqn] = entry
    return json.loads(json.dumps(index.to_json()))


@settings(max_examples=150, deadline=None)
@given(tilings())
def test_every_tiling_is_accepted_and_round_trips(tiling: Any) -> None:
    shape, chunks = tiling
    doc = index_doc(shape, chunks)
    index = parse(doc)
    assert index.to_json() == doc
    entry = index.entries["model.w"]
    assert isinstance(entry, TensorEntry) and sum(math.prod(c.sizes) for c in entry.chunks) == math.prod(shape)


@settings(max_examples=150, deadline=None)
@given(tilings(), st.data())
def test_a_moved_or_resized_chunk_is_refused(tiling: Any, data: st.DataObject) -> None:
    shape, chunks = tiling
    if not shape:
        return  # a 0-d tensor has nothing to move
    i = data.draw(st.integers(0, len(chunks) - 1))
    dim = data.draw(st.integers(0, len(shape) - 1))
    delta = data.draw(st.sampled_from([-1, 1]))
    field = data.draw(st.sampled_from([2, 3]))  # offsets or sizes
    doc = index_doc(shape, chunks)
    row = doc["tensors"][0]["chunks"][i]
    if row[field][dim] + delta < 0 or (field == 3 and row[3][dim] + delta == 0):
        return
    row[field][dim] += delta
    with pytest.raises(FormatError):
        parse(doc)


def test_zero_dimensional_and_empty_tensors() -> None:
    assert parse(index_doc((), [((), ())]))
    empty = index_doc((0, 3), [])
    assert parse(empty)
    with pytest.raises(FormatError, match="overlap"):
        parse(index_doc((), [((), ()), ((), ())]))


@st.composite
def guillotine(draw: st.DrawFn) -> tuple[tuple[int, ...], list[tuple[tuple[int, ...], tuple[int, ...]]]]:
    """A shape and a tiling that is not a grid: boxes cut in two, again and again, each along any
    dimension at any place."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    boxes = [((0,) * len(shape), shape)]
    for _ in range(draw(st.integers(0, 8))):
        i = draw(st.integers(0, len(boxes) - 1))
        offsets, sizes = boxes[i]
        dim = draw(st.integers(0, len(shape) - 1))
        if sizes[dim] < 2:
            continue
        cut = draw(st.integers(1, sizes[dim] - 1))
        low = sizes[:dim] + (cut,) + sizes[dim + 1 :]
        high = offsets[:dim] + (offsets[dim] + cut,) + offsets[dim + 1 :]
        boxes[i] = (offsets, low)
        boxes.append((high, sizes[:dim] + (sizes[dim] - cut,) + sizes[dim + 1 :]))
    return shape, boxes


@settings(max_examples=150, deadline=None)
@given(guillotine())
def test_tilings_that_are_not_grids_are_accepted(tiling: Any) -> None:
    assert parse(index_doc(*tiling))


@st.composite
def any_boxes(draw: st.DrawFn) -> tuple[tuple[int, ...], list[tuple[tuple[int, ...], tuple[int, ...]]]]:
    """A small shape and any chunks inside it (most do not tile it)."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    boxes = []
    for _ in range(draw(st.integers(1, 6))):
        offsets = tuple(draw(st.integers(0, n - 1)) for n in shape)
        sizes = tuple(draw(st.integers(1, n - o)) for o, n in zip(offsets, shape, strict=True))
        boxes.append((offsets, sizes))
    return shape, boxes


@settings(max_examples=400, deadline=None)
@given(st.one_of(any_boxes(), guillotine(), tilings()))
def test_accepted_exactly_when_every_element_is_in_one_chunk(tiling: Any) -> None:
    """The linear check agrees with counting, element by element, the chunks that hold it."""
    shape, boxes = tiling
    count: dict[tuple[int, ...], int] = {}
    for offsets, sizes in boxes:
        for cell in itertools.product(*[range(o, o + s) for o, s in zip(offsets, sizes, strict=True)]):
            count[cell] = count.get(cell, 0) + 1
    tiles = len(count) == math.prod(shape) and set(count.values()) <= {1}
    if tiles:
        assert parse(index_doc(shape, boxes))
    else:
        with pytest.raises(FormatError, match="overlap|cover"):
            parse(index_doc(shape, boxes))


def test_many_chunks_parse_in_linear_time() -> None:
    """40,000 chunks in one row (each compared with every other, this took 20 minutes) parse in
    seconds; with an overlap and a gap of the same size they are refused as fast."""
    n = 40_000
    chunks = [((0, i), (1, 1)) for i in range(n)]
    chunks[10], chunks[12] = ((0, 10), (1, 2)), ((0, 13), (1, 0))  # 11 twice, 12 in none
    bad = index_doc((1, n), chunks)
    good = json.loads(json.dumps(bad))
    good["tensors"][0]["chunks"][10][3], good["tensors"][0]["chunks"][12][2:] = [1, 1], [[0, 12], [1, 1]]

    def too_slow(*_: Any) -> None:
        raise TimeoutError("the index took over 60 s to check")

    old = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(60)
    try:
        assert parse(good)
        with pytest.raises(FormatError, match="overlap"):
            parse(bad)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_one_stored_chunk_is_one_region() -> None:
    doc = index_doc((2, 3), [((0, 0), (1, 3)), ((1, 0), (1, 3))])
    doc["tensors"][0]["chunks"][1][:2] = doc["tensors"][0]["chunks"][0][:2]
    with pytest.raises(FormatError, match=r"is used twice \(first at tensors/0/chunks/0\)") as info:
        parse(doc)
    assert info.value.path == "tensors/0/chunks/1" or "tensors/0/chunks/1" in str(info.value)


def test_paths_inside_each_other_in_any_order() -> None:
    for order in ([("a",), ("a", "b")], [("a", "b"), ("a",)]):
        doc = index_doc((1,), [((0,), (1,))])
        base = doc["tensors"][0]
        doc["tensors"] = [
            {**base, "fqn": ".".join(p), "path": list(p), "chunks": [[i % 2, f"k{i}", [0], [1]]]}
            for i, p in enumerate(order)
        ]
        with pytest.raises(FormatError, match="would contain"):
            parse(doc)
