"""A full read decompresses its compressed members ahead, on worker threads.

zstd and the CRC release the GIL, so while the caller builds objects from one member (turning a text
column into Python strings holds the GIL), the next members are decompressed and verified on the
other cores. `ArchiveReader.member_bytes` waits for a member's future instead of decoding it again;
errors surface there, as they would have. Compressed weights (`bgzstd` members) are decoded whole
the same way, their chunks on every core, into one buffer per tensor that has chunks of its own
(container.pieces), and each tensor read is a view of its buffer. Only the members the read's plan
needs are decoded (what max_read_bytes was checked against), in the order the plan met them, which
is the order the read asks for them.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from .archive_reader import ArchiveReader
from .byte_groups import CODEC as CHUNKED
from .thread_pools import shared_pool, worker_count

AHEAD_ABOVE = 4 << 20  # compressed members smaller than this in all are decoded on the calling thread
DECODE_THREADS = 4  # members decoded at once, at most (one per usable core)
POOL = "decode"  # (its own pool: a bgzstd member's decode waits on the chunks' pool)


def decode_workers() -> int:
    """The threads a DecodeAhead uses by default: one per core this process may run on, up to
    DECODE_THREADS (1: members are decoded on the calling thread, as the read asks for them)."""
    return worker_count(DECODE_THREADS)


class DecodeAhead:
    """Decode `planned` (the members a read's plan needs, in the order it needs them: only what the
    plan counted against max_read_bytes) ahead of the read."""

    def __init__(
        self, reader: ArchiveReader, planned: list[str], workers: int | None = None, min_bytes: int | None = None
    ) -> None:
        self._reader = reader
        members = reader.metadata["members"]
        todo = [
            name
            for name in planned
            if name in reader.zip.members
            and isinstance(members.get(name), dict)
            and members[name].get("codec") in ("zstd", CHUNKED)
            and members[name].get("size", 0) <= reader.max_decompressed
            and name not in reader.decoding
            and not reader.is_decoded(name)
        ]
        workers = workers or decode_workers()
        total = sum(reader.zip.members[name].size for name in todo)
        self._futures: list[Future[Any]] = []
        if todo and workers > 1 and total >= (AHEAD_ABOVE if min_bytes is None else min_bytes):
            # the process's decode pool (decode_workers() threads, kept between reads: starting
            # threads for each read cost a few ms on a busy machine), or threads of this read's own
            # where the caller asks for another count
            own = (
                ThreadPoolExecutor(workers, thread_name_prefix="zarchive-decode")
                if workers != decode_workers()
                else None
            )
            pool = own or shared_pool(POOL, decode_workers())
            for name in todo:
                # a zstd member is decompressed whole; a bgzstd one (compressed weights) is decoded
                # whole too, its chunks on every core, into pieces that its tensors are views of
                decode = reader.decode_chunked if members[name]["codec"] == CHUNKED else reader.decode
                future: Future[Any] = pool.submit(decode, name)
                reader.decoding[name] = future
                self._futures.append(future)
            if own is not None:
                own.shutdown(wait=False)  # (its threads end once its jobs are done or cancelled)

    def close(self) -> None:
        """Cancel what was not asked for (a failed or lazy-ending read) and wait for what is running:
        no worker touches the reader once this returns."""
        for future in self._reader.decoding.values():
            future.cancel()
        self._reader.decoding.clear()
        wait(self._futures)
        self._futures.clear()
