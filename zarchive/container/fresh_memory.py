"""Memory for the bytes a read hands out: `new_buffer` makes it, `populate` faults it in.

A full read of a big state dict spends much of its time not copying but taking page faults: every
4 KiB of fresh anonymous memory is a trap into the kernel on first write (122,000 of them for the
498 MB "big" benchmark state dict). Two things keep that down:
- `new_buffer` takes big buffers from the C library's malloc, like torch and numpy: memory the
  process freed (the tensors of an earlier read) is handed out again without faulting anew. Before,
  every buffer was a fresh anonymous mapping, so reads in a loop faulted in every page every time.
- `populate`: Linux 5.14+ faults a whole range in with one system call (`madvise(
  MADV_POPULATE_WRITE)`), which skips the trap per page. Readers call it on each part of a buffer
  right before the thread that fills it writes it, so the work stays spread over those threads. It
  changes no byte and is only a hint: where the call does not exist (other systems, older kernels)
  it does nothing, and pages fault in one by one.
Measured on the 2-core dev VM (2026-11-27, medians of 8 in a loop of reads): a default full read of
"big" took 0.150 s with fresh mappings, 0.127 s populated, 0.095 s from malloc; a compressed one
0.27, 0.25 and 0.22 s; a lazy fetch of one 2.4 MB tensor (open, fetch) 1.7 ms, then 1.2 ms.
"""

from __future__ import annotations

import errno
import mmap
import sys
import weakref
from typing import Any

MALLOC_FROM = 1 << 20  # buffers this big come from malloc (no zero-filling pass)
POPULATE_FROM = 64 << 10  # smaller parts are not worth the system call
_PAGE = mmap.PAGESIZE
_MADV_POPULATE_WRITE = 23  # linux/mman.h (not in Python's mmap module before 3.14)


def new_buffer(length: int) -> memoryview:
    """Writable memory of our own, not zero-filled first where it is big.

    Big buffers come from the C library's malloc (freed when the last view of them goes): memory a
    process freed is reused, as torch and numpy reuse it, instead of fresh pages that fault in
    every time (reading 9 MB into a new buffer, in a loop: 0.9 ms against 2.5 ms). Where there is
    no such C library (Windows), a bytearray, zero-filled first."""
    if length < MALLOC_FROM:
        return memoryview(bytearray(length))
    lib = _libc()
    if lib is None:
        return memoryview(bytearray(length))
    # Not numpy.empty: numpy asks for huge pages on big arrays, and on the dev VM (Firecracker, THP
    # on madvise) a 2 MB fault was far dearer than 512 small ones (full reads of "big" took 0.2-0.7 s
    # with huge pages, 0.14 s without, 2026-11-27). Not a bytearray: it zero-fills every byte first.
    import ctypes

    ptr = lib.malloc(length)
    if not ptr:
        raise MemoryError(f"cannot allocate {length:,} bytes")
    block = (ctypes.c_char * length).from_address(ptr)
    weakref.finalize(block, lib.free, ptr).atexit = False  # (at exit the OS takes it back)
    return memoryview(block).cast("B")


_loaded: list[Any] = []  # the C library, malloc, free, madvise and mincore typed ([None] where there is none)
_populate_works: list[bool] = [sys.platform.startswith("linux")]


def _libc() -> Any:
    if not _loaded:
        lib: Any = None
        if sys.platform.startswith("linux") or sys.platform == "darwin":
            try:
                import ctypes  # (here: only readers of big buffers need it)

                lib = ctypes.CDLL(None, use_errno=True)
                lib.malloc.argtypes, lib.malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
                lib.free.argtypes, lib.free.restype = [ctypes.c_void_p], None
                lib.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                lib.madvise.restype = ctypes.c_int
                lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
                lib.mincore.restype = ctypes.c_int
            except (OSError, AttributeError):
                lib = None
        _loaded.append(lib)
    return _loaded[0]


def populate(buf: memoryview) -> None:
    """Fault in the whole pages of writable `buf` with one system call, ahead of the writes that
    fill it. Pages that only partly belong to `buf` are left alone, so no memory outside it is
    touched. A hint only: it does nothing for small buffers or where the kernel cannot do it."""
    if buf.nbytes < POPULATE_FROM or buf.readonly:
        return
    lib = _libc() if _populate_works[0] else None
    if lib is None:
        return
    import ctypes

    try:
        addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    except (TypeError, ValueError):  # (not a plain contiguous buffer)
        return
    lo = -(-addr // _PAGE) * _PAGE
    hi = (addr + buf.nbytes) // _PAGE * _PAGE
    if hi - lo < _PAGE or _resident(lib, lo, hi):
        return
    if lib.madvise(lo, hi - lo, _MADV_POPULATE_WRITE) != 0 and ctypes.get_errno() == errno.EINVAL:
        _populate_works[0] = False  # a kernel before 5.14: do not ask again


def _resident(lib: Any, lo: int, hi: int) -> bool:
    """Whether the first and the last page of [lo, hi) are in memory already: memory malloc hands
    out again usually is, and walking its pages would cost 17 us a MiB for nothing."""
    import ctypes

    vec = ctypes.create_string_buffer(1)
    for page in (lo, hi - _PAGE):
        if lib.mincore(page, _PAGE, vec) != 0 or not vec.raw[0] & 1:
            return False
    return True
