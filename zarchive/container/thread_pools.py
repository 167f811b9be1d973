"""The worker thread pools that encoding and decoding share, one per job, and the cores they may use.

Each pool has one worker per usable core and is made on first use. Pools are kept apart by job (the
bgzstd chunks; the zstd members a save compresses ahead of its writer) so that a job that waits on
another pool's work never holds the threads that work needs: a member's bytes may be produced by
decoding chunks of another archive. A process forked after a pool was made (a DataLoader worker) gets
a pool of its own: the parent's threads do not exist in the child, and jobs given to them would never
run.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_lock = threading.Lock()
_pools: dict[str, tuple[int, ThreadPoolExecutor]] = {}  # name -> (pid that made it, pool)
_cores: tuple[int, int] = (0, 0)  # (pid, usable cores) learned in that process


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container or `taskset` may allow fewer
    than the machine has), learned once per process."""
    global _cores
    pid = os.getpid()
    if _cores[0] != pid:
        try:
            n = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # (no affinity on macOS and Windows)
            n = os.cpu_count() or 1
        _cores = (pid, max(1, n))
    return _cores[1]


def worker_count(limit: int) -> int:
    """Threads for a job that uses at most `limit`: one per usable core, up to `limit` (at least 1)."""
    return max(1, min(limit, usable_cores()))


def shared_pool(name: str, workers: int | None = None) -> ThreadPoolExecutor:
    """The pool for the job `name` (`workers` threads, default one per usable core: the count it is
    first made with), made in this process if need be."""
    pid = os.getpid()
    with _lock:
        made = _pools.get(name)
        if made is None or made[0] != pid:
            pool = ThreadPoolExecutor(workers or usable_cores(), thread_name_prefix=f"zarchive-{name}")
            made = _pools[name] = (pid, pool)
        return made[1]
