"""Checksum a whole archive's uncompressed members on several cores before a full read.

A full read touches every byte anyway; verifying member by member on one thread would make CRC-32 the
bottleneck (about 1-3 GB/s per core). zlib releases the GIL on large buffers, so big members are split
into chunks, the work is spread over a thread pool in a few batches of similar size, and chunk CRCs
are recombined with crc32_combine. Each member is checked against its own CRC, once: a member of
5,000 small tensors costs one pass, not 5,000 calls. Only when a member fails are its entry
checksums consulted, to name the damaged tensor. A full read runs the checksums while it builds
its objects (start_verifying) and returns them only once every checksum has passed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait

from ..errors import IntegrityError
from .archive_reader import ArchiveReader
from .crc import crc32, crc32_combine
from .fresh_memory import populate
from .member_verify import damaged_entries
from .pieces import RUN_BYTES, Pieces, cuts
from .source import LocalFileSource
from .thread_pools import shared_pool, worker_count

CHUNK = 16 << 20
SERIAL_BELOW = 8 << 20  # less data than this is checked on the calling thread
PREFETCH_SERIAL_BELOW = 1 << 20  # Prefetch reads less than this on the calling thread
PREFETCH_POOL = "read"
VERIFY_THREADS = 4  # chunks checked (or read, by Prefetch) at once, at most (one per usable core)


def verify_workers() -> int:
    """The threads start_verifying and Prefetch use by default: one per core this process may run
    on, up to VERIFY_THREADS (1: everything is checked on the calling thread)."""
    return worker_count(VERIFY_THREADS)


def _crc_batch(views: list[memoryview]) -> list[int]:
    return [crc32(v) for v in views]


def verify_uncompressed(reader: ArchiveReader, workers: int | None = None) -> None:
    """Check every uncompressed member; mark them checked so later reads skip the work."""
    start_verifying(reader, workers).wait()


class PendingVerification:
    """Checksums running on worker threads while the caller goes on (e.g. building the loaded
    objects, which needs no checked bytes until it hands them out). `wait()` returns when all are
    done and raises IntegrityError for the first damaged member; nothing may be handed out before.
    The members are marked checked at the start, so the work meanwhile does not check them again."""

    def __init__(
        self,
        reader: ArchiveReader,
        todo: list[str],
        chunks: list[tuple[int, memoryview]],
        crcs: list[int] | Iterator[list[int]],  # chunk CRCs, or per-batch lists still being computed
        pool: ThreadPoolExecutor | None = None,
    ) -> None:
        self._reader, self._todo, self._chunks, self._crcs, self._pool = reader, todo, chunks, crcs, pool
        self._done = False

    def wait(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            crcs = self._crcs if isinstance(self._crcs, list) else [c for batch in self._crcs for c in batch]
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
        combined: dict[int, int] = {}
        for (i, view), c in zip(self._chunks, crcs):
            combined[i] = crc32_combine(combined[i], c, view.nbytes) if i in combined else c
        for i, name in enumerate(self._todo):
            if combined.get(i, 0) != self._reader.zip.members[name].crc:
                self._reader.unmark_checked(self._todo[i:])
                raise IntegrityError(_damage(self._reader, name), member=name)


def start_verifying(
    reader: ArchiveReader, workers: int | None = None, skip: Collection[str] = ()
) -> PendingVerification:
    """Start checking every uncompressed member not checked yet, except those in `skip` (small
    archives: done at once, on this thread); see PendingVerification."""
    todo = [
        name
        for name, entry in reader.metadata["members"].items()
        if entry.get("codec") == "none"
        and name in reader.zip.members
        and not reader.is_checked(name)
        and name not in skip
    ]
    chunks: list[tuple[int, memoryview]] = []  # (index into todo, bytes)
    for i, name in enumerate(todo):
        info = reader.zip.members[name]
        for start in range(0, info.size, CHUNK):
            chunks.append((i, reader.source.view(info.data_offset + start, min(CHUNK, info.size - start))))
    total = sum(v.nbytes for _, v in chunks)
    workers = workers or verify_workers()
    views = [v for _, v in chunks]
    if total < SERIAL_BELOW or workers == 1:
        pending = PendingVerification(reader, todo, chunks, _crc_batch(views))
    else:
        batches: list[list[memoryview]] = []
        target, current, filled = total / (workers * 4), [], 0
        for v in views:
            current.append(v)
            filled += v.nbytes
            if filled >= target:
                batches.append(current)
                current, filled = [], 0
        if current:
            batches.append(current)
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zarchive-verify")
        pending = PendingVerification(reader, todo, chunks, pool.map(_crc_batch, batches), pool)
    reader.mark_checked(todo)
    return pending


def _damage(reader: ArchiveReader, name: str) -> str:
    """What is damaged in a member that failed its checksum: the first bad entry, if entries say."""
    damaged = damaged_entries(reader, name, reader.zip.view(name))
    if damaged:
        return f"entry {damaged[0]!r} does not match its checksum (damaged file)"
    return "member bytes do not match the recorded checksum (damaged file)"


class Prefetch:
    """A full read of a local file that is not mapped: every uncompressed member is read whole into
    memory of its own on worker threads (pread releases the GIL), each chunk checksummed as it lands
    (while it is still in the CPU's cache), while the caller builds the objects. `member(name)` waits
    for one member's chunks and checks it against its own CRC: the reader slices every value of the
    member from that copy, so each byte is read from the file once and checked once. The copy is
    held in pieces (container.pieces): each big value in memory of its own, which it alone keeps."""

    def __init__(
        self, reader: ArchiveReader, source: LocalFileSource, workers: int | None = None, skip: Collection[str] = ()
    ) -> None:
        self._reader, self._verify = reader, reader.verify
        todo = [
            name
            for name, entry in reader.metadata["members"].items()
            if entry.get("codec") == "none"
            and name in reader.zip.members
            and not reader.is_checked(name)
            and name not in skip
        ]
        total = sum(reader.zip.members[name].size for name in todo)
        workers = workers or verify_workers()
        # the process's "read" pool (kept between reads: no threads to start, so a member of a few MB
        # is read beside the caller too, off the path to its first object), or its own threads where
        # the caller asks for another count
        self._pool: ThreadPoolExecutor | None = None
        self._own_pool = workers != verify_workers()
        if total >= PREFETCH_SERIAL_BELOW and workers > 1:
            self._pool = (
                ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zarchive-read")
                if self._own_pool
                else shared_pool(PREFETCH_POOL, workers)
            )
        self._members: dict[str, tuple[Pieces, list[tuple[int, Future[int] | int]]]] = {}
        self._futures: list[Future[int]] = []
        self._done: dict[str, memoryview | Pieces] = {}
        try:
            for name in todo:
                info = reader.zip.members[name]
                # (a member of at most one run is one piece: no need to look at its entries)
                pieces = Pieces(cuts(info.size, reader.entries.ranges(name) if info.size > RUN_BYTES else ()))
                parts: list[tuple[int, Future[int] | int]] = []
                for start in range(0, info.size, CHUNK):
                    n = min(CHUNK, info.size - start)
                    views = pieces.views(start, start + n)
                    at = info.data_offset + start
                    if self._pool is None:
                        parts.append((n, self._chunk(source, views, at)))
                    else:
                        future = self._pool.submit(self._chunk, source, views, at)
                        self._futures.append(future)
                        parts.append((n, future))
                self._members[name] = (pieces, parts)
        except BaseException:
            self.close()
            raise

    def _chunk(self, source: LocalFileSource, views: list[memoryview], at: int) -> int:
        """Read one chunk of a member into the pieces' views that hold it; its CRC-32."""
        crc = 0
        for view in views:
            populate(view)  # (fresh memory: faulted in here, on the thread that fills it)
            source.read_into(view, at)
            if self._verify:
                crc = crc32(view, crc)
            at += view.nbytes
        return crc

    def member(self, name: str) -> memoryview | Pieces | None:
        """Member `name`'s bytes, read and checked; None when this prefetch does not hold it."""
        done = self._done.get(name)
        if done is not None:
            return done
        got = self._members.pop(name, None)
        if got is None:
            return None
        buf, parts = got
        crc = 0
        for i, (n, part) in enumerate(parts):
            c = part.result() if isinstance(part, Future) else part
            crc = crc32_combine(crc, c, n) if i else c
        if self._verify and crc != self._reader.zip.members[name].crc:
            damaged = damaged_entries(self._reader, name, buf)
            what = f"entry {damaged[0]!r} does not match its checksum" if damaged else "member bytes do not match"
            raise IntegrityError(f"{what} (damaged file)", member=name)
        self._reader.mark_checked([name])
        whole = buf.buffers[0] if len(buf.buffers) == 1 else buf  # (one piece: slicing it is cheaper)
        self._done[name] = whole
        return whole

    def finish(self) -> None:
        """Wait for and check every member not asked for yet (a full read returns only once all passed)."""
        for name in list(self._members):
            self.member(name)

    def close(self) -> None:
        """Drop what is left (after a failure: pending reads are cancelled) and free the threads."""
        for _, parts in self._members.values():
            for _, part in parts:
                if isinstance(part, Future):
                    part.cancel()
        if self._pool is not None and self._own_pool:
            self._pool.shutdown(wait=True)
        elif self._pool is not None:  # (the shared pool stays: wait for this prefetch's reads only)
            wait(self._futures)
        self._futures.clear()
        self._members.clear()
        self._done.clear()
