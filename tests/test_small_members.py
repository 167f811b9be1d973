"""Format 1.6: uncompressed `.safetensors` members of at most 1 MiB record no checksum entries (spec
section 6). What is written, and what a fetch from such a member reads and checks: the whole member,
once, before any part of it is used."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.container.archive_writer import ENTRIES_FROM
from zarchive.container.zipreader import ZipReader
from zarchive.errors import IntegrityError, UnsafeArchiveError


def _members(path: Path) -> dict[str, dict[str, object]]:
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("metadata.json"))["members"]  # type: ignore[no-any-return]


def _small_and_big() -> dict[str, object]:
    """Two members: 100 small tensors (40 KB) and a tensor of 2.4 MB."""
    return {"small": {f"s{i}": torch.randn(100) for i in range(100)}, "big": torch.randn(600, 1000)}


def _flip(path: Path, member: str, offset: int) -> None:
    with zarchive.open(path) as arc:
        at = ZipReader(arc._reader.source).members[member].data_offset + offset
    data = bytearray(path.read_bytes())
    data[at] ^= 0x20
    path.write_bytes(bytes(data))


def test_small_members_record_no_entries_and_big_ones_do(tmp_path: Path) -> None:
    path = tmp_path / "a.zarc"
    zarchive.save(_small_and_big(), path)
    members = _members(path)
    sizes = {name: info["size"] for name, info in members.items() if name.endswith(".safetensors")}
    assert any(int(s) <= ENTRIES_FROM for s in sizes.values()) and any(int(s) > ENTRIES_FROM for s in sizes.values())
    for name, size in sizes.items():
        assert ("entries" in members[name]) == (int(size) > ENTRIES_FROM), (name, size)
    with zipfile.ZipFile(path) as z:
        assert json.loads(z.read("metadata.json"))["format_version"] == "1.6"


@pytest.mark.parametrize("mmap", [False, True])
def test_a_fetch_from_a_member_without_entries_reads_the_value(tmp_path: Path, mmap: bool) -> None:
    path = tmp_path / "a.zarc"
    values = {f"s{i}": torch.randn(3 + i % 5) for i in range(300)}
    zarchive.save(values, path)
    assert not any("entries" in info for info in _members(path).values())
    with zarchive.ZArchive(mmap=mmap).open(path) as arc:
        for key in ("s0", "s151", "s299", "s7"):
            got = arc[key]
            assert torch.equal(got, values[key])
            got.add_(1.0)  # the load's own bytes: a later fetch of the same key is untouched
            assert torch.equal(arc[key], values[key])


def test_a_fetched_small_tensor_holds_its_own_bytes_only(tmp_path: Path) -> None:
    """The member is read whole to be checked, but the tensor keeps only its own bytes (copied reads)."""
    path = tmp_path / "a.zarc"
    zarchive.save({f"s{i}": torch.randn(100) for i in range(200)}, path)
    with zarchive.open(path) as arc:
        t = arc["s42"]
    assert t.untyped_storage().nbytes() == 400


def test_damage_anywhere_in_a_member_without_entries_fails_every_fetch_from_it(tmp_path: Path) -> None:
    """Without entries, the member's CRC is what a fetch checks: a flipped byte in one tensor fails a
    fetch of another from the same member (with entries, that fetch would pass), naming the member;
    tensors of other members still fetch, and verify names the damaged member."""
    path = tmp_path / "a.zarc"
    values = _small_and_big()
    zarchive.save(values, path)
    with zarchive.open(path) as arc:
        member = arc.node("small/s0")["$ref"]
    assert "entries" not in _members(path)[member]
    _flip(path, member, int(_members(path)[member]["size"]) - 3)  # inside the last tensor's bytes
    with zarchive.open(path) as arc:
        with pytest.raises(IntegrityError, match="do not match their checksum") as info:
            arc["small/s0"]
        assert info.value.member == member
        assert torch.equal(arc["big"], values["big"])
    with pytest.raises(IntegrityError):
        zarchive.read(path)
    assert [m for m, _ in zarchive.verify(path)] == [member]


def test_a_damaged_header_of_a_member_without_entries_fails_a_fetch(tmp_path: Path) -> None:
    path = tmp_path / "a.zarc"
    zarchive.save({"w": torch.randn(64, 64), "b": torch.randn(64)}, path)
    with zarchive.open(path) as arc:
        member = arc.node("w")["$ref"]
    _flip(path, member, 12)  # inside the JSON header
    with zarchive.open(path) as arc, pytest.raises(IntegrityError) as info:
        arc["b"]
    assert info.value.member == member


def test_the_whole_member_read_is_within_the_read_budget(tmp_path: Path) -> None:
    path = tmp_path / "a.zarc"
    zarchive.save({f"s{i}": torch.randn(1000) for i in range(200)}, path)  # one 800 KB member
    with zarchive.ZArchive(max_read_bytes=600_000).open(path) as arc, pytest.raises(UnsafeArchiveError) as info:
        arc["s3"]
    assert "max_read_bytes" in str(info.value) and info.value.member is not None


def test_a_member_is_read_whole_once(tmp_path: Path) -> None:
    """The first fetch from a member without entries reads it whole (and checks it); the next
    fetches from it take their bytes from the bytes checked (one read in all, one request from a
    remote store); fetches from another member read that one."""
    path = tmp_path / "a.zarc"
    zarchive.save({"a": {f"s{i}": torch.randn(500) for i in range(200)}, "b": {"t": torch.randn(10)}}, path)
    sizes = {k: int(v["size"]) for k, v in _members(path).items() if k.endswith(".safetensors")}
    read: list[tuple[str, int]] = []
    with zarchive.open(path) as arc:
        arc._reader.on_read = lambda name, n: read.append((name, n))
        member = arc.node("a/s1")["$ref"]
        arc["a/s1"]
        assert sum(n for _, n in read) == sizes[member]
        read.clear()
        assert torch.equal(arc["a/s2"], zarchive.read(path)["a"]["s2"]) and not sum(n for _, n in read)
        arc["b/t"]
        other = arc.node("b/t")["$ref"]
        assert sum(n for m, n in read if m == other) == sizes[other]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=40), min_size=64, max_size=300),
    st.sampled_from([torch.float32, torch.bfloat16, torch.int64, torch.bool]),
)
def test_every_key_fetches_as_saved(
    tmp_path_factory: pytest.TempPathFactory, lengths: list[int], dtype: torch.dtype
) -> None:
    path = tmp_path_factory.mktemp("p") / "a.zarc"
    values = {f"k{i}": (torch.arange(n) % 3).to(dtype) for i, n in enumerate(lengths)}
    zarchive.save(values, path, compress=False)
    with zarchive.open(path) as arc:
        for key in list(values)[:: max(1, len(values) // 9)]:
            assert torch.equal(arc[key], values[key])
    assert zarchive.verify(path) == []
