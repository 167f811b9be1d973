"""Saves that do not stop training: the background half of `ZArchive.save_async`.

`submit` plans the save and captures its bytes in the caller's thread (staging.py: a copy into a
reused host buffer), then writes the archive on one background thread, through the same atomic
writer as a synchronous save, and reports through a `concurrent.futures.Future`:

- the future's result is the path written; its exception is what the synchronous save would have
  raised (a ZArchiveError subclass for bad objects or a failed write; OSError from the file system).
- one save to a path at a time: a save (async or not) to a path whose earlier save_async is still
  writing waits for that one to finish first, so the file ends up holding the later save.
- saves are written in the order they were submitted, one at a time; a capture waits while the
  staging buffer still holds the previous save's bytes (host memory stays at one copy).
- a normal interpreter exit waits for the saves still being written (the writer thread belongs to a
  ThreadPoolExecutor, which the interpreter joins at exit); a killed process leaves the previous file
  whole, as any interrupted save does.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, TypeVar

from .._compat.cpython import call_before_threads_stop
from ..container.archive_writer import MemberPlan
from ..container.remote import is_file_object, is_url

if TYPE_CHECKING:
    from .staging import Lease

__all__ = ["in_flight", "path_key", "submit", "wait_for"]

T = TypeVar("T")
Stage = Callable[[list[MemberPlan]], None]

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_in_flight: dict[str, Future[str]] = {}


def path_key(file_path: Any) -> str:
    """What identifies a save's target: the real absolute path of a local file, a URL as given, the
    identity of a file object."""
    if is_file_object(file_path):
        return f"<file object {id(file_path):#x}>"
    if is_url(file_path):
        return str(file_path)
    return os.path.realpath(os.path.abspath(os.fspath(file_path)))


def in_flight(key: str) -> Future[str] | None:
    """The future of the save to `key` (see path_key) still being written, if any."""
    with _lock:
        return _in_flight.get(key)


def wait_for(key: str) -> None:
    """Block until no save_async to `key` is being written (its outcome is its own future's)."""
    while True:
        fut = in_flight(key)
        if fut is None:
            return
        wait([fut])  # its outcome, error or not, is reported through its own future


def _writer() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zarchive-save")
            call_before_threads_stop(_finish_all)
        return _executor


def _finish_all() -> None:
    """At interpreter exit: wait for every save still being written, while the thread pools its
    writing uses (checksums, compression) still take work."""
    with _lock:
        pending = list(_in_flight.values())
    wait(pending)


def submit(key: str, plan: Callable[[Stage], T], write: Callable[[T], str]) -> Future[str]:
    """Run `plan(stage)` now (it must call `stage(members)` once its members are known: the capture),
    then `write(planned)` on the writer thread. Errors of either end in the returned future;
    KeyboardInterrupt and other BaseExceptions of the planning are raised here."""
    wait_for(key)
    future: Future[str] = Future()
    leases: list[Lease] = []

    def stage(members: list[MemberPlan]) -> None:
        from .staging import staging_buffer  # (and numpy) on the first save_async, not by `import zarchive`

        leases.append(staging_buffer().capture(members))

    def release() -> None:
        for lease in leases:
            lease.release()

    try:
        planned = plan(stage)
    except Exception as e:  # noqa: BLE001 - a failed save is reported through its future
        release()
        future.set_exception(e)
        return future
    except BaseException:
        release()
        raise

    def run() -> None:
        try:
            result = write(planned)
        except BaseException as e:  # noqa: BLE001 - every failure belongs to the caller's future
            release()
            _done(key, future)
            future.set_exception(e)
        else:
            release()
            _done(key, future)
            future.set_result(result)

    future.set_running_or_notify_cancel()
    with _lock:
        _in_flight[key] = future
    try:
        _writer().submit(run)
    except BaseException:  # e.g. RuntimeError: the interpreter is shutting down
        release()
        _done(key, future)
        raise
    return future


def _done(key: str, future: Future[str]) -> None:
    with _lock:
        if _in_flight.get(key) is future:
            del _in_flight[key]
