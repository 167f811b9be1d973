"""The sharded checkpoint index (zarchive.dcp.index, no torch): any tiling of a tensor into chunks
is accepted and round-trips through JSON; moving or resizing one chunk (a lying offset, an overlap,
a gap, a chunk past the edge) is refused."""

from __future__ import annotations

import itertools
import json
import math
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
