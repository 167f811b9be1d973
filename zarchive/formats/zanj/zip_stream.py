"""One member of an ordinary zip (a ZANJ file, a torch.save zip, an .npz), decoded in bounded pieces.

`zipfile` inflates bzip2 and LZMA members without an output limit per step (a few KB of input can
inflate to gigabytes before it cuts the result to the declared size), and a caller that wants a CRC
has to hold or copy what it inflates. Here every decoder runs with an output limit: a member comes
out in pieces of at most `PIECE` bytes, never past the size the zip directory declares, so checking
a member's CRC (`member_crc`) holds one piece at a time, and reading it whole holds the member and
one piece. Decoding reads the member's stored bytes straight from the ByteSource.
"""

from __future__ import annotations

import bz2
import lzma
import struct
import zipfile
import zlib
from collections.abc import Iterator
from typing import Protocol

from ...container.crc import crc32
from ...container.source import ByteSource
from ...errors import IntegrityError, UnsafeArchiveError

__all__ = ["PIECE", "data_offset", "decoder_memory", "member_crc", "member_pieces"]

PIECE = 1 << 20  # decoded bytes per piece
_INPUT = 1 << 16  # stored bytes fed to a decoder per step
_LOCAL_NAME_LENGTHS = struct.Struct("<HH")  # (name, extra) lengths at offset 26 of a local header
_LZMA_MIN_DICT = 1 << 12


class _Decoder(Protocol):
    @property
    def eof(self) -> bool: ...
    @property
    def needs_input(self) -> bool: ...
    def decompress(self, data: bytes, max_length: int = -1) -> bytes: ...


class _Inflate:
    """zlib's raw inflate with the interface of bz2's and lzma's decompressors (`needs_input`)."""

    def __init__(self) -> None:
        self._d = zlib.decompressobj(-15)

    @property
    def eof(self) -> bool:
        return self._d.eof

    @property
    def needs_input(self) -> bool:
        return not self._d.unconsumed_tail

    def decompress(self, data: bytes, max_length: int = -1) -> bytes:
        if max_length <= 0:  # (zlib reads 0 as "no limit"; every caller here sets one)
            raise ValueError("an output limit is required")
        if not data and not self._d.unconsumed_tail:  # input used up: what inflate still holds (one match)
            return self._d.flush()[:max_length]
        return self._d.decompress(data or self._d.unconsumed_tail, max_length)


def data_offset(source: ByteSource, info: zipfile.ZipInfo) -> int:
    """Where a member's stored bytes start: after its local header (whose name and extra field have
    lengths of their own, not necessarily the central directory's)."""
    n, m = _LOCAL_NAME_LENGTHS.unpack(bytes(source.view(info.header_offset + 26, 4)))
    return int(info.header_offset) + 30 + n + m


def _lzma_filter(props: bytes, size: int, member: str) -> dict[str, int]:
    """The raw LZMA1 filter of a zip LZMA member's properties (APPNOTE 5.8.8). Its dictionary is cut
    to the member's declared size: a decoder never looks further back than what it has produced, and
    liblzma allocates the whole dictionary the properties name (up to 4 GiB) when it starts."""
    if len(props) != 5:
        raise IntegrityError(f"LZMA properties of {len(props)} bytes (5 expected)", member=member)
    d = props[0]
    lc, lp, pb = d % 9, (d // 9) % 5, d // 45
    if pb > 4 or lc + lp > 4:
        raise IntegrityError(f"bad LZMA properties byte {d}", member=member)
    dict_size = int.from_bytes(props[1:5], "little")
    dict_size = max(_LZMA_MIN_DICT, min(dict_size, size))
    return {"id": lzma.FILTER_LZMA1, "dict_size": dict_size, "lc": lc, "lp": lp, "pb": pb}


def decoder_memory(info: zipfile.ZipInfo) -> int:
    """Memory a member's decoder holds while decoding it beside one piece (an upper estimate): LZMA
    keeps a dictionary up to the member's size, bzip2 its 900 KB blocks, inflate its 32 KB window."""
    if info.compress_type == zipfile.ZIP_LZMA:
        return max(_LZMA_MIN_DICT, int(info.file_size)) + (1 << 20)
    if info.compress_type == zipfile.ZIP_BZIP2:
        return 8 << 20
    return 1 << 16


def member_pieces(
    source: ByteSource, info: zipfile.ZipInfo, *, member: str, path: str | None = None, piece: int = PIECE
) -> Iterator[bytes | memoryview]:
    """The member's decoded bytes in pieces of at most `piece` bytes, `info.file_size` in all (an
    IntegrityError where the stored data ends first or is damaged). The local header and the stored
    bytes' place in the file must have been checked (ZanjZip does so when it opens the file)."""
    size, at, left = int(info.file_size), data_offset(source, info), int(info.compress_size)
    if info.compress_type == zipfile.ZIP_STORED:
        if left != size:
            raise IntegrityError(f"a stored member of {left:,} bytes declares {size:,}", member=member, path=path)
        for start in range(0, size, piece):
            yield source.view(at + start, min(piece, size - start))
        return
    decoder: _Decoder
    if info.compress_type == zipfile.ZIP_DEFLATED:
        decoder = _Inflate()
    elif info.compress_type == zipfile.ZIP_BZIP2:
        decoder = bz2.BZ2Decompressor()
    elif info.compress_type == zipfile.ZIP_LZMA:
        if left < 4:
            raise IntegrityError("the LZMA member's header is cut short", member=member, path=path)
        n_props = int.from_bytes(bytes(source.view(at + 2, 2)), "little")
        if 4 + n_props > left:
            raise IntegrityError("the LZMA member's header is cut short", member=member, path=path)
        filt = _lzma_filter(bytes(source.view(at + 4, n_props)), size, member)
        decoder = lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[filt])
        at, left = at + 4 + n_props, left - 4 - n_props
    else:
        raise UnsafeArchiveError(f"unsupported zip compression method {info.compress_type}", member=member, path=path)
    made, stalled = 0, False
    try:
        while made < size and not decoder.eof:
            chunk = b""
            if decoder.needs_input and left > 0:
                chunk = bytes(source.view(at, min(left, _INPUT)))
                at, left = at + len(chunk), left - len(chunk)
            out = decoder.decompress(chunk, min(piece, size - made))
            if out:
                made += len(out)
                stalled = False
                yield out
            elif not chunk:  # no input given and none produced: twice in a row, the data has ended
                if stalled:
                    break
                stalled = True
    except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError) as e:
        raise IntegrityError(f"cannot decode the member: {e}", member=member, path=path) from None
    if made != size:
        raise IntegrityError(
            f"decodes to {made:,} bytes, the zip directory declares {size:,}", member=member, path=path
        )


def member_crc(source: ByteSource, info: zipfile.ZipInfo, *, member: str, path: str | None = None) -> int:
    """The CRC-32 of a member's decoded bytes, computed piece by piece (one piece held at a time)."""
    value = 0
    for data in member_pieces(source, info, member=member, path=path):
        value = crc32(data, value)
    return value
