"""Member codecs: "none" (the bytes as they are) and "zstd" (one zstandard frame, `.zst` suffix).

A zstd member is a complete `.zst` file, so `unzip` followed by `zstd -d` restores the original.
Decompression is always bounded by the size the metadata declares: the frame's own content-size
field is never trusted, and a frame that would produce more bytes than declared stops with an error
as soon as it exceeds the declaration.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import zstandard

from ..errors import IntegrityError, UnsafeArchiveError
from .crc import crc32
from .thread_pools import usable_cores

if TYPE_CHECKING:
    import numpy as np

ZSTD_SUFFIX = ".zst"
DEFAULT_MAX_DECOMPRESSED = 4 << 30  # a reader decodes no bigger member unless asked (max_decompressed)
MULTITHREAD_MIN_BYTES = 8 << 20  # below this, thread start-up costs more than it saves
SAMPLE_BYTES = 256 << 10  # a member's sample: SAMPLE_PIECES slices taken evenly across it, this much in all
SAMPLE_PIECES = 4
WORTH_IT_RATIO = 0.85  # compress only if the sample shrinks to at most this fraction (at zstd level 1)
_READ_CHUNK = 1 << 20
_FIRST_BUFFER = 16 << 20
_GROW_STEP = 64 << 20


def zstd_threads(size: int) -> int:
    """Worker threads for a member of `size` bytes (zstd's output does not depend on the count)."""
    return min(usable_cores(), 8) if size >= MULTITHREAD_MIN_BYTES else 0


_local = threading.local()


def compressor(level: int, size: int) -> zstandard.ZstdCompressor:
    """A compressor for a member of `size` bytes: one frame, its size and checksum in it. Those run
    on one thread are kept per thread and level, so their memory is reused, not faulted in anew (the
    frames they make are the same)."""
    threads = zstd_threads(size)
    if threads:
        return zstandard.ZstdCompressor(level=level, threads=threads, write_checksum=True, write_content_size=True)
    return _kept(
        ("member", level), lambda: zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=True)
    )


def _kept(key: tuple[str, int], make: Callable[[], zstandard.ZstdCompressor]) -> zstandard.ZstdCompressor:
    kept: dict[tuple[str, int], zstandard.ZstdCompressor] | None = getattr(_local, "compressors", None)
    if kept is None:
        kept = _local.compressors = {}
    c = kept.get(key)
    if c is None:
        c = kept[key] = make()
    return c


def worth_compressing(sample: bytes | memoryview, level: int) -> bool:
    """Whether zstd pays on data like `sample` (random-looking floats do not). The trial runs at
    level 1 (or `level`, if lower): cheap, and a member it passes shrinks at least as much at `level`."""
    if len(sample) < 64:
        return False
    trial = min(level, 1)
    cctx = _kept(("trial", trial), lambda: zstandard.ZstdCompressor(level=trial))
    return len(cctx.compress(sample)) <= WORTH_IT_RATIO * len(sample)


def take_sample(buffers: Iterable[memoryview | bytes], limit: int = SAMPLE_BYTES) -> bytes:
    """A sample of a member's bytes (the concatenated `buffers`) without materialising the rest: all
    of them up to `limit`, else SAMPLE_PIECES slices of limit / SAMPLE_PIECES bytes spread evenly from
    its start to its end (a column's head is not always like its body)."""
    views = [memoryview(b).cast("B") for b in buffers]
    total = sum(v.nbytes for v in views)
    if total <= limit:
        return b"".join(views)
    piece = limit // SAMPLE_PIECES
    out = bytearray()
    for i in range(SAMPLE_PIECES):
        start = (total - piece) * i // (SAMPLE_PIECES - 1)
        out += _slice(views, start, piece)
    return bytes(out)


def _slice(views: list[memoryview], start: int, n: int) -> bytearray:
    """`n` bytes from offset `start` of the concatenated views."""
    out = bytearray()
    at = 0
    for v in views:
        end = at + v.nbytes
        if end > start and len(out) < n:
            lo = max(start - at, 0)
            out += v[lo : lo + n - len(out)]
        at = end
        if len(out) >= n:
            break
    return out


def decompress_prefix(data: memoryview | bytes, n: int, *, member: str) -> bytes:
    """The first `n` decompressed bytes of a zstd frame (fewer if it is shorter), decompressing no more."""
    out = bytearray()
    try:
        with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=False) as reader:
            while len(out) < n:
                chunk = reader.read(min(_READ_CHUNK, n - len(out)))
                if not chunk:
                    break
                out += chunk
    except zstandard.ZstdError as e:
        raise IntegrityError(f"zstd data is damaged: {e}", member=member) from e
    return bytes(out)


def _check_size(produced: int, expected_size: int, *, too_long: bool, member: str) -> None:
    """A frame must decode to exactly the declared size: more is a bomb, less is damage."""
    if too_long:
        raise UnsafeArchiveError(
            f"decompresses to more than the {expected_size} bytes the metadata declares "
            "(a zip bomb or damaged metadata)",
            member=member,
        )
    if produced != expected_size:
        raise IntegrityError(f"decompressed to {produced} bytes, the metadata declares {expected_size}", member=member)


def _chunks(data: memoryview | bytes, expected_size: int, member: str) -> Iterator[bytes]:
    """The frame's decompressed bytes in chunks of at most 1 MiB, stopping with an error as soon as
    they exceed `expected_size` or end short of it."""
    total = 0
    try:
        with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=False) as reader:
            while total <= expected_size:
                chunk = reader.read(min(_READ_CHUNK, expected_size + 1 - total))
                if not chunk:
                    break
                total += len(chunk)
                if total > expected_size:
                    break
                yield chunk
    except zstandard.ZstdError as e:
        raise IntegrityError(f"zstd data is damaged: {e}", member=member) from e
    _check_size(total, expected_size, too_long=total > expected_size, member=member)


def decompress_bounded(data: memoryview | bytes, expected_size: int, *, member: str) -> memoryview:
    """Decompress one zstd frame that must yield exactly `expected_size` bytes, straight into a buffer
    (writable, its own).

    The buffer starts at a size the compressed bytes can plausibly fill (16x their size, at least
    16 MiB, at most the declared size) and grows in 64 MiB steps as the frame fills it, so a frame of a
    few bytes under a lying declaration never gets the declared size. It is numpy's uninitialised
    memory: CPython zeroes a new bytearray, a pass over the buffer before zstd writes it (10 MB of
    text decompressed in 6.6 ms instead of 10.3 ms, 2026-11-28)."""
    out = _buffer(min(expected_size, max(_FIRST_BUFFER, 16 * len(data))), member)
    pos = 0
    extra = b""
    try:
        with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=False) as reader:
            while pos < expected_size:
                if pos == len(out):
                    grown = _buffer(min(len(out) + _GROW_STEP, expected_size), member)
                    grown[:pos] = out
                    out = grown
                with out.data as whole, whole[pos:] as free:
                    n = reader.readinto(free)
                if not n:
                    break
                pos += n
            if pos == expected_size:
                extra = reader.read(1)
    except zstandard.ZstdError as e:
        raise IntegrityError(f"zstd data is damaged: {e}", member=member) from e
    _check_size(pos, expected_size, too_long=bool(extra), member=member)
    return out.data


def _buffer(size: int, member: str) -> np.ndarray:
    import numpy as np  # (here: `import zarchive` stays without numpy)

    try:
        return np.empty(size, dtype=np.uint8)
    except MemoryError:
        raise UnsafeArchiveError(
            f"declares {size} decompressed bytes, more than this process can allocate", member=member
        ) from None


def decompressed_crc(data: memoryview | bytes, expected_size: int, *, member: str) -> int:
    """The CRC-32 of what a frame decompresses to (exactly `expected_size` bytes), in constant memory."""
    crc = 0
    for chunk in _chunks(data, expected_size, member):
        crc = crc32(chunk, crc)
    return crc
