"""Full reads decompress the planned compressed members on worker threads (container/decode_ahead.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hostile.craft import pack, unpack

import zarchive
from zarchive.container import decode_ahead
from zarchive.container.archive_reader import ArchiveReader
from zarchive.container.decode_ahead import DecodeAhead
from zarchive.container.source import open_local


def _value() -> dict[str, np.ndarray]:
    # compressible ints, one byte each (.zst: wider integers are byte-grouped, .bgz)
    return {f"c{i}": (np.arange(2_400_000) % (i + 3)).astype(np.int8) for i in range(3)}


def test_a_full_read_takes_the_members_decoded_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode_ahead, "AHEAD_ABOVE", 0)
    value = _value()
    zarchive.save(value, tmp_path / "a.zarc", durable=False)
    decoded_on: list[str] = []
    real = ArchiveReader.decode

    def spy(self: ArchiveReader, name: str, **kw: object) -> memoryview:
        import threading

        decoded_on.append(threading.current_thread().name)
        return real(self, name, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ArchiveReader, "decode", spy)
    back = zarchive.read(tmp_path / "a.zarc")
    assert all(np.array_equal(back[k], value[k]) for k in value)
    assert len(decoded_on) == 3 and all(n.startswith("zarchive-decode") for n in decoded_on), decoded_on


def test_only_planned_members_are_decoded(tmp_path: Path) -> None:
    zarchive.save(_value(), tmp_path / "a.zarc", durable=False)
    reader = ArchiveReader(open_local(str(tmp_path / "a.zarc"), mmap=True))
    try:
        names = sorted(n for n in reader.metadata["members"] if n.endswith(".zst"))
        assert len(names) == 3
        ahead = DecodeAhead(reader, names[:1], workers=2, min_bytes=0)
        reader.member_bytes(names[0])
        ahead.close()
        assert reader.is_decoded(names[0]) and not any(reader.is_decoded(n) for n in names[1:])
        assert reader.decoding == {}
    finally:
        reader.close()


def test_damage_found_ahead_names_the_member(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode_ahead, "AHEAD_ABOVE", 0)
    zarchive.save(_value(), tmp_path / "a.zarc", durable=False)
    parts = unpack((tmp_path / "a.zarc").read_bytes())
    name = sorted(n for n in parts.members if n.endswith(".zst"))[1]

    def lie(meta: dict) -> None:
        meta["members"][name]["content_crc32"] = "00000000"

    (tmp_path / "bad.zarc").write_bytes(pack(parts, meta_edit=lie))
    with pytest.raises(zarchive.IntegrityError) as err:
        zarchive.read(tmp_path / "bad.zarc")
    assert err.value.member == name


def test_compressed_weights_are_decoded_chunk_by_chunk_not_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `bgzstd` member is read in chunks as its tensors are; decoding it whole ahead (as zstd
    members are) read every stored byte twice and zero-filled its decoded size (the full read of
    compressed weights took 2.5-3x longer)."""
    import torch

    from zarchive.container import chunk_reader

    monkeypatch.setattr(decode_ahead, "AHEAD_ABOVE", 0)
    gen = torch.Generator().manual_seed(0)
    value = {f"w{i}": torch.randn(300_000, generator=gen) * 0.02 for i in range(4)}
    zarchive.save(value, tmp_path / "c.zarc", compress_weights=True, durable=False)
    whole: list[str] = []
    real = ArchiveReader.decode
    monkeypatch.setattr(ArchiveReader, "decode", lambda self, name, **kw: whole.append(name) or real(self, name, **kw))
    decoded: list[int] = []
    real_chunk = chunk_reader.decode_chunk

    def count(chunk: chunk_reader.Chunk, *a: object, **kw: object) -> None:
        decoded.append(chunk.offset)
        real_chunk(chunk, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(chunk_reader, "decode_chunk", count)
    back = zarchive.read(tmp_path / "c.zarc")
    assert all(torch.equal(back[k], value[k]) for k in value)
    assert not any(n.endswith(".bgz") for n in whole), whole
    reader = ArchiveReader(open_local(str(tmp_path / "c.zarc"), mmap=False))
    try:
        (name,) = [n for n in reader.metadata["members"] if n.endswith(".bgz")]
        assert not reader.decodes_whole(name)
        assert sorted(decoded) == sorted(c.offset for c in reader.chunked(name).chunks)  # each chunk once
        with pytest.raises(zarchive.FormatError, match="not decoded whole"):
            reader.decode(name)
    finally:
        reader.close()
