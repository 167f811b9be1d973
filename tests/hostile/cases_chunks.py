"""Hostile-corpus cases about `bgzstd` members (spec 4.6): chunk indexes that lie, chunks that decode
to the wrong size, overlapping chunks, decompression bombs, damaged chunks.

Every file holds the valid archive plus a tensor `w` (64 float32 ones, 8x8) in a byte-grouped member
built here by hand: a header chunk stored raw (width 1) and a data chunk of width 4 whose planes
are RLE zstd frames (each plane of 1.0f is one repeated byte: 00 00 80 3f). Sizes and checksums are
true unless the case plants a lie.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from hostile.craft import Parts, crc_hex, pack
from hostile.formats import safetensors_bytes, zstd_frame

CaseTuple = tuple[str, Callable[[], bytes], str | None, str]
MEMBER = "w.safetensors.bgz"
ONES = np.ones(64, dtype="<f4")
GiB = 1 << 30


def expected_w() -> np.ndarray:
    return ONES.reshape(8, 8)


def _member() -> tuple[bytes, list[list[Any]], list[bytes]]:
    """The decoded member, its chunk rows and the stored bytes of each chunk."""
    content, _ = safetensors_bytes([("w", "F32", [8, 8], ONES.tobytes())])
    hlen = len(content) - ONES.nbytes
    head = content[:hlen]
    planes = [zstd_frame(rle=(b, 64)) for b in ONES.tobytes()[:4]]
    data = b"".join(planes)
    rows = [
        ["$header", 0, hlen, 1, 0, [hlen], crc_hex(head)],
        ["w", hlen, ONES.nbytes, 4, hlen, [len(p) for p in planes], crc_hex(data)],
    ]
    return content, rows, [head, data]


def build(
    edit_rows: Callable[[list[list[Any]]], None] | None = None,
    *,
    planes: list[bytes] | None = None,
    meta_edit: Callable[[dict[str, Any]], None] | None = None,
    fix_crc: bool = True,
) -> Callable[[], bytes]:
    """A case: the valid archive with `w`; `planes` replace the data chunk's planes (its row follows
    them unless edit_rows says otherwise), `edit_rows` edits the index, `meta_edit` the metadata."""

    def make(base: Callable[[], Parts]) -> bytes:
        content, rows, chunks = _member()
        if planes is not None:
            chunks[1] = b"".join(planes)
            rows[1][5] = [len(p) for p in planes]
            rows[1][6] = crc_hex(chunks[1]) if fix_crc else rows[1][6]
        if edit_rows is not None:
            edit_rows(rows)
        stored = b"".join(chunks)
        p = base()
        p.meta["format_version"] = "1.3"
        p.manifest["format_version"] = "1.3"
        p.manifest["root"]["w"] = {
            "$type": "torch.Tensor",
            "$ref": MEMBER,
            "key": "w",
            "dtype": "float32",
            "shape": [8, 8],
            "device": "cpu",
        }
        p.members[MEMBER] = content

        def meta(m: dict[str, Any]) -> None:
            entry = m["members"][MEMBER]
            entry.update(codec="bgzstd", size=len(content), chunks=copy.deepcopy(rows))
            if meta_edit is not None:
                meta_edit(m)

        return pack(p, stored={MEMBER: stored}, meta_edit=meta)

    return make  # type: ignore[return-value]  # (called with base by chunk_cases)


def chunk_cases(base: Callable[[], Parts]) -> list[CaseTuple]:
    cases: list[CaseTuple] = []

    def case(name: str, error: str | None, match: str, make: Any) -> None:
        cases.append((name, lambda: make(base), error, match))

    def row(i: int, **changes: Any) -> Callable[[list[list[Any]]], None]:
        fields = ("label", "offset", "size", "width", "stored_offset", "planes", "crc32")

        def edit(rows: list[list[Any]]) -> None:
            for k, v in changes.items():
                rows[i][fields.index(k)] = v

        return edit

    case("chunks_valid", None, "", build())
    case(
        "chunks_without_suffix",
        "FormatError",
        "must end in .bgz",
        build(
            meta_edit=lambda m: m["members"].__setitem__("blob.bin", {**m["members"]["blob.bin"], "codec": "bgzstd"})
        ),
    )
    case(
        "chunks_index_missing",
        "FormatError",
        "needs its 'chunks' index",
        build(meta_edit=lambda m: m["members"][MEMBER].pop("chunks")),
    )
    case("chunks_row_malformed", "FormatError", "not a \\[label", build(lambda rows: rows[1].pop()))
    case("chunks_gap", "FormatError", "leaves a gap", build(row(1, offset=_hlen() + 4)))
    case("chunks_overlap", "FormatError", "overlaps the one before", build(row(1, offset=_hlen() - 8)))
    case("chunks_stored_overlap", "FormatError", "stored at .* overlaps", build(row(1, stored_offset=_hlen() - 1)))
    case(
        "chunks_index_short",
        "FormatError",
        "the chunks decode to",
        build(lambda rows: rows.pop()),
    )
    case("chunks_width_zero", "FormatError", "width 0", build(row(1, width=0)))
    case("chunks_width_17", "FormatError", "width 17", build(row(1, width=17)))
    case("chunks_size_not_multiple", "FormatError", "not a positive multiple", build(row(1, size=255)))
    case(
        "chunks_plane_bigger_than_raw",
        "FormatError",
        "planes must be",
        build(planes=[b"\x00" * 65, b"\x00" * 64, b"\x80" * 64, b"\x3f" * 64]),
    )
    case(
        "chunks_terabyte_chunk",
        "UnsafeArchiveError",
        "over the .* a reader accepts",
        build(row(1, size=1 << 40), meta_edit=lambda m: m["members"][MEMBER].update(size=_hlen() + (1 << 40))),
    )
    case("chunks_crc_lies", "IntegrityError", "does not match its checksum", build(row(1, crc32="00000000")))
    case(
        "chunks_plane_short",
        "IntegrityError",
        "declares 32 bytes, its chunk 64",
        build(planes=[zstd_frame(rle=(0, 32)), *(zstd_frame(rle=(b, 64)) for b in b"\x00\x80\x3f")]),
    )
    case(
        "chunks_plane_decodes_short",
        "IntegrityError",
        "zstd data is damaged|decoded to",
        build(planes=[zstd_frame(rle=(0, 32), content_size=64), *(zstd_frame(rle=(b, 64)) for b in b"\x00\x80\x3f")]),
    )
    case(
        "chunks_plane_bomb",
        "UnsafeArchiveError",
        "decompression bomb",
        build(planes=[zstd_frame(rle=(0, 64), content_size=GiB), *(zstd_frame(rle=(b, 64)) for b in b"\x00\x80\x3f")]),
    )
    case(
        "chunks_plane_bomb_unsized",
        "IntegrityError|UnsafeArchiveError",
        "does not declare its size",
        build(
            planes=[
                zstd_frame(rle=(0, 128 << 10), content_size=None),  # 128 KiB in 10 bytes, size not declared
                *(zstd_frame(rle=(b, 64)) for b in b"\x00\x80\x3f"),
            ]
        ),
    )
    case(
        "chunks_plane_not_zstd",
        "IntegrityError",
        "not a zstd frame",
        build(planes=[b"garbage!", *(zstd_frame(rle=(b, 64)) for b in b"\x00\x80\x3f")]),
    )
    return cases


def _hlen() -> int:
    content, _ = safetensors_bytes([("w", "F32", [8, 8], ONES.tobytes())])
    return len(content) - ONES.nbytes
