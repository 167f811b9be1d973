"""Fresh read buffers and `populate`, which faults their pages in with one system call."""

from __future__ import annotations

import mmap
import os
import resource
import sys

import numpy as np
import pytest

from zarchive.container.fresh_memory import MALLOC_FROM, POPULATE_FROM, new_buffer, populate

MIB = 1 << 20


def _kernel_at_least(major: int, minor: int) -> bool:
    try:
        parts = os.uname().release.split(".")
        return (int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)) >= (major, minor)
    except (ValueError, IndexError):
        return False


needs_populate = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _kernel_at_least(5, 14),
    reason="MADV_POPULATE_WRITE needs Linux 5.14+",
)


def _fresh(n: int) -> memoryview:
    """Pages never touched (new_buffer may hand out memory the process freed before)."""
    return memoryview(mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE))


def _faults_writing(buf: memoryview) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    np.frombuffer(buf, dtype=np.uint8).fill(7)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_new_buffer_is_writable_memory_of_its_own_at_every_size() -> None:
    bufs = [new_buffer(n) for n in (0, 1, POPULATE_FROM, MALLOC_FROM - 1, MALLOC_FROM, 3 * MIB + 5)]
    for i, buf in enumerate(bufs):
        assert buf.format == "B" and buf.c_contiguous and not buf.readonly
        arr = np.frombuffer(buf, dtype=np.uint8)
        arr[:] = i  # (big ones are not zero-filled first: every reader writes every byte)
    for i, buf in enumerate(bufs):
        assert (np.frombuffer(buf, dtype=np.uint8) == i).all()  # no two share memory
    assert bufs[1].nbytes == 1 and bufs[-1].nbytes == 3 * MIB + 5


def test_big_buffers_are_freed_with_their_last_view() -> None:
    import torch

    base = _rss_bytes()
    for _ in range(20):  # 20 x 64 MB: would need 1.3 GB if nothing were freed
        buf = new_buffer(64 * MIB)
        t = torch.frombuffer(buf[MIB:], dtype=torch.uint8)
        del buf  # the tensor still holds the memory
        t.fill_(1)
        assert int(t[-1]) == 1
        del t
    assert _rss_bytes() - base < 300 * MIB


def _rss_bytes() -> int:
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/statm")
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@needs_populate
def test_populate_faults_the_pages_in_ahead_of_the_writes() -> None:
    control = _fresh(16 * MIB)
    if _faults_writing(control) < 16 * MIB // os.sysconf("SC_PAGE_SIZE") // 2:
        pytest.skip("fresh memory arrives in huge pages here (THP 'always'): few faults to save")
    buf = _fresh(16 * MIB)
    populate(buf)
    assert _faults_writing(buf) < 64


@needs_populate
def test_populate_changes_no_byte_and_stays_inside_its_buffer() -> None:
    buf = _fresh(8 * MIB)
    arr = np.frombuffer(buf, dtype=np.uint8)
    arr[:] = np.arange(arr.size, dtype=np.uint64).astype(np.uint8)
    expect = arr.copy()
    populate(buf[4097 : 6 * MIB - 3])  # unaligned ends: only the whole pages inside are touched
    assert np.array_equal(arr, expect)
    populate(buf)  # already resident: a no-op
    assert np.array_equal(arr, expect)


def test_populate_ignores_what_it_cannot_or_need_not_do() -> None:
    populate(memoryview(b"x" * (POPULATE_FROM + 1)))  # read-only: left alone
    small = memoryview(bytearray(10))
    populate(small)
    assert bytes(small) == bytes(10)
    populate(memoryview(bytearray(2 * POPULATE_FROM)).cast("I"))  # another format: same memory, fine
    populate(new_buffer(2 * MIB)[::2])  # not contiguous: left alone
