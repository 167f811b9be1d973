"""A fresh open and one fetch (issue 27): the reads they make, and the checks they keep.

Opening reads the file's first 64 KiB and last 8 KiB ahead (local headers, JSON members, the end
record and the directory), a fetch reads its tensor and checksums it as it lands (one pass), and a
safetensors header in data order has its tiling checked at once and each entry when it is used.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import torch

import zarchive
from zarchive.container.source import CRC_PIECE, LocalFileSource, MappedSource
from zarchive.container.zipreader import TAIL_BYTES, ZipReader


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    big = torch.randn(3 * CRC_PIECE // 4 + 123, generator=g)  # ~3 MiB: several pieces of the fused check
    return {"big": big, "small": torch.arange(10.0), "mid": torch.randn(64, 64, generator=g)}


def _data_at(path: Path, key: str) -> int:
    """The file offset of tensor `key`'s first byte."""
    with zarchive.open(path) as arc:
        node = arc.node(key)
        offset = arc.entries(node["$ref"])[node["key"]]["offset"]
    source = MappedSource(path)
    try:
        return ZipReader(source).members[node["$ref"]].data_offset + offset
    finally:
        source.close()


def test_fetches_from_a_fresh_open_are_right_and_their_own(tmp_path: Path) -> None:
    path = tmp_path / "a.zarc"
    values = _tensors()
    zarchive.save(values, path)
    with zarchive.open(path) as arc:
        got = {k: arc[k] for k in values}
        again = arc["small"]
    for k, v in values.items():
        assert torch.equal(got[k], v), k
    got["small"][0] = 99.0  # bytes served from what was read ahead are still each fetch's own
    assert again[0] == 0.0
    out = torch.empty_like(values["big"])
    with zarchive.open(path) as arc:
        assert arc.load_into("big", out) is out
    assert torch.equal(out, values["big"])


@pytest.mark.parametrize("where", [0.1, 0.5, 0.99])
def test_damage_anywhere_in_a_tensor_fails_its_fused_check(tmp_path: Path, where: float) -> None:
    path = tmp_path / "a.zarc"
    values = _tensors()
    zarchive.save(values, path)
    at = _data_at(path, "big") + int(where * values["big"].numel() * 4)
    data = bytearray(path.read_bytes())
    data[at] ^= 0x40
    path.write_bytes(bytes(data))
    with zarchive.open(path) as arc:
        assert torch.equal(arc["small"], values["small"])
        with pytest.raises(zarchive.IntegrityError, match="entry 'big' does not match"):
            arc["big"]
    with zarchive.open(path) as arc, pytest.raises(zarchive.IntegrityError, match="entry 'big' does not match"):
        arc.load_into("big", torch.empty_like(values["big"]))
    with zarchive.open(path, verify=False) as arc:  # (verify=False: read as stored)
        assert not torch.equal(arc["big"], values["big"])


def test_a_fetch_after_the_file_shrank_raises(tmp_path: Path) -> None:
    path = tmp_path / "a.zarc"
    values = _tensors()
    zarchive.save(values, path)
    cut = _data_at(path, "big") + 4096
    with zarchive.open(path) as arc:
        with open(path, "r+b") as f:
            f.truncate(cut)
        with pytest.raises(zarchive.IntegrityError, match="truncated or rewritten"):
            arc["big"]


@pytest.mark.parametrize("comment", [100, TAIL_BYTES + 500, 0xFFFF])
def test_archives_with_a_zip_comment_open(tmp_path: Path, comment: int) -> None:
    """The end record is looked for in the last 8 KiB first, then in the 64 KiB a comment allows."""
    path = tmp_path / "a.zarc"
    values = _tensors()
    zarchive.save(values, path)
    data = bytearray(path.read_bytes())
    assert struct.unpack_from("<I", data, len(data) - 22)[0] == 0x06054B50 and data[-2:] == b"\0\0"
    data[-2:] = struct.pack("<H", comment)
    text = (b"PK\x05\x06 not the end record " * (comment // 24 + 1))[:comment]  # decoy signatures in it
    assert len(text) == comment
    path.write_bytes(bytes(data) + text)
    with zarchive.open(path) as arc:
        assert torch.equal(arc["mid"], values["mid"])
    assert zarchive.verify(path)


def test_a_comment_that_misses_the_end_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.zarc"
    zarchive.save(_tensors(), path)
    path.write_bytes(path.read_bytes() + b"trailing bytes")  # a comment length of 0 no longer reaches the end
    with pytest.raises(zarchive.FormatError, match="end-of-directory"):
        zarchive.open(path)


def test_read_ahead_serves_copies_and_reads_the_file_once(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(256)) * 512)  # 128 KiB
    source = LocalFileSource(path)
    try:
        source.read_ahead(0, 64 << 10)
        before = source.bytes_read
        a, b = source.view(10, 20), source.view(10, 20)
        assert bytes(a) == bytes(range(10, 30)) and source.bytes_read == before
        a[0] = 0
        assert b[0] == 10 and bytes(source.view(10, 1)) == b"\n"
        across = source.view((64 << 10) - 4, 8)  # not wholly inside: read from the file
        assert bytes(across) == bytes([252, 253, 254, 255, 0, 1, 2, 3]) and source.bytes_read == before + 8
        view, crc = source.view_crc(100, 70_000)
        import zlib

        assert crc == zlib.crc32(view) and bytes(view) == path.read_bytes()[100:70_100]
    finally:
        source.close()
