"""The `bgzstd` member codec: float data byte-grouped and zstd-compressed in independent chunks.

A member stored with this codec (name: the decoded member's name plus `.bgz`) is cut into chunks of
at most CHUNK_BYTES decoded bytes. In each chunk of width W, byte k of every W-byte element goes to
plane k (for bfloat16, all low bytes then all high bytes; for float32 the four byte planes): the
exponent bytes, which repeat, land apart from the mantissa bytes, which do not. Each plane is stored
raw (when zstd does not shrink it) or as one zstd frame. The chunk index in the metadata says, for
every chunk, where its decoded bytes go, where its planes are stored, how big each plane is and the
CRC-32 of its stored bytes (spec/README.md section 4.6). So:
- chunks are compressed and decompressed in parallel (zstandard releases the GIL);
- a range of the member (one tensor) is decoded from the chunks that hold it, and no others;
- a damaged chunk is found by its own CRC and named with the entry it holds.
This module holds the filter, the chunk index and the writing side; chunk_reader the reading side.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import zstandard

from ..errors import FormatError, UnsafeArchiveError
from .crc import crc32, crc_hex
from .thread_pools import shared_pool, usable_cores

if TYPE_CHECKING:
    import numpy as np

CODEC = "bgzstd"
SUFFIX = ".bgz"
CHUNK_BYTES = 2 << 20  # decoded bytes per chunk: ~1,000 chunks per 2 GB, enough for every core
MAX_CHUNK_BYTES = 256 << 20  # readers refuse bigger chunks (the writer's are CHUNK_BYTES at most)
MAX_WIDTH = 16
PAYS_RATIO = 0.95  # a member is stored this way only if its sample shrinks to 95% or less
PLANE_PAYS_RATIO = 0.97  # a plane is zstd-compressed only if its first PLANE_SAMPLE bytes shrink to 97%
PLANE_SAMPLE = 64 << 10
SAMPLE_PER_PART = 256 << 10
SAMPLE_TOTAL = 1 << 20
HEADER_LABEL = "$header"
DATA_LABEL = "$data"
_HEX8 = re.compile("[0-9a-f]{8}")

# zstd tuned for byte planes: the exponent plane of weights holds few distinct bytes and almost no
# repeats, so matches rarely pay and zstd's Huffman-coded literals do the work. A short search with
# long minimum matches is both faster and smaller than level 1 on such planes (benchmarks/compressed.py).
_PARAMS = zstandard.ZstdCompressionParameters(
    strategy=zstandard.STRATEGY_FAST,
    min_match=7,
    search_log=1,
    hash_log=6,
    chain_log=6,
    window_log=17,
    write_content_size=True,
    write_checksum=False,
)
_local = threading.local()


def workers() -> int:
    return usable_cores()


def executor() -> ThreadPoolExecutor:
    """The thread pool that compresses and decodes chunks (thread_pools: one worker per core)."""
    return shared_pool("bgzstd")


def _compressor() -> zstandard.ZstdCompressor:
    c = getattr(_local, "cctx", None)
    if c is None:
        c = _local.cctx = zstandard.ZstdCompressor(compression_params=_PARAMS)
    return c


def numpy_width(dtype: np.dtype[Any]) -> int:
    """The byte-group width of a numpy dtype: the size of one float component (a complex number
    is two floats), 1 (no grouping) for everything that is not floating."""
    if dtype.kind == "f":
        return min(dtype.itemsize, MAX_WIDTH)
    if dtype.kind == "c":
        return min(dtype.itemsize // 2, MAX_WIDTH)
    return 1


# --- the chunk index -------------------------------------------------------------------------------


@dataclass(slots=True)
class Chunk:
    label: str  # the entry the chunk starts in ('$header', a tensor key, '$data')
    offset: int  # of its decoded bytes in the member
    size: int
    width: int
    stored_offset: int  # of its stored bytes in the zip entry
    planes: tuple[int, ...]  # stored size of each plane; equal to size // width: raw, else one zstd frame
    crc: int  # CRC-32 of its stored bytes
    stored_size: int = 0  # (the planes' sum)

    @property
    def end(self) -> int:
        return self.offset + self.size


def _bad(i: int, what: str, member: str) -> FormatError:
    return FormatError(f"chunk index row {i}: {what}", member=member)


def parse_index(entry: dict[str, Any], *, member: str) -> list[Chunk]:
    """The validated chunk index of a `bgzstd` member's metadata entry. Rows are
    [label, offset, size, width, stored_offset, [plane stored sizes], crc32], in data order; their
    decoded ranges tile [0, size) and their stored ranges tile [0, stored_size), without gaps or
    overlaps. Refused (FormatError, or UnsafeArchiveError for a chunk over MAX_CHUNK_BYTES) otherwise."""
    rows = entry.get("chunks")
    if not isinstance(rows, list):
        raise FormatError("a bgzstd member needs its 'chunks' index", member=member)
    out: list[Chunk] = []
    end = stored_end = 0
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != 7:
            raise _bad(i, "not a [label, offset, size, width, stored_offset, planes, crc32] row", member)
        label, offset, size, width, stored_offset, planes, crc = row
        if not isinstance(label, str) or len(label) > 100_000:
            raise _bad(i, "bad label", member)
        if type(offset) is not int or type(size) is not int or type(stored_offset) is not int or offset < 0:
            raise _bad(i, "offset, size and stored_offset must be non-negative integers", member)
        if type(width) is not int or not 1 <= width <= MAX_WIDTH:
            raise _bad(i, f"width {width} is not in 1..{MAX_WIDTH}", member)
        if size <= 0 or size % width:
            raise _bad(i, f"size {size} is not a positive multiple of its width {width}", member)
        if size > MAX_CHUNK_BYTES:
            raise UnsafeArchiveError(
                f"chunk index row {i}: a chunk of {size:,} decoded bytes, over the {MAX_CHUNK_BYTES:,} a reader accepts",
                member=member,
            )
        if offset != end:
            what = "overlaps the one before" if offset < end else "leaves a gap after the one before"
            raise _bad(i, f"decoded range starts at {offset}, the previous ends at {end}: it {what}", member)
        if stored_offset != stored_end:
            what = "overlaps the one before" if stored_offset < stored_end else "leaves a gap after the one before"
            raise _bad(i, f"stored at {stored_offset}, the previous ends at {stored_end}: it {what}", member)
        plane_size = size // width
        if not isinstance(planes, list) or len(planes) != width:
            raise _bad(i, f"planes must be {width} stored sizes in 1..{plane_size}", member)
        stored = 0
        for p in planes:
            if type(p) is not int or not 0 < p <= plane_size:
                raise _bad(i, f"planes must be {width} stored sizes in 1..{plane_size}", member)
            stored += p
        if not isinstance(crc, str) or _HEX8.fullmatch(crc) is None:
            raise _bad(i, "bad crc32", member)
        out.append(Chunk(label, offset, size, width, stored_offset, tuple(planes), int(crc, 16), stored))
        end, stored_end = offset + size, stored_offset + stored
    if end != entry.get("size") or stored_end != entry.get("stored_size"):
        raise FormatError(
            f"the chunks decode to {end} bytes stored in {stored_end}; the metadata says {entry.get('size')} "
            f"in {entry.get('stored_size')}",
            member=member,
        )
    return out


# --- encoding --------------------------------------------------------------------------------------


def _planes_of(data: memoryview, width: int, into: Any = None) -> list[np.ndarray[Any, Any]]:
    """The byte planes of `data` (widths 2, 4 and 8: in `into`, a flat uint8 array, where it has room)."""
    import numpy as np  # (here, not at import: `import zarchive` stays free of numpy)

    arr = np.frombuffer(data, dtype=np.uint8)
    if width == 1:
        return [arr]
    if width in (2, 4, 8):  # shifts over little-endian words: 2-5x faster than strided byte copies
        words = np.frombuffer(data, dtype=f"<u{width}")
        if into is not None and into.size >= arr.size:
            out = into[: arr.size].reshape(width, words.size)
        else:
            out = np.empty((width, words.size), dtype=np.uint8)
        np.copyto(out[0], words, casting="unsafe")  # (the cast keeps the low byte)
        for k in range(1, width):  # (shifted and cast in small blocks: no word-sized temporary)
            np.right_shift(words, 8 * k, out=out[k], casting="unsafe")
        return list(out)
    grid = arr.reshape(-1, width)
    return [np.ascontiguousarray(grid[:, k]) for k in range(width)]


def encode_chunk(data: memoryview, width: int, into: Any = None) -> tuple[list[int], list[Any]]:
    """(stored size of each plane, the stored buffers) of one chunk's decoded bytes (the planes kept
    raw are views of `into` where it has room: see _planes_of)."""
    cctx = _compressor()
    sizes: list[int] = []
    bufs: list[Any] = []
    for plane in _planes_of(data, width, into):
        n = plane.nbytes
        stored: Any = plane
        if n >= 64:
            head = plane[:PLANE_SAMPLE]
            trial = cctx.compress(head.data)
            if len(trial) <= PLANE_PAYS_RATIO * head.nbytes:
                z = trial if head.nbytes == n else cctx.compress(plane.data)
                if len(z) < n:
                    stored = z
        sizes.append(len(stored) if isinstance(stored, bytes) else n)
        bufs.append(stored)
    return sizes, bufs


@dataclass
class Piece:
    """A chunk to be written: its label, decoded offset and bytes (one or more parts' bytes), width."""

    label: str
    offset: int
    bufs: list[memoryview]
    width: int

    @property
    def size(self) -> int:
        return sum(b.nbytes for b in self.bufs)


def pieces(parts: Iterable[tuple[str | None, memoryview, int]], chunk: int = CHUNK_BYTES) -> Iterator[Piece]:
    """Cut a member's parts (label, bytes, width) into chunks: small parts of one width share a
    chunk up to `chunk` bytes; a bigger part starts a chunk and is cut into chunks of its own.
    A part whose size is not a multiple of its width is grouped as width 1."""
    current: Piece | None = None
    offset = 0
    for i, (label, buf, width) in enumerate(parts):
        name = label if label is not None else (HEADER_LABEL if i == 0 else DATA_LABEL)
        n = buf.nbytes
        if n == 0:
            continue
        if width < 1 or width > MAX_WIDTH or n % width:
            width = 1
        if current is not None and (current.width != width or current.size + n > chunk):
            yield current
            current = None
        if n <= chunk:
            if current is None:
                current = Piece(name, offset, [], width)
            current.bufs.append(buf)
        else:
            # equal chunks (2.4 MB: two of 1.2 MB, not 2 MiB + 0.3 MB), so the cores finish together
            count = _ceil_div(n, chunk)
            step = _ceil_div(_ceil_div(n, count), width) * width
            for at in range(0, n, step):
                yield Piece(name, offset + at, [buf[at : at + step]], width)
        offset += n
    if current is not None:
        yield current


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


Encoded = tuple[list[int], list[Any], int, Any]  # plane sizes, stored buffers, CRC-32, planes' memory


def _encode_piece(p: Piece, spares: deque[Any] | None = None) -> Encoded:
    data = p.bufs[0] if len(p.bufs) == 1 else memoryview(b"".join(p.bufs))
    into = None
    if spares is not None and p.width in (2, 4, 8):
        try:
            into = spares.pop()
        except IndexError:
            import numpy as np

            into = np.empty(max(CHUNK_BYTES, p.size), dtype=np.uint8)
    sizes, bufs = encode_chunk(data, p.width, into)
    crc = 0
    for b in bufs:
        crc = crc32(b, crc)
    return sizes, bufs, crc, into


def encode(parts: Iterable[Piece], *, reuse: bool = False) -> Iterator[tuple[list[Any], list[Any]]]:
    """(index row, stored buffers) per chunk, in order; chunks are compressed on every core, with at
    most two per worker in flight (memory stays bounded on any member size).

    `reuse`: the caller is done with a chunk's buffers when it asks for the next chunk, so the memory
    of its raw planes is used again for a later chunk (fresh memory for every chunk costs a page fault
    per 4 KiB, a third of the encoding's time on the worker threads)."""
    pool = executor()
    window: deque[tuple[Piece, Future[Encoded]]] = deque()
    spares: deque[Any] | None = deque() if reuse else None
    stored = 0

    def emit() -> tuple[list[Any], list[Any], Any]:
        nonlocal stored
        piece, fut = window.popleft()
        # (a chunk no worker has started yet, on a busy machine: encoded here rather than waited for)
        sizes, bufs, crc, into = _encode_piece(piece, spares) if fut.cancel() else fut.result()
        row = [piece.label, piece.offset, piece.size, piece.width, stored, sizes, crc_hex(crc)]
        stored += sum(sizes)
        return row, bufs, into

    def chunks() -> Iterator[tuple[list[Any], list[Any], Any]]:
        for p in parts:
            window.append((p, pool.submit(_encode_piece, p, spares)))
            if len(window) >= 2 * workers():
                yield emit()
        while window:
            yield emit()

    for row, bufs, into in chunks():
        yield row, bufs
        if spares is not None and into is not None:
            spares.append(into)  # (the caller has written this chunk: see `reuse`)


def pays(parts: list[tuple[str | None, memoryview, int]]) -> bool:
    """Whether the member is worth storing this way: a sample of up to SAMPLE_PER_PART bytes from
    the middle of its biggest parts (SAMPLE_TOTAL in all), encoded as chunks, shrinks to PAYS_RATIO."""
    raw = stored = 0
    for _, buf, width in sorted(parts, key=lambda p: -p[1].nbytes):
        if raw >= SAMPLE_TOTAL or buf.nbytes < 64:
            break
        w = width if 1 <= width <= MAX_WIDTH and buf.nbytes % width == 0 else 1
        n = min(SAMPLE_PER_PART, buf.nbytes) // w * w
        start = (buf.nbytes - n) // 2 // w * w
        sizes, _ = encode_chunk(buf[start : start + n], w)
        raw, stored = raw + n, stored + sum(sizes)
    return raw > 0 and stored <= PAYS_RATIO * raw
