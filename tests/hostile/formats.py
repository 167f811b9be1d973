"""Member formats built by hand for hostile files (test code only): zstd frames, .npy, .safetensors.

`zstd_frame` assembles frames from raw and RLE blocks (a 1 GiB bomb is 32 KiB on disk) with any
content-size field, or none, so the reader's refusal to trust the frame header can be tested.
"""

from __future__ import annotations

import json
import struct
from typing import Any

# --- zstd frames by hand -------------------------------------------------------------------------
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ZSTD_BLOCK = 128 * 1024


def _block(kind: int, size: int, body: bytes, last: bool) -> bytes:
    header = (size << 3) | (kind << 1) | int(last)
    return header.to_bytes(3, "little") + body


def zstd_frame(
    data: bytes = b"", *, rle: tuple[int, int] | None = None, content_size: int | None = -1, window_log: int = 17
) -> bytes:
    """A zstd frame holding `data` in raw blocks, then `rle=(byte, count)` bytes in RLE blocks (a bomb:
    128 KiB per 4-byte block). content_size: -1 writes the true size, None omits the field, any other
    value is written as is (a lie)."""
    blocks: list[tuple[int, int, bytes]] = [
        (0, len(c), c) for c in (data[i : i + ZSTD_BLOCK] for i in range(0, len(data), ZSTD_BLOCK))
    ]
    if rle is not None:
        byte, count = rle
        for i in range(0, count, ZSTD_BLOCK):
            blocks.append((1, min(ZSTD_BLOCK, count - i), bytes([byte])))
    blocks = blocks or [(0, 0, b"")]
    true_size = len(data) + (rle[1] if rle else 0)
    size_field = true_size if content_size == -1 else content_size
    if size_field is None:
        fhd, fcs = 0x00, b""
    else:
        fhd, fcs = 0xC0, struct.pack("<Q", size_field)  # 8-byte content size, not single-segment
    window = bytes([(window_log - 10) << 3])
    body = b"".join(_block(k, n, b, i == len(blocks) - 1) for i, (k, n, b) in enumerate(blocks))
    return ZSTD_MAGIC + bytes([fhd]) + window + fcs + body


# --- member formats --------------------------------------------------------------------------------
def npy_bytes(
    descr: Any,
    shape: tuple[int, ...],
    data: bytes,
    *,
    fortran: bool = False,
    header_text: str | None = None,
    pad_to: int = 64,
) -> bytes:
    """An .npy (version 1.0) member; `header_text` replaces the dict literal verbatim."""
    text = (
        header_text
        if header_text is not None
        else (f"{{'descr': {descr!r}, 'fortran_order': {fortran}, 'shape': {tuple(shape)!r}, }}")
    )
    text += " " * ((-(10 + len(text) + 1)) % pad_to) + "\n"
    raw = text.encode("latin1")
    if len(raw) < 0x10000:
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(raw)) + raw + data
    return b"\x93NUMPY\x02\x00" + struct.pack("<I", len(raw)) + raw + data


def safetensors_bytes(
    tensors: list[tuple[str, str, list[int], bytes]], *, header: Any = None, length: int | None = None
) -> tuple[bytes, dict[str, tuple[int, int]]]:
    """A .safetensors member and its checksum entries {label: (offset, size)}.

    tensors: (key, dtype code, shape, data) laid out back to back; `header` replaces the JSON header;
    `length` replaces the 8-byte header length.
    """
    if header is None:
        header, off = {}, 0
        for key, dtype, shape, data in tensors:
            header[key] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
            off += len(data)
    text = json.dumps(header, separators=(",", ":")).encode() if not isinstance(header, bytes) else header
    text += b" " * ((-(8 + len(text))) % 64)
    head = struct.pack("<Q", len(text) if length is None else length) + text
    entries = {"$header": (0, len(head))}
    pos = len(head)
    body = b""
    for key, _, _, data in tensors:
        entries[key] = (pos, len(data))
        pos += len(data)
        body += data
    return head + body, entries


# --- bgzstd members (spec 4.6), decoded from the spec alone ------------------------------------------
def decode_bgzstd(stored: bytes, rows: list[list[Any]]) -> bytes:
    """The decoded bytes of a `bgzstd` member, written from spec 4.6 without zarchive's code: per chunk,
    W planes (raw when a plane's stored size is size / W, else one zstd frame), byte i of plane k
    going to offset i * W + k."""
    import numpy as np
    import zstandard

    out = bytearray()
    for _label, offset, size, width, stored_offset, planes, _crc in rows:
        assert offset == len(out)
        n, pos = size // width, stored_offset
        grid = np.empty((n, width), dtype=np.uint8)
        for k, s in enumerate(planes):
            frame = stored[pos : pos + s]
            plane = frame if s == n else zstandard.ZstdDecompressor().decompress(frame, max_output_size=n)
            grid[:, k] = np.frombuffer(plane, dtype=np.uint8)
            pos += s
        out += grid.tobytes()
    return bytes(out)
