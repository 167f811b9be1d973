"""Fresh memory for the bytes a read hands out: `new_buffer` makes it, `populate` faults it in.

A full read of a big state dict spends much of its time not copying but taking page faults: every
4 KiB of fresh anonymous memory is a trap into the kernel on first write (122,000 of them for the
498 MB "big" benchmark state dict). Linux 5.14+ can fault a whole range in with one system call
(`madvise(MADV_POPULATE_WRITE)`), which skips the trap per page. Readers call `populate` on each
part of a fresh buffer right before the thread that fills it writes it, so the work stays spread
over the threads that read. Measured on the 2-core dev VM (2026-11-27, medians of 8): a default full
read of "big" took 0.127 s with it against 0.150 s without, and a compressed one 0.25 s against 0.27 s.

`populate` changes no byte and is only a hint: where the call does not exist (other systems, older
kernels) it does nothing, and the pages fault in one by one as before.
"""

from __future__ import annotations

import errno
import mmap
import sys
from collections.abc import Callable

COPY_MMAP_FROM = 1 << 20  # buffers this big are fresh anonymous mappings (no zero-filling pass)
POPULATE_FROM = 64 << 10  # smaller parts are not worth the system call
_PAGE = mmap.PAGESIZE
_MADV_POPULATE_WRITE = 23  # linux/mman.h (not in Python's mmap module before 3.14)


def new_buffer(length: int) -> memoryview:
    """Writable memory of our own, not zero-filled first where it is big (fresh anonymous pages)."""
    if length < COPY_MMAP_FROM:
        return memoryview(bytearray(length))
    if not hasattr(mmap, "MAP_PRIVATE"):  # Windows
        return memoryview(bytearray(length))
    # Ordinary pages, not MADV_HUGEPAGE: on the dev VM (Firecracker, THP on madvise) a 2 MB fault was
    # far dearer than 512 small ones; full reads of the 498 MB "big" state dict took 0.2-0.7 s with
    # huge pages and 0.14 s without, in the same benchmark loop (2026-11-27). numpy.empty was tried
    # too (it reuses memory freed by earlier reads, but asks for huge pages on big arrays): full
    # reads went back to 0.45 s in make bench; a bytearray zero-fills every byte first (0.25 s).
    return memoryview(mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE))


_Madvise = Callable[[int, int, int], int]
_loaded: list[_Madvise | None] = []  # libc's madvise, once looked up ([None] where it cannot be had)


def _madvise() -> _Madvise | None:
    if not _loaded:
        fn: _Madvise | None = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes  # (here: only readers of big buffers need it)

                libc = ctypes.CDLL(None, use_errno=True)
                call = libc.madvise
                call.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                call.restype = ctypes.c_int
                fn = call
            except (OSError, AttributeError):
                fn = None
        _loaded.append(fn)
    return _loaded[0]


def populate(buf: memoryview) -> None:
    """Fault in the whole pages of writable `buf` with one system call, ahead of the writes that
    fill it. Pages that only partly belong to `buf` are left alone, so no memory outside it is
    touched. A hint only: it does nothing for small buffers or where the kernel cannot do it."""
    if buf.nbytes < POPULATE_FROM or buf.readonly:
        return
    fn = _madvise()
    if fn is None:
        return
    import ctypes

    try:
        addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    except (TypeError, ValueError):  # (not a plain contiguous buffer)
        return
    lo = -(-addr // _PAGE) * _PAGE
    hi = (addr + buf.nbytes) // _PAGE * _PAGE
    if hi > lo and fn(lo, hi - lo, _MADV_POPULATE_WRITE) != 0 and ctypes.get_errno() == errno.EINVAL:
        _loaded[0] = None  # a kernel before 5.14: do not ask again
