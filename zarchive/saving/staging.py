"""Capture: copy the bytes a save will write into one host buffer, so the caller may change its
tensors and arrays while the archive is written in the background (see async_save).

The buffer is reused from save to save and grows to the largest capture; there is one per process and
one capture holds it until its archive is written, so host memory for saves in flight stays at one
copy of the largest checkpoint's data. When CUDA is available the buffer is pinned memory and tensors
on a GPU are copied into it directly (MemberPlan.sources), without a pageable copy in between.
Immutable bytes (headers, encoded `.jsonl` text) are not copied.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..container.archive_writer import MemberPlan, Part
from ..container.thread_pools import worker_count

__all__ = ["Lease", "StagingBuffer", "copy_workers", "staging_buffer"]

_ALIGN = 64  # every staged part starts on a 64-byte boundary (aligned copies)
_GROW = 1 << 20  # the buffer grows in whole MiB
_PARALLEL_FROM = 64 << 20  # captures of this many bytes or more copy on several threads
_PIECE = 16 << 20  # in pieces of this size
_MAX_COPY_THREADS = 8


class Lease:
    """A capture's hold on the buffer: released once its archive is written (or the save failed)."""

    def __init__(self, release: Callable[[], None]) -> None:
        self._release: Callable[[], None] | None = release

    def release(self) -> None:
        if self._release is not None:
            release, self._release = self._release, None
            release()


class StagingBuffer:
    """One reusable host buffer; `capture` waits while an earlier capture still holds it."""

    def __init__(self) -> None:
        self._free = threading.Lock()  # held from a capture until its lease is released
        self._host: np.ndarray | None = None  # uint8
        self._pinned: Any = None  # the same memory as a torch tensor, when it is pinned
        self.allocations = 0  # how many times a buffer was allocated (it is reused when big enough)

    @property
    def nbytes(self) -> int:
        """The size of the buffer now (0 before the first capture and after `clear`)."""
        return 0 if self._host is None else int(self._host.nbytes)

    @property
    def busy(self) -> bool:
        """Whether a capture holds the buffer (its archive is being written)."""
        return self._free.locked()

    @property
    def pinned(self) -> bool:
        return self._pinned is not None

    def clear(self) -> None:
        """Free the buffer (after the capture holding it, if any, is released)."""
        with self._free:
            self._host = self._pinned = None

    def capture(self, members: list[MemberPlan]) -> Lease:
        """Copy each member's bytes into the buffer and point the member's `parts` at the copies.

        Blocks while the buffer is held by an earlier capture whose archive is being written. Every
        copy is complete (GPU copies synchronized) when this returns."""
        self._free.acquire()
        try:
            planned = [(m, list(m.sources() if m.sources is not None else m.parts())) for m in members]
            total = sum(_padded(_nbytes(buf)) for _, parts in planned for _, buf in parts if _needs_copy(buf))
            on_device = any(not isinstance(buf, memoryview) for _, parts in planned for _, buf in parts)
            self._reserve(total, pinned=on_device)
            offset = 0
            devices: set[Any] = set()
            host_copies: list[tuple[np.ndarray, np.ndarray]] = []
            for m, parts in planned:
                staged: list[Part] = []
                for label, buf in parts:
                    if not _needs_copy(buf):
                        staged.append((label, _flat(buf)))
                        continue
                    n = _nbytes(buf)
                    staged.append((label, self._copy(buf, offset, n, devices, host_copies)))
                    offset += _padded(n)
                m.parts = _fixed(staged)
                m.sources = None
            _copy_all(host_copies)
            _synchronize(devices)
        except BaseException:
            self._free.release()
            raise
        return Lease(self._free.release)

    def _reserve(self, total: int, *, pinned: bool) -> None:
        """A buffer of `total` bytes or more; pinned when GPU tensors are to be copied (and CUDA is there)."""
        repin = pinned and self._pinned is None and _torch_with_cuda() is not None
        if self._host is not None and self._host.nbytes >= total and not repin:
            return
        size = -(-max(total, 1) // _GROW) * _GROW
        self.allocations += 1
        self._host = self._pinned = None  # the old buffer is freed before the bigger one is made
        torch = _torch_with_cuda()
        if torch is not None:
            self._pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True)
            self._host = self._pinned.numpy()
        else:
            self._host = np.empty(size, dtype=np.uint8)

    def _copy(
        self, buf: Any, offset: int, n: int, devices: set[Any], host_copies: list[tuple[np.ndarray, np.ndarray]]
    ) -> memoryview:
        """Where `buf` goes in the buffer: a GPU copy is started now, a host copy is queued."""
        assert self._host is not None
        dst = self._host[offset : offset + n]
        if isinstance(buf, memoryview):
            host_copies.append((dst, np.frombuffer(_flat(buf), dtype=np.uint8)))
        elif self._pinned is not None:  # a flat uint8 tensor on an accelerator (MemberPlan.sources)
            self._pinned[offset : offset + n].copy_(buf, non_blocking=True)
            devices.add(buf.device)
        else:  # an accelerator without CUDA's pinned memory (e.g. MPS): through pageable memory
            np.copyto(dst, buf.cpu().numpy())
        return memoryview(dst)  # type: ignore[arg-type]  # numpy's stubs: no __buffer__ before 3.12


def copy_workers() -> int:
    """The threads a big capture copies on: one per core this process may run on, up to 8 (1: it
    copies on the calling thread)."""
    return worker_count(_MAX_COPY_THREADS)


def _copy_all(copies: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """Run the host copies, on several threads when there is much to copy (numpy copies without the
    GIL; one thread's memcpy does not reach the memory bandwidth of a big machine)."""
    total = sum(dst.nbytes for dst, _ in copies)
    workers = copy_workers()
    if workers < 2 or total < _PARALLEL_FROM:
        for dst, src in copies:
            np.copyto(dst, src)
        return
    pieces = [(dst[i : i + _PIECE], src[i : i + _PIECE]) for dst, src in copies for i in range(0, dst.nbytes, _PIECE)]
    list(_copy_pool(workers).map(lambda pair: np.copyto(*pair), pieces))


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _copy_pool(workers: int) -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zarchive-stage")
        return _pool


def _fixed(parts: list[Part]) -> Callable[[], Iterable[Part]]:
    return lambda: parts


def _flat(buf: memoryview) -> memoryview:
    return buf if buf.format == "B" and buf.ndim == 1 else buf.cast("B")


def _nbytes(buf: Any) -> int:
    return int(buf.nbytes) if isinstance(buf, memoryview) else int(buf.numel())


def _needs_copy(buf: Any) -> bool:
    """Whether the bytes could change after the capture returns (immutable `bytes` cannot)."""
    return not (isinstance(buf, memoryview) and isinstance(buf.obj, bytes)) and _nbytes(buf) > 0


def _padded(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _torch_with_cuda() -> Any:
    """torch, when it is imported already (a save of tensors imported it) and CUDA is usable."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return torch


def _synchronize(devices: set[Any]) -> None:
    if not devices:
        return
    torch = sys.modules["torch"]
    for device in devices:
        torch.cuda.synchronize(device)


_BUFFER = StagingBuffer()


def staging_buffer() -> StagingBuffer:
    """The process's staging buffer (`.nbytes` shows its size; `.clear()` frees it)."""
    return _BUFFER
