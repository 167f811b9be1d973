"""Freeing the blocks of an archive that a save replaces, off the caller's thread.

Renaming a new file over an old one makes the kernel free the old file's blocks inside the rename
call when nothing else holds it open: for a 500 MB file on ext4 that is about a third of a second,
a third of the whole save. Holding the old file open across the rename turns the rename into a
directory update only; the blocks are freed when that descriptor is closed, which a background
thread does. The file's name is already the new archive's by then, so nothing user-visible waits
on it. Interpreter exit waits for pending closes (the threads are not daemons). On NFS a file removed
while open lingers as a `.nfsXXXX` entry until it is closed: here, a moment after the save returns.
"""

from __future__ import annotations

import os
import stat
import threading

# below this the rename frees the old file quickly enough that a thread costs more than it saves
MIN_SIZE = 8 << 20

_pending: set[threading.Thread] = set()
_lock = threading.Lock()


def hold(path: str) -> int | None:
    """An open descriptor of the regular, singly linked file at `path` when it is big enough to be
    worth freeing later; None otherwise (no file, a symlink, a small file, not POSIX)."""
    if os.name != "posix":  # Windows cannot rename over a file that is open
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size < MIN_SIZE:
        os.close(fd)
        return None
    return fd


def release_later(fd: int | None) -> None:
    """Close `fd` (from `hold`) on a background thread: the last close frees the replaced file."""
    if fd is None:
        return
    thread = threading.Thread(target=_close, args=(fd,), name="zarchive-free-old-file")
    with _lock:
        _pending.add(thread)
    thread.start()


def release_now(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
    finally:
        with _lock:
            _pending.discard(threading.current_thread())


def wait_released(timeout: float | None = None) -> bool:
    """Wait until every replaced file has been freed; False if `timeout` ran out first. Benchmarks
    call it between timed runs so that one tool's freeing does not slow the next tool's run."""
    with _lock:
        threads = list(_pending)
    for t in threads:
        t.join(timeout)
    with _lock:
        return not _pending


__all__ = ["MIN_SIZE", "hold", "release_later", "release_now", "wait_released"]
