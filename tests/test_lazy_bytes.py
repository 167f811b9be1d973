"""Fetching one small tensor from a ~200 MB archive reads only that tensor's bytes plus the headers
(zip directory, manifest, metadata, the safetensors header) — and checks that tensor's checksum."""

from __future__ import annotations

import io
from pathlib import Path

import torch

import zarchive


class CountingFile(io.FileIO):
    """A real file that counts the bytes read through it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, "r")
        self.bytes_read = 0

    def read(self, size: int = -1) -> bytes:  # type: ignore[override]
        data = super().read(size)
        self.bytes_read += len(data)
        return data

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def, override]
        n = super().readinto(buffer)
        self.bytes_read += n or 0
        return n


def test_one_small_tensor_from_a_200mb_archive_reads_only_its_bytes(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    state = {f"block{i}.weight": torch.randn(1024, 1024, generator=g) for i in range(48)}  # 48 x 4 MiB
    state["tiny.bias"] = torch.arange(16, dtype=torch.float32)
    path = zarchive.save({"model": state}, tmp_path / "big.zarc", durable=False)
    size = Path(path).stat().st_size
    assert size > 200_000_000

    with zarchive.open(path) as arc:
        json_bytes = arc.members["manifest.json"]["size"]
    with CountingFile(Path(path)) as f, zarchive.open(f) as arc:
        opened = f.bytes_read
        tiny = arc["model/tiny.bias"]
        fetched = f.bytes_read - opened
    assert torch.equal(tiny, state["tiny.bias"])
    # opening: the end of the zip, its directory, local headers, manifest and metadata (a few KB here)
    assert opened < json_bytes * 3 + 64 * 1024, opened
    # the value: the safetensors header plus the tensor's own 64 bytes, not its 200 MB neighbours
    assert fetched < 16 * 1024, fetched


def test_a_damaged_neighbour_does_not_stop_a_lazy_read_but_is_caught_when_read(tmp_path: Path) -> None:
    state = {"a": torch.randn(512, 512), "b": torch.randn(512, 512)}  # (a member of over 1 MiB records entries)
    path = Path(zarchive.save({"m": state}, tmp_path / "x.zarc", durable=False))
    with zarchive.open(path) as arc:
        node = arc.node("m/b")
        member, key = node["$ref"], node["key"]
        from zarchive.container.safetensors_layout import header_length, parse_header

        info = arc._reader.zip.members[member]
        raw = arc._reader.zip.view(member)
        slot = parse_header(raw[: header_length(raw[:8], info.size, member=member)], info.size, member=member)[key]
        offset = info.data_offset + slot.begin + 100
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
    with zarchive.open(path) as arc:
        assert torch.equal(arc["m/a"], state["a"])  # only a's bytes (and its checksum) are read
        try:
            arc["m/b"]
        except zarchive.IntegrityError as e:
            assert "'b'" in str(e) or "m/b" in str(e)
        else:
            raise AssertionError("a damaged tensor was returned")
