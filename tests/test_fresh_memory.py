"""Fresh read buffers and `populate`, which faults their pages in with one system call."""

from __future__ import annotations

import os
import resource
import sys

import numpy as np
import pytest

from zarchive.container.fresh_memory import COPY_MMAP_FROM, POPULATE_FROM, _madvise, new_buffer, populate

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


def _faults_writing(buf: memoryview) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    np.frombuffer(buf, dtype=np.uint8).fill(7)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_new_buffer_is_writable_and_zero_at_every_size() -> None:
    for n in (0, 1, POPULATE_FROM, COPY_MMAP_FROM - 1, COPY_MMAP_FROM, 3 * MIB + 5):
        buf = new_buffer(n)
        assert buf.nbytes == n and not buf.readonly
        arr = np.frombuffer(buf, dtype=np.uint8)
        assert not arr.any()  # fresh pages read as zeros
        if n:
            arr[-1] = 1
            assert buf[-1] == 1


@needs_populate
def test_populate_faults_the_pages_in_ahead_of_the_writes() -> None:
    assert _madvise() is not None
    control = new_buffer(16 * MIB)
    if _faults_writing(control) < 16 * MIB // os.sysconf("SC_PAGE_SIZE") // 2:
        pytest.skip("fresh memory arrives in huge pages here (THP 'always'): few faults to save")
    buf = new_buffer(16 * MIB)
    populate(buf)
    assert _faults_writing(buf) < 64


@needs_populate
def test_populate_changes_no_byte_and_stays_inside_its_buffer() -> None:
    buf = new_buffer(8 * MIB)
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
