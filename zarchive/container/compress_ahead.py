"""Compresses a save's zstd members on every core, ahead of the writer.

The writer writes members one after another. Left alone it would compress each member in turn and
write it while the other cores idle. Here the members still to come are compressed on the shared
worker pool (thread_pools; zstandard releases the GIL) while the writer writes the ones before
them: a bounded window ahead (AHEAD_MEMBERS members holding at most AHEAD_BYTES decoded bytes), so the
memory a save holds stays bounded whatever it writes. A member bigger than AHEAD_MAX_MEMBER, or of
unknown size, is left to the writer, which streams it through zstd's own worker threads. A member no
worker has started by the time the writer needs it is compressed by the writer itself: on a machine
whose cores are busy with other work, waiting for a worker to be scheduled would only add to the save.

Each member is still one zstd frame made exactly as the streaming path makes it (codecs.compressor:
the same level, declared content size, checksum and thread rule), so a file's bytes do not depend on
which path compressed a member.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import codecs
from .crc import crc32
from .thread_pools import shared_pool

if TYPE_CHECKING:
    from typing import Self

POOL = "zstd"  # (its own pool: producing a member's bytes may wait on the bgzstd pool's chunks)
AHEAD_MEMBERS = 8  # members compressed or queued ahead of the writer, at most
AHEAD_BYTES = 96 << 20  # their decoded bytes, at most (plus the one member the window starts with)
AHEAD_MAX_MEMBER = 64 << 20  # bigger members are streamed by the writer (zstd's threads, no copy held)

Parts = Callable[[], Iterable[tuple[str | None, memoryview]]]


@dataclass
class Frame:
    """A member compressed into one zstd frame, held in memory until the writer writes it."""

    chunks: list[bytes]
    size: int  # decoded bytes
    content_crc: int  # CRC-32 of the decoded bytes
    crc: int  # CRC-32 of the frame (the zip entry's)
    stored_size: int


def compress_frame(parts: Parts, level: int) -> Frame:
    """One zstd frame of the concatenated parts, with the CRCs of what goes in and what comes out."""
    bufs = [_flat(buf) for _, buf in parts()]
    total = sum(b.nbytes for b in bufs)
    cobj = codecs.compressor(level, total).compressobj(size=total)
    chunks: list[bytes] = []
    content_crc = 0
    for b in bufs:
        content_crc = crc32(b, content_crc)
        out = cobj.compress(b)
        if out:
            chunks.append(out)
    chunks.append(cobj.flush())  # ends the frame (and only this one frame)
    crc = stored = 0
    for c in chunks:
        crc = crc32(c, crc)
        stored += len(c)
    return Frame(chunks, total, content_crc, crc, stored)


def _flat(buf: memoryview) -> memoryview:
    buf = memoryview(buf)
    return buf.cast("B") if buf.format != "B" or buf.ndim != 1 else buf


@dataclass
class Job:
    """A member the window may compress: its parts, its decoded size (None: unknown) and level."""

    parts: Parts
    size: int | None
    level: int


class CompressAhead:
    """Compresses `jobs` (None where the writer handles a member itself) in order on the worker pool,
    a bounded window ahead of `take`. Use as a context manager: leaving it cancels what has not
    started and waits for what has, so no work outlives a failed save."""

    def __init__(self, jobs: Sequence[Job | None]) -> None:
        self._jobs = list(jobs)
        self._next = 0  # the first job not yet submitted
        self._window: deque[tuple[int, int, Future[Frame]]] = deque()  # (index, size, future)
        self._bytes = 0

    def __enter__(self) -> Self:
        self._fill(0)
        return self

    def __exit__(self, *exc: object) -> None:
        for _, _, fut in self._window:
            fut.cancel()
        for _, _, fut in self._window:
            if not fut.cancelled():
                fut.exception()  # waits; a failure there was (or will be) reported by take()
        self._window.clear()

    def _fill(self, at: int) -> None:
        pool = shared_pool(POOL)
        self._next = max(self._next, at)
        while self._next < len(self._jobs) and len(self._window) < AHEAD_MEMBERS:
            job = self._jobs[self._next]
            if job is None or job.size is None or job.size > AHEAD_MAX_MEMBER:
                self._next += 1
                continue
            if self._window and self._bytes + job.size > AHEAD_BYTES:
                break
            self._window.append((self._next, job.size, pool.submit(compress_frame, job.parts, job.level)))
            self._bytes += job.size
            self._next += 1

    def take(self, index: int) -> Frame | None:
        """The frame of member `index` (members are taken in order), or None: the writer streams it.
        Raises what compressing it raised (producing its parts, for one)."""
        while self._window and self._window[0][0] < index:  # (only after a failure: skip what is stale)
            _, size, stale = self._window.popleft()
            stale.cancel()
            self._bytes -= size
        mine: Future[Frame] | None = None
        if self._window and self._window[0][0] == index:
            _, size, mine = self._window.popleft()
            self._bytes -= size
        self._fill(index + 1)  # keep the workers busy while this one finishes and is written
        if mine is None:
            return None
        if mine.cancel():  # no worker has started it (a busy machine): the writer does it, not wait
            job = self._jobs[index]
            assert job is not None
            return compress_frame(job.parts, job.level)
        return mine.result()
