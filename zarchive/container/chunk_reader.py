"""Reading `bgzstd` members (spec 4.6; the codec itself: byte_groups): a range of a member decoded
from the chunks that hold it, each checked by its CRC-32 first, the chunks decoded on every core."""

from __future__ import annotations

import bisect
import itertools
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import zstandard

from ..errors import FormatError, IntegrityError, UnsafeArchiveError
from .byte_groups import HEADER_LABEL, Chunk, executor
from .crc import crc32
from .fresh_memory import new_buffer, populate
from .pieces import Pieces

_LITTLE = sys.byteorder == "little"
_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_local, "dctx", None)
    if d is None:
        d = _local.dctx = zstandard.ZstdDecompressor()
    return d


def _unzstd(frame: memoryview, n: int, chunk: Chunk, member: str, path: str | None) -> bytes:
    where = f"chunk at {chunk.offset} ({chunk.label!r})"
    try:
        declared = zstandard.frame_content_size(frame)
    except zstandard.ZstdError as e:
        raise IntegrityError(f"{where}: a plane is not a zstd frame: {e}", member=member, path=path) from None
    if declared < 0:  # (the writer always declares it: a frame without is refused, never decoded)
        raise IntegrityError(f"{where}: a plane's zstd frame does not declare its size", member=member, path=path)
    if declared > n:
        raise UnsafeArchiveError(
            f"{where}: a plane declares {declared:,} decompressed bytes, its chunk {n:,} (a decompression bomb or "
            "damaged metadata)",
            member=member,
            path=path,
        )
    if declared != n:
        raise IntegrityError(f"{where}: a plane declares {declared} bytes, its chunk {n}", member=member, path=path)
    try:
        out = _decompressor().decompress(frame, max_output_size=n)
    except zstandard.ZstdError as e:
        raise IntegrityError(f"{where}: zstd data is damaged: {e}", member=member, path=path) from None
    if len(out) != n:
        raise IntegrityError(f"{where}: a plane decoded to {len(out)} bytes, not {n}", member=member, path=path)
    return out


def decode_chunk(
    chunk: Chunk, stored: memoryview, out: memoryview, *, verify: bool, member: str, path: str | None
) -> None:
    """Decode one chunk's stored bytes into `out` (its `size` bytes)."""
    if verify and crc32(stored) != chunk.crc:
        raise IntegrityError(
            f"chunk at {chunk.offset} ({chunk.label!r}) does not match its checksum (damaged file)",
            member=member,
            path=path,
        )
    import numpy as np  # (here, not at import: `import zarchive` stays free of numpy)

    width, plane_size = chunk.width, chunk.size // chunk.width
    planes: list[Any] = []
    pos = 0
    for s in chunk.planes:
        frame = stored[pos : pos + s]
        planes.append(frame if s == plane_size else _unzstd(frame, plane_size, chunk, member, path))
        pos += s
    dst = np.frombuffer(out, dtype=np.uint8)
    if width == 1:
        dst[:] = np.frombuffer(planes[0], dtype=np.uint8)
    elif width == 2 and _LITTLE:  # two shifts over 16-bit words: several times faster than strided copies
        words = dst.view(np.uint16)
        np.left_shift(np.frombuffer(planes[1], dtype=np.uint8), 8, out=words, dtype=np.uint16)
        words |= np.frombuffer(planes[0], dtype=np.uint8)
    elif width == 4 and _LITTLE:  # the same over 32-bit words (64-bit ones are slower than the copies)
        words = dst.view(np.uint32)
        np.copyto(words, np.frombuffer(planes[0], dtype=np.uint8))
        shifted = np.empty_like(words)
        for k in range(1, 4):
            np.left_shift(np.frombuffer(planes[k], dtype=np.uint8), 8 * k, out=shifted, dtype=np.uint32)
            words |= shifted
    else:
        grid = dst.reshape(-1, width)
        for k, plane in enumerate(planes):
            grid[:, k] = np.frombuffer(plane, dtype=np.uint8)


class ChunkCache:
    """The few chunks decoded last, for every member of one open archive together (so the memory it
    keeps does not grow with the number of members): reading the small tensors that share a chunk,
    one after another, decodes it once."""

    def __init__(self, capacity: int = 4) -> None:
        self.capacity = capacity
        self._chunks: OrderedDict[tuple[str, int], bytearray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int]) -> bytearray | None:
        with self._lock:
            hit = self._chunks.get(key)
            if hit is not None:
                self._chunks.move_to_end(key)
            return hit

    def put(self, key: tuple[str, int], buf: bytearray) -> None:
        with self._lock:
            self._chunks[key] = buf
            while len(self._chunks) > self.capacity:
                self._chunks.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._chunks.clear()


def _scratch(n: int) -> memoryview:
    """This thread's reusable buffer for one chunk's stored bytes (at least `n` of them): a chunk's
    stored bytes live only until it is decoded, and fresh memory for each would cost a page fault
    per 4 KiB, more than the read itself."""
    buf: bytearray | None = getattr(_local, "scratch", None)
    if buf is None or len(buf) < n:
        buf = _local.scratch = bytearray(max(n, 1 << 20))
    return memoryview(buf)[:n]


class ChunkedMember:
    """Decoded access to one `bgzstd` member: whole, or a range from the chunks that hold it.

    stored(offset, length): the member's stored bytes; stored_into(buf, offset), where the source
    copies (not maps) its bytes: fill `buf` with stored bytes from `offset`, so that each decoding
    thread reads a chunk into memory it reuses; cache: where chunks read in part are kept."""

    def __init__(
        self,
        name: str,
        chunks: list[Chunk],
        stored: Callable[[int, int], memoryview],
        *,
        verify: bool,
        cache: ChunkCache | None = None,
        stored_into: Callable[[memoryview, int], None] | None = None,
    ) -> None:
        self.name = name
        self.chunks = chunks
        self.starts = [c.offset for c in chunks]
        self.size = chunks[-1].end if chunks else 0
        self._stored = stored
        self._stored_into = stored_into
        self.verify = verify
        self._cache = cache if cache is not None else ChunkCache()

    def _stored_of(self, c: Chunk) -> memoryview:
        if self._stored_into is None:
            return self._stored(c.stored_offset, c.stored_size)
        buf = _scratch(c.stored_size)
        self._stored_into(buf, c.stored_offset)
        return buf

    def _decode(self, c: Chunk, out: memoryview, path: str | None) -> None:
        """Read chunk `c`'s stored bytes (on this thread) and decode them into `out`."""
        decode_chunk(c, self._stored_of(c), out, verify=self.verify, member=self.name, path=path)

    def _decoded(self, i: int, path: str | None) -> bytearray:
        hit = self._cache.get((self.name, i))
        if hit is not None:
            return hit
        c = self.chunks[i]
        buf = bytearray(c.size)
        self._decode(c, memoryview(buf), path)
        self._cache.put((self.name, i), buf)
        return buf

    def read(self, begin: int, end: int, *, path: str | None = None) -> memoryview:
        """Decoded bytes [begin, end) as a new, writable buffer of the caller's own."""
        if not 0 <= begin <= end <= self.size:
            raise FormatError("range outside the member", member=self.name, path=path)
        view = new_buffer(end - begin)  # (big ones: not zeroed first, since every byte is written below)
        self.read_into(begin, view, path=path)
        return view

    def read_pieces(self, *, path: str | None = None) -> Pieces:
        """The whole member decoded into pieces (container.pieces) cut between chunks that start in
        different entries: a tensor cut into chunks of its own is one piece, which it alone keeps
        alive; small tensors sharing a chunk share its piece. A header's chunk stays with what
        follows it (an .npy member, read whole, is one piece). Chunks decode on every core."""
        cut_at = [0]
        for prev, c in itertools.pairwise(self.chunks):
            if c.label != prev.label and prev.label != HEADER_LABEL:
                cut_at.append(c.offset)
        if self.size:
            cut_at.append(self.size)
        pieces = Pieces(cut_at)
        jobs = [(c, pieces.views(c.offset, c.end)[0]) for c in self.chunks]  # (each chunk: in one piece)
        self._decode_all(jobs, path)
        return pieces

    def read_into(self, begin: int, view: memoryview, *, path: str | None = None) -> None:
        """Decode bytes [begin, begin + len(view)) into `view`."""
        end = begin + view.nbytes
        if not 0 <= begin <= end <= self.size:
            raise FormatError("range outside the member", member=self.name, path=path)
        if begin == end:
            return
        first = bisect.bisect_right(self.starts, begin) - 1
        last = bisect.bisect_left(self.starts, end) - 1
        whole: list[tuple[Chunk, memoryview]] = []
        for i in range(first, last + 1):
            c = self.chunks[i]
            lo, hi = max(begin, c.offset), min(end, c.end)
            cached = self._cache.get((self.name, i))
            if cached is not None:  # (decoded for a neighbour a moment ago: the header chunk, say)
                view[lo - begin : hi - begin] = cached[lo - c.offset : hi - c.offset]
            elif lo == c.offset and hi == c.end:
                whole.append((c, view[lo - begin : hi - begin]))
            else:  # part of a chunk (a small tensor beside others): decode the chunk once, keep it a while
                view[lo - begin : hi - begin] = self._decoded(i, path)[lo - c.offset : hi - c.offset]
        self._decode_all(whole, path)

    def _decode_all(self, jobs: list[tuple[Chunk, memoryview]], path: str | None) -> None:
        def run(job: tuple[Chunk, memoryview]) -> None:
            populate(job[1])  # (usually fresh memory: faulted in on the thread that decodes into it)
            self._decode(job[0], job[1], path)  # (the read too: reads and decoding overlap on every core)

        if not jobs:
            return
        futures = [executor().submit(run, job) for job in jobs[1:]]
        try:
            run(jobs[0])  # this thread decodes too, rather than wait
        finally:
            for fut in futures:
                fut.result()  # (the first failure is raised once all have finished)

    def problems(self) -> list[str]:
        """What is wrong with each chunk (checksum, decoding), for verify: one line per bad chunk."""
        out: list[str] = []
        for c in self.chunks:
            try:
                decode_chunk(
                    c, self._stored_of(c), memoryview(bytearray(c.size)), verify=True, member=self.name, path=None
                )
            except FormatError as e:
                out.append(e.message)
        return out
