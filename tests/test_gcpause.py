"""The collector pause around reads (zarchive.engine.gcpause): left as it was found, and with
keep=True, what the block built goes to the oldest generation without being traversed."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import zarchive
from zarchive.engine.gcpause import KEEP_FROM, gc_paused


@pytest.fixture
def collector() -> Iterator[None]:
    """A collector that is on, with nothing frozen, and left so."""
    was = gc.isenabled()
    assert gc.get_freeze_count() == 0
    gc.enable()
    gc.collect()
    yield
    gc.unfreeze()
    (gc.enable if was else gc.disable)()


def _built() -> list[list[int]]:
    return [[i] for i in range(KEEP_FROM * 2)]


def _generation(obj: object) -> int | None:
    """The generation `obj` is in, looked up with the collector paused (so that looking moves nothing)."""
    gc.disable()
    return next((g for g in range(3) if any(o is obj for o in gc.get_objects(generation=g))), None)


def test_paused_inside_and_restored(collector: None) -> None:
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    with gc_paused(keep=True):
        kept = _built()
    assert not gc.isenabled()  # (a collector the program paused stays paused)
    assert _generation(kept) == 0  # and nothing is moved behind its back
    gc.enable()


def test_keep_moves_what_was_built_to_the_oldest_generation(collector: None) -> None:
    with gc_paused():
        plain = _built()
    with gc_paused(keep=True):
        kept = _built()
    assert _generation(plain) == 2  # (moved there by keep's splice: it was young when the block ended)
    assert _generation(kept) == 2
    assert gc.get_count()[0] < KEEP_FROM  # no young generation left for the next collection to walk
    assert gc.get_freeze_count() == 0


def test_keep_without_it_leaves_objects_young(collector: None) -> None:
    with gc_paused():
        plain = _built()
    gc.disable()  # (before anything allocates: the young collection it owes would move them)
    assert gc.get_count()[0] >= KEEP_FROM
    assert _generation(plain) == 0


def test_keep_leaves_a_programs_frozen_objects_frozen(collector: None) -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    with gc_paused(keep=True):
        kept = _built()
    gc.disable()
    assert gc.get_freeze_count() == frozen
    assert _generation(kept) == 0


def test_keep_does_nothing_when_the_block_fails(collector: None) -> None:
    kept: list[list[int]] = []
    with pytest.raises(ValueError), gc_paused(keep=True):
        kept.extend(_built())
        raise ValueError("stop")
    assert gc.isenabled()
    assert _generation(kept) != 2  # (young, or moved on by one young collection since)


def test_small_blocks_are_left_alone(collector: None) -> None:
    with gc_paused(keep=True):
        few = [[1], [2]]
    gc.disable()
    assert _generation(few) == 0


def test_an_open_archive_keeps_its_manifest_old(collector: None, tmp_path) -> None:
    import torch

    path = tmp_path / "many.zarc"
    zarchive.save({f"t{i}": torch.zeros(2) for i in range(KEEP_FROM)}, path)
    gc.collect()
    with zarchive.open(path) as arc:
        assert _generation(arc.manifest) == 2
        assert gc.get_freeze_count() == 0
        assert torch.equal(arc["t7"], torch.zeros(2))
