"""The opened archive: browsing without loading, loading one value by reading only its bytes, values
that outlive the archive and never write back to the file, and checksum verification."""

from __future__ import annotations

import gc
import hashlib
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import zarchive
from zarchive.container.source import MappedSource
from zarchive.container.zipreader import TAIL_BYTES, ZipReader


class RecordingFile(io.FileIO):
    """A real file that remembers which byte ranges were read from it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, "rb")
        self.ranges: list[tuple[int, int]] = []

    def read(self, size: int = -1) -> bytes:
        start = self.tell()
        data = super().read(size)
        self.ranges.append((start, start + len(data)))
        return data

    def readinto(self, buffer: Any) -> int:
        start = self.tell()
        n = super().readinto(buffer) or 0
        self.ranges.append((start, start + n))
        return n

    def touched(self, begin: int, end: int) -> bool:
        return any(a < end and begin < b for a, b in self.ranges)


def data_ranges(path: Path) -> dict[str, tuple[int, int]]:
    """Member name -> (first, last+1) file offset of its data."""
    source = MappedSource(path)
    try:
        return {m.name: (m.data_offset, m.data_offset + m.size) for m in ZipReader(source).members.values()}
    finally:
        source.close()


def sample(seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    return {
        "config": {"lr": 0.1 * (seed + 1), "tags": ("a", "b")},
        "arr": rng.standard_normal(50_000).astype(np.float32),
        "ints": np.arange(20_000) * (seed + 1),
        "model": {"w": torch.randn(512, 512, generator=g), "b": torch.randn(256, generator=g)},  # (over 1 MiB: entries)
        "counts": {"idx": torch.randint(0, 5, (10_000,), generator=g)},
        "history": list(range(1000 + seed)),
    }


def assert_is_sample(values: dict[str, Any], seed: int) -> None:
    expected = sample(seed)
    assert np.array_equal(values["arr"], expected["arr"]) and np.array_equal(values["ints"], expected["ints"])
    assert torch.equal(values["w"], expected["model"]["w"]) and torch.equal(values["idx"], expected["counts"]["idx"])


def take_values(arc: zarchive.LazyArchive) -> dict[str, Any]:
    return {"arr": arc["arr"], "ints": arc["ints"], "w": arc["model/w"], "idx": arc["counts/idx"]}


# --- browsing ---


def test_open_reads_only_the_directory_manifest_and_metadata(tmp_path: Path) -> None:
    path = tmp_path / "s.zarc"
    zarchive.save(sample(), path)
    ranges = data_ranges(path)
    size = path.stat().st_size
    with RecordingFile(path) as f:
        arc = zarchive.open(f)
        assert arc.keys() == list(sample())
        assert arc.keys("model") == ["w", "b"] and arc.keys("counts") == ["idx"]
        # where a zip reader must look for the end record: the last 8 KiB first, then up to 64 KiB
        tails = {(size - min(size, n), size) for n in (TAIL_BYTES, 22 + 0xFFFF)}
        f.ranges = [r for r in f.ranges if r not in tails]
        for name, (begin, end) in ranges.items():
            if name != "manifest.json" and name != "metadata.json":
                assert not f.touched(begin, end), name
        assert sum(b - a for a, b in f.ranges) < 16 * 1024 < size / 10
        arc.close()


def test_getting_one_tensor_reads_only_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "s.zarc"
    zarchive.save(sample(), path, compress=False)
    ranges = data_ranges(path)
    with zarchive.open(path) as arc:
        entries = arc.entries("model.safetensors")
    begin = ranges["model.safetensors"][0]
    with RecordingFile(path) as f, zarchive.open(f) as arc:
        before = len(f.ranges)
        w = arc["model/w"]
        new = f.ranges[before:]
        assert torch.equal(w, sample()["model"]["w"])
        b_slot = (begin + entries["b"]["offset"], begin + entries["b"]["offset"] + entries["b"]["size"])
        assert not any(a < b_slot[1] and b_slot[0] < b for a, b in new), "read the neighbouring tensor"
        for name in ("arr.npy", "ints.npy.zst", "counts.safetensors.zst"):
            if name in ranges:
                assert not f.touched(*ranges[name]), name
        arr = arc["arr"]
        assert np.array_equal(arr, sample()["arr"])
        assert not f.touched(*ranges[next(n for n in ranges if n.startswith("ints.npy"))])


def test_keys_of_every_kind_of_node(tmp_path: Path) -> None:
    path = tmp_path / "k.zarc"
    obj = {
        "d": {"x": 1, "y": {"z": 2}},
        "l": [10, [20, 30]],
        "t": (1, (2, 3)),
        "ik": {1: "one", (2, "b"): "two", 2**70: "big"},
        "long": list(range(300)),
        "arr": np.arange(1000),
        "leaf": "text",
    }
    zarchive.save(obj, path)
    with zarchive.open(path) as arc:
        assert arc.keys() == list(obj)
        assert arc.keys("d") == ["x", "y"] and arc.keys("d/y") == ["z"]
        assert arc.keys("l") == ["0", "1"] and arc.keys("l/1") == ["0", "1"]
        assert arc.keys("t") == ["0", "1"] and arc.keys("t/1") == ["0", "1"]
        assert arc.keys("ik") == ["1", "2,b", str(2**70)]
        assert arc.keys("arr") == [] and arc.keys("leaf") == [] and arc.keys("long") == []
        assert arc["d/y/z"] == 2 and arc["l/1/1"] == 30 and arc["t/1/0"] == 2
        assert arc["ik/1"] == "one" and arc["ik/2,b"] == "two" and arc[f"ik/{2**70}"] == "big"
        assert arc["long"] == list(range(300))
        assert "d/y" in arc and "d/nope" not in arc
        with pytest.raises(zarchive.MemberNotFoundError) as info:
            arc["d/y/nope"]
        assert info.value.path == "d/y" and "nope" in str(info.value)
        with pytest.raises(KeyError):
            arc["missing"]


def test_loading_after_close_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "c.zarc"
    zarchive.save(sample(), path)
    arc = zarchive.open(path)
    arc.close()
    assert arc.closed
    with pytest.raises(ValueError, match="closed"):
        arc["arr"]
    with pytest.raises(ValueError, match="closed"):
        arc.load()


# --- values outlive the archive and never write back ---


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
def test_values_survive_close_and_replacement_of_the_file(compress: bool, tmp_path: Path) -> None:
    path = tmp_path / "r.zarc"
    zarchive.save(sample(0), path, compress=compress)
    with zarchive.open(path) as arc:
        lazy_values = take_values(arc)
    whole = zarchive.read(path)
    whole_values = {"arr": whole["arr"], "ints": whole["ints"], "w": whole["model"]["w"], "idx": whole["counts"]["idx"]}
    zarchive.save(sample(1), path, compress=compress)  # atomically replaces the file
    gc.collect()
    assert_is_sample(lazy_values, 0)
    assert_is_sample(whole_values, 0)
    with zarchive.open(path) as arc:
        assert_is_sample(take_values(arc), 1)


@pytest.mark.parametrize("lazy", [True, False], ids=["mapped", "in-memory"])
@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
def test_writing_into_loaded_values_changes_neither_the_file_nor_later_loads(
    compress: bool, lazy: bool, tmp_path: Path
) -> None:
    path = tmp_path / "w.zarc"
    zarchive.save(sample(), path, compress=compress)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with zarchive.open(path, lazy=lazy) as arc:
        first = take_values(arc)
        for v in first.values():
            v[:5] = 7  # numpy arrays and tensors alike
        whole = arc.load()
        whole["arr"][:] = 0
        whole["model"]["w"].zero_()
        second = take_values(arc)
        assert_is_sample(second, 0)
        assert arc.verify() == []
        assert not np.shares_memory(first["arr"], second["arr"])
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    with zarchive.open(path) as arc:
        assert_is_sample(take_values(arc), 0)


def test_loaded_values_are_writable(tmp_path: Path) -> None:
    path = tmp_path / "w.zarc"
    zarchive.save(sample(), path, compress=False)
    back = zarchive.read(path)
    assert back["arr"].flags.writeable and back["ints"].flags.writeable
    back["model"]["w"].mul_(2)  # would fail (or warn) on a read-only buffer
    assert torch.equal(back["model"]["w"], sample()["model"]["w"] * 2)


def test_read_without_lazy_reads_into_memory(tmp_path: Path) -> None:
    path = tmp_path / "m.zarc"
    zarchive.save(sample(), path, compress=False)
    back = zarchive.read(path, lazy=False)
    size = path.stat().st_size
    with open(path, "r+b") as f:  # scribble over the file in place (not a replacement)
        f.write(b"\0" * size)
    path.unlink()
    gc.collect()
    assert_is_sample(
        {"arr": back["arr"], "ints": back["ints"], "w": back["model"]["w"], "idx": back["counts"]["idx"]}, 0
    )


# --- verification ---


def flip_byte(path: Path, member: str, offset_in_member: int) -> None:
    start, end = data_ranges(path)[member]
    pos = start + offset_in_member
    assert start <= pos < end
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)
        f.seek(pos)
        f.write(bytes([byte[0] ^ 0x40]))


def test_verify_is_empty_for_a_good_archive(tmp_path: Path) -> None:
    for compress in (False, True):
        path = tmp_path / f"g{compress}.zarc"
        zarchive.save(sample(), path, compress=compress)
        assert zarchive.verify(path) == []
        with zarchive.open(path) as arc:
            assert arc.verify() == []


def test_a_flipped_byte_in_a_tensor_is_found_and_named(tmp_path: Path) -> None:
    path = tmp_path / "f.zarc"
    zarchive.save(sample(), path, compress=False)
    with zarchive.open(path) as arc:
        entry = arc.entries("model.safetensors")["w"]
    flip_byte(path, "model.safetensors", entry["offset"] + 1000)

    problems = zarchive.verify(path)
    assert [m for m, _ in problems] == ["model.safetensors"]
    with zarchive.open(path) as arc:  # opening does not read members, so it still works
        assert [m for m, _ in arc.verify()] == ["model.safetensors"]
        assert torch.equal(arc["model/b"], sample()["model"]["b"])  # per-tensor checksums
        with pytest.raises(zarchive.IntegrityError) as info:
            arc["model/w"]
        assert info.value.member == "model.safetensors" and "model.safetensors" in str(info.value)
        assert info.value.path == "model/w"
    with pytest.raises(zarchive.IntegrityError) as info:
        zarchive.read(path)
    assert info.value.member == "model.safetensors"

    trusted = zarchive.ZArchive(verify=False).read(path)
    w = sample()["model"]["w"]
    diff = (trusted["model"]["w"] != w).nonzero()
    assert diff.tolist() == [[0, 250]]  # byte 1000 is element 250 of the first row
    with zarchive.open(path, verify=False) as arc:
        assert not torch.equal(arc["model/w"], w)


@pytest.mark.parametrize("where", ["header", "data"])
def test_a_full_read_of_a_big_damaged_member_raises_integrity_error(tmp_path: Path, where: str) -> None:
    """Big members are checksummed on worker threads while the objects are built. Damage found that
    way still fails the read with IntegrityError, also when building hit the damage first (a broken
    header), and nothing is returned."""
    from zarchive.container.parallel_verify import SERIAL_BELOW

    path = tmp_path / "big.zarc"
    weights = {f"w{i}": torch.full((SERIAL_BELOW // 16,), float(i)) for i in range(5)}  # 10 MB in all
    zarchive.save({"model": weights}, path, compress=False)
    with zarchive.open(path) as arc:
        entries = arc.entries("model.safetensors")
    offset = 20 if where == "header" else entries["w3"]["offset"] + 4
    flip_byte(path, "model.safetensors", offset)
    with pytest.raises(zarchive.IntegrityError) as info:
        zarchive.read(path)
    assert info.value.member == "model.safetensors"
    if where == "data":
        assert "'w3'" in str(info.value)
        with zarchive.open(path) as arc:  # the failed check is not remembered as passed
            with pytest.raises(zarchive.IntegrityError):
                arc.load()
            assert torch.equal(arc["model/w1"], weights["w1"])


def test_a_flipped_byte_in_an_array_or_a_compressed_member_is_found(tmp_path: Path) -> None:
    path = tmp_path / "f.zarc"
    zarchive.save(sample(), path)
    with zarchive.open(path) as arc:
        zst = next(n for n in arc.members if n.startswith("ints.npy"))
        assert zst.endswith(".bgz")  # integers are byte-grouped (spec 4.1), checked chunk by chunk
    flip_byte(path, "arr.npy", 4000)
    flip_byte(path, zst, 20)
    assert sorted(m for m, _ in zarchive.verify(path)) == sorted(["arr.npy", zst])
    with zarchive.open(path) as arc:
        for key, member in (("arr", "arr.npy"), ("ints", zst)):
            with pytest.raises(zarchive.IntegrityError) as info:
                arc[key]
            assert info.value.member == member
        assert arc["config"] == sample()["config"]
