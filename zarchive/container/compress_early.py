"""Compresses a save's members while the rest of its object tree is still being walked.

A save has two phases: the handlers walk the object (planning members, on the calling thread), then
the writer writes them. Some walks are long work for that one thread, which holds the GIL: a text
column of a million Python strings is factorized into a dictionary one object at a time (~0.1 s).
The members planned before then (the frame's numeric columns) are ready, but left alone they are
compressed only once the writer starts. `EarlyCompression.offer` takes each member as it is planned
and, where it may be compressed, tries and compresses it on the shared zstd workers at once
(zstandard releases the GIL), so that work is done by the time the walk ends.

Nothing about the file changes: the codec is decided by the same trial on the same sample as
member_plan.choose_codecs makes, and each frame is made as the writer makes it
(compress_ahead.compress_frame), so the bytes are the same whichever path compressed a member. What
is compressed early is bounded (EARLY_BYTES of decoded bytes, members up to AHEAD_MAX_MEMBER: the rest
take the usual path), and it is off where a member's bytes may still change after it is planned:
save_async copies them into its staging buffer after the walk, so it plans without this.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future

from . import codecs
from .budget import holds_json
from .compress_ahead import AHEAD_BYTES, AHEAD_MAX_MEMBER, POOL, Frame, compress_frame
from .member_plan import HEADER_LABEL, MemberPlan, Part
from .thread_pools import shared_pool, usable_cores

EARLY_BYTES = AHEAD_BYTES  # decoded bytes compressed ahead of the writer during one walk, at most


class EarlyCompression:
    """Per save: `offer` each member as it is planned; `cancel` if the save fails before writing.

    The walk keeps one core busy, so while it goes on members are compressed on the others only: at
    most one fewer at a time than there are usable cores (none on one core), each lane taking the next
    member when its last is done (on 2 cores, two workers beside the walk slowed it by as much as they
    saved). Once the walk is done (`walk_done`), the members still waiting get every core."""

    def __init__(self, level: int, *, limit: int = EARLY_BYTES) -> None:
        self._level = level
        self._limit = limit  # decoded bytes taken, at most
        self._bytes = 0
        self._futures: list[Future[Frame | None]] = []
        self._walk_lanes = usable_cores() - 1  # lanes while the walk goes on
        self._lanes = self._walk_lanes
        self._lock = threading.Lock()
        self._running = 0
        self._waiting: deque[tuple[Future[Frame | None], list[Part], bool]] = deque()

    def offer(self, plan: MemberPlan) -> None:
        """Start trying and compressing `plan` on the workers, where it may be compressed and fits the
        bound; otherwise leave it to choose_codecs and the writer. Never raises: a member whose bytes
        cannot be produced now fails later, on the usual path, with the usual error."""
        if plan.compress not in ("try", "always") or holds_json(plan.base_name):
            return  # (JSON members are tallied against the reader's JSON budget as they are written)
        try:
            parts = [(label, _flat(buf)) for label, buf in plan.parts()]
        except Exception:  # noqa: BLE001 - see the docstring
            return
        size = sum(buf.nbytes for _, buf in parts)
        if (
            self._walk_lanes < 1
            or size > min(AHEAD_MAX_MEMBER, codecs.DEFAULT_MAX_DECOMPRESSED)
            or self._bytes + size > self._limit
        ):
            return
        self._bytes += size
        plan.size = size
        fut: Future[Frame | None] = Future()
        plan.early = fut
        self._futures.append(fut)
        with self._lock:
            self._waiting.append((fut, parts, plan.compress == "try"))
            start = self._running < self._lanes
            if start:
                self._running += 1
        if start:
            shared_pool(POOL).submit(self._lane)

    def _lane(self) -> None:
        """Compress waiting members one after another until none is left."""
        while True:
            with self._lock:
                if not self._waiting:
                    self._running -= 1
                    return
                fut, parts, trial = self._waiting.popleft()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(_try_and_compress(parts, trial, self._level))
            except BaseException as e:  # noqa: BLE001 - the future carries it to choose_codecs
                fut.set_exception(e)

    def walk_done(self) -> None:
        """The walk is over: the members still waiting are compressed on every core (no core is left
        to the walk now), as the writer's window would compress them."""
        with self._lock:
            self._lanes = usable_cores()
            extra = max(0, min(self._lanes, len(self._waiting)) - self._running)
            self._running += extra
        for _ in range(extra):
            shared_pool(POOL).submit(self._lane)

    def cancel(self) -> None:
        """Drop what no lane has started (the save failed while planning)."""
        for fut in self._futures:
            fut.cancel()


def _try_and_compress(parts: list[Part], trial: bool, level: int) -> Frame | None:
    """The member's frame, or None where the trial (member_plan's, on the same sample) says zstd does
    not pay."""
    if trial and not codecs.worth_compressing(
        codecs.take_sample(b for label, b in parts if label != HEADER_LABEL), level
    ):
        return None
    return compress_frame(lambda: parts, level)


def _flat(buf: memoryview) -> memoryview:
    buf = memoryview(buf)
    return buf.cast("B") if buf.format != "B" or buf.ndim != 1 else buf
