"""Spec 4.5: a compressed member is exactly one zstd frame, with its content size and checksum.

The frames are walked here from the zstd frame format (RFC 8878, section 3.1) alone, without asking
the zstandard library where a frame ends, and the result is checked against zstandard's own view.
Archives written by zarchive 0.1.0 and earlier hold a second, empty frame after the real one: the
frozen examples show it, and must still read (readers accept and ignore trailing empty frames).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import golden_models  # noqa: F401  (the examples' classes must be imported for their tags to resolve)
import numpy as np
import pytest
import torch
import zstandard

import zarchive
from zarchive.engine.objpath import escape

EXAMPLES = Path(__file__).resolve().parents[1] / "spec" / "examples"
ZSTD_MAGIC = 0xFD2FB528
LEGACY_EMPTY_FRAME_BYTES = 13  # header with a 1-byte content size of 0, one empty last block, checksum


@dataclass(frozen=True)
class Frame:
    start: int
    length: int
    content_size: int | None  # None: the header does not record it
    has_checksum: bool
    blocks: int


def _frame_at(data: bytes, pos: int) -> Frame:
    """The zstd frame starting at `pos` (RFC 8878 3.1.1), found by reading its header and block headers."""
    start = pos
    magic = int.from_bytes(data[pos : pos + 4], "little")
    assert magic == ZSTD_MAGIC, f"no zstd frame at offset {pos} (magic {magic:#010x})"
    pos += 4
    descriptor = data[pos]
    pos += 1
    fcs_flag = descriptor >> 6
    single_segment = bool(descriptor & 0x20)
    assert not descriptor & 0x08, "reserved bit set in the frame header descriptor"
    has_checksum = bool(descriptor & 0x04)
    dict_id_size = (0, 1, 2, 4)[descriptor & 0x03]
    if not single_segment:
        pos += 1  # window descriptor
    pos += dict_id_size
    fcs_size = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    content_size: int | None = None
    if fcs_size:
        content_size = int.from_bytes(data[pos : pos + fcs_size], "little") + (256 if fcs_size == 2 else 0)
        pos += fcs_size
    blocks = 0
    while True:
        assert len(data) >= pos + 3, "frame ends inside a block header"
        header = int.from_bytes(data[pos : pos + 3], "little")
        pos += 3
        last, block_type, block_size = header & 1, (header >> 1) & 3, header >> 3
        assert block_type != 3, "reserved block type"
        pos += 1 if block_type == 1 else block_size  # an RLE block holds one byte
        blocks += 1
        if last:
            break
    pos += 4 if has_checksum else 0
    assert pos <= len(data), "frame runs past the end of the member"
    return Frame(start, pos - start, content_size, has_checksum, blocks)


def walk_frames(data: bytes) -> list[Frame]:
    """Every frame of a `.zst` member, back to back from its first byte to its last."""
    frames: list[Frame] = []
    pos = 0
    while pos < len(data):
        frames.append(_frame_at(data, pos))
        pos += frames[-1].length
    return frames


def _zst_members(path: Path) -> dict[str, tuple[bytes, dict[str, Any]]]:
    with zipfile.ZipFile(path) as z:
        metadata = json.loads(z.read("metadata.json"))
        return {n: (z.read(n), metadata["members"][n]) for n in z.namelist() if n.endswith(".zst")}


def _compressible_values() -> dict[str, Any]:
    return {
        "long_list": [f"item {i}" for i in range(2000)],  # -> long_list.jsonl.zst
        "long_numbers": list(range(5000)),
        "ints": (np.arange(100_000) % 7).astype(np.int8),  # -> ints.npy.zst (wider integers: .bgz)
        "big_ints": np.zeros(9 << 20, dtype=np.int8),  # 9 MiB: compressed on several threads
        "counts": {"a": torch.arange(4096, dtype=torch.int32) % 3, "b": torch.zeros(512, dtype=torch.int64)},
        "blob": b"zarchive " * 1000,  # -> blob.bin.zst
    }


@pytest.fixture(scope="module")
def fresh_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("zstd") / "compressed.zarc"
    zarchive.save(_compressible_values(), path, durable=False)
    return path


def test_fresh_archive_has_every_kind_of_compressed_member(fresh_archive: Path) -> None:
    names = set(_zst_members(fresh_archive))
    assert {"long_list.jsonl.zst", "long_numbers.jsonl.zst", "ints.npy.zst", "big_ints.npy.zst"} <= names
    assert {"counts.safetensors.zst", "blob.bin.zst"} <= names


def test_each_fresh_zst_member_is_exactly_one_frame(fresh_archive: Path) -> None:
    for name, (data, info) in _zst_members(fresh_archive).items():
        frames = walk_frames(data)
        assert len(frames) == 1, f"{name}: {len(frames)} frames ({frames})"
        (frame,) = frames
        assert frame.length == len(data) == info["stored_size"], name
        assert frame.content_size == info["size"], f"{name}: the frame header must record the content size"
        assert frame.has_checksum, f"{name}: the frame must carry its content checksum"


def test_zstandard_agrees_there_is_nothing_after_the_frame(fresh_archive: Path) -> None:
    for name, (data, info) in _zst_members(fresh_archive).items():
        params = zstandard.get_frame_parameters(data)
        assert params.content_size == info["size"] and params.has_checksum, name
        dobj = zstandard.ZstdDecompressor().decompressobj()
        decoded = dobj.decompress(data)
        assert len(decoded) == info["size"], name
        assert dobj.eof and dobj.unused_data == b"", f"{name}: {len(dobj.unused_data)} bytes after the frame"


def test_fresh_archive_reads_back(fresh_archive: Path) -> None:
    expected = _compressible_values()
    with zarchive.open(fresh_archive) as arc:
        assert arc.verify() == []
    value = zarchive.read(fresh_archive)
    assert value["long_list"] == expected["long_list"] and value["blob"] == expected["blob"]
    np.testing.assert_array_equal(value["big_ints"], expected["big_ints"])
    assert torch.equal(value["counts"]["a"], expected["counts"]["a"])


def test_frame_walker_sees_a_second_frame() -> None:
    """The walker itself: two frames back to back are two, as zstd -d would decode them."""
    cctx = zstandard.ZstdCompressor(write_checksum=True, write_content_size=True)
    one, two = cctx.compress(b"a" * 1000), cctx.compress(b"")
    frames = walk_frames(one + two)
    assert [(f.start, f.length, f.content_size) for f in frames] == [(0, len(one), 1000), (len(one), len(two), 0)]
    assert len(two) == LEGACY_EMPTY_FRAME_BYTES


# --- frozen examples: written with the extra empty frame, still read ---


def _format_version(path: Path) -> tuple[int, int]:
    with zipfile.ZipFile(path) as z:
        major, minor = json.loads(z.read("metadata.json"))["format_version"].split(".")
    return int(major), int(minor)


# examples of formats up to 1.2 were written by zarchive <= 0.1.0; later ones by today's writer
LEGACY = sorted(p for p in EXAMPLES.glob("*.zarc") if _zst_members(p) and _format_version(p) <= (1, 2))
CURRENT = sorted(p for p in EXAMPLES.glob("*.zarc") if _zst_members(p) and _format_version(p) > (1, 2))


@pytest.mark.parametrize("archive", LEGACY, ids=[p.name for p in LEGACY])
def test_frozen_zst_members_end_with_an_empty_frame(archive: Path) -> None:
    """What zarchive 0.1.0 wrote: the member's frame, then one empty frame (spec 4.5)."""
    for name, (data, info) in _zst_members(archive).items():
        first, *rest = walk_frames(data)
        assert first.content_size == info["size"] and first.has_checksum, name
        assert [f.content_size for f in rest] == [0], f"{name}: {rest}"
        assert rest[0].length == LEGACY_EMPTY_FRAME_BYTES


@pytest.mark.parametrize("archive", CURRENT, ids=[p.name for p in CURRENT])
def test_newer_frozen_zst_members_are_one_frame(archive: Path) -> None:
    for name, (data, info) in _zst_members(archive).items():
        (frame,) = walk_frames(data)
        assert frame.content_size == info["size"] and frame.has_checksum, name


def test_frozen_frame_counts_are_the_ones_the_spec_states() -> None:
    """README 4.5 counts them: the 42 members of the 1.0-1.2 examples have the trailing empty frame
    (released examples never change, so the count does not either); newer ones have one frame."""
    legacy = sum(len(_zst_members(p)) for p in LEGACY)
    assert legacy == 42 and CURRENT
    assert "the 42 `.zst` members of the format 1.0 to 1.2 examples" in (EXAMPLES.parent / "README.md").read_text(
        encoding="utf-8"
    )


@pytest.mark.parametrize("archive", LEGACY + CURRENT, ids=[p.name for p in LEGACY + CURRENT])
def test_frozen_zst_members_still_read(archive: Path) -> None:
    with zarchive.open(archive) as arc:
        assert arc.verify() == []
        for key in arc.keys(""):
            arc[escape(key)]  # each top-level value alone, lazily
    zarchive.read(archive, lazy=False)


# --- which members are compressed (spec 4.5) ---


def test_floating_members_stay_uncompressed(tmp_path: Path) -> None:
    """Zeros compress to almost nothing, yet float arrays and float-majority tensor members stay plain."""
    value = {
        "f64": np.zeros(4096),
        "c64": np.zeros(4096, dtype=np.complex64),
        "i64": np.zeros(4096, dtype=np.int64),
        "weights": {"w": torch.zeros(1024), "steps": torch.zeros(1000, dtype=torch.int32)},  # 4096 vs 4000 bytes
        "counts": {"w": torch.zeros(1000), "steps": torch.zeros(1024, dtype=torch.int32)},  # 4000 vs 4096 bytes
        "raw": {"z": torch.zeros(512, dtype=torch.complex128), "n": torch.zeros(16, dtype=torch.int64)},
    }
    path = zarchive.save(value, tmp_path / "policy.zarc", durable=False)
    with zipfile.ZipFile(path) as z:
        codecs = {n: e["codec"] for n, e in json.loads(z.read("metadata.json"))["members"].items()}
    assert codecs == {
        "manifest.json": "none",
        "f64.npy": "none",
        "c64.npy": "none",
        "i64.npy.bgz": "bgzstd",  # integers: byte-grouped where it pays (4.5, 4.6)
        "weights.safetensors": "none",
        "counts.safetensors.zst": "zstd",
        "raw.safetensors": "none",  # complex128 is stored as U8 but counts as floating
    }


def test_format_1_0_examples_have_compressed_float_members() -> None:
    """Written before the float rule: readers must accept any codec on any member."""
    for archive, member in [
        ("dataclasses.zarc", "config/weights.npy.zst"),
        ("checkpoint.zarc", "optimizer.safetensors.zst"),
        ("pandas_frame.zarc", "frame/float.npy.zst"),
    ]:
        with zipfile.ZipFile(EXAMPLES / archive) as z:
            metadata = json.loads(z.read("metadata.json"))
        assert metadata["format_version"] == "1.0" and metadata["members"][member]["codec"] == "zstd"
