"""Writes a whole archive: manifest first, members streamed, metadata last, moved into place atomically.

The archive is written to a temporary file beside its target, flushed and fsync'd, then renamed over
the target and the directory fsync'd. Until the rename, the old file is untouched; after it, readers
that had the old file open or mapped keep seeing the old inode. Nothing is ever written in place.
"""

from __future__ import annotations

import os
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any, BinaryIO

from ..errors import SaveError, ZArchiveError
from . import byte_groups, codecs, old_file
from .budget import holds_json, json_memory_estimate
from .compress_ahead import CompressAhead, Frame, Job
from .crc import crc32, crc32_combine, crc_hex
from .jsontext import dumps_pretty
from .member_plan import HEADER_LABEL, CompressHint, MemberPlan, Part, choose_codecs
from .zipwriter import EntryWriter, ZipWriter

if TYPE_CHECKING:
    from typing import Self

__all__ = [  # (MemberPlan, choose_codecs and their kin live in member_plan; importable from here too)
    "HEADER_LABEL",
    "MANIFEST_NAME",
    "METADATA_NAME",
    "RESERVED_NAMES",
    "CompressHint",
    "MemberPlan",
    "Part",
    "atomic_write",
    "check_target",
    "choose_codecs",
    "ensure_not_reserved",
    "iter_parts",
    "write_archive",
]

MANIFEST_NAME = "manifest.json"
METADATA_NAME = "metadata.json"
RESERVED_NAMES = frozenset({MANIFEST_NAME, METADATA_NAME})
MEMBER_ALIGN = 64
_BIG = 4 << 20  # buffers above this are checksummed on a second core while they are written
# (format 1.6) an uncompressed member of at most this many bytes records no checksum entries: a fetch
# from it checks the whole member, which costs less than every open parsing its entries (spec 6)
ENTRIES_FROM = 1 << 20


class _ChecksumPool:
    """Computes CRCs of big buffers on another thread while the main thread writes them."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zarchive-crc")

    def write_with_crc(self, sink: EntryWriter, buf: memoryview) -> int:
        if buf.nbytes < _BIG:
            sink.write_untracked(buf)
            return crc32(buf)
        future = self._pool.submit(crc32, buf)
        sink.write_untracked(buf)
        return future.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _write_plain(zw: ZipWriter, m: MemberPlan, pool: _ChecksumPool) -> dict[str, Any]:
    sink = zw.open_entry(m.name, align=MEMBER_ALIGN)
    sink.track_crc = False
    running = 0
    entries: list[list[Any]] = []  # [label, offset, size, crc32] rows: compact for 5,000-tensor members
    for label, buf in m.parts():
        buf = buf.cast("B") if buf.format != "B" or buf.ndim != 1 else buf
        offset = sink.entry.size
        part_crc = pool.write_with_crc(sink, buf)
        running = crc32_combine(running, part_crc, buf.nbytes) if buf.nbytes >= 65536 else crc32(buf, running)
        if label is not None:
            entries.append([label, offset, buf.nbytes, crc_hex(part_crc)])
    entry = sink.close(crc=running)
    info: dict[str, Any] = {
        "codec": "none",
        "size": entry.size,
        "stored_size": entry.size,
        "crc32": crc_hex(entry.crc),
    }
    if entries and entry.size > ENTRIES_FROM:
        info["entries"] = entries
    return info


def _write_frame(zw: ZipWriter, m: MemberPlan, frame: Frame) -> dict[str, Any]:
    """Write a member compressed ahead (compress_ahead)."""
    sink = zw.open_entry(m.name, align=1)
    sink.track_crc = False
    for chunk in frame.chunks:
        sink.write_untracked(chunk)
    entry = sink.close(crc=frame.crc)
    return {
        "codec": "zstd",
        "size": frame.size,
        "stored_size": entry.size,
        "crc32": crc_hex(entry.crc),
        "content_crc32": crc_hex(frame.content_crc),
    }


def _write_zstd(zw: ZipWriter, m: MemberPlan, level: int) -> dict[str, Any]:
    parts = [buf.cast("B") if buf.format != "B" or buf.ndim != 1 else buf for _, buf in m.parts()]
    total = sum(p.nbytes for p in parts)
    sink = zw.open_entry(m.name, align=1)
    content_crc = 0
    writer = codecs.compressor(level, total).stream_writer(sink, size=total, closefd=False)  # type: ignore[arg-type]  # needs only write()
    for p in parts:
        content_crc = crc32(p, content_crc)
        writer.write(p)
    writer.close()  # ends the one frame; a flush(FLUSH_FRAME) before it would add a second, empty frame
    entry = sink.close()
    return {
        "codec": "zstd",
        "size": total,
        "stored_size": entry.size,
        "crc32": crc_hex(entry.crc),
        "content_crc32": crc_hex(content_crc),
    }


def _tallied(parts: Callable[[], Iterable[Part]], tally: list[int]) -> Callable[[], Iterable[Part]]:
    """`parts`, adding the estimated parse cost of each part's JSON text to `tally` as it is made."""

    def counted() -> Iterable[Part]:
        for label, buf in parts():
            tally.append(json_memory_estimate(buf))
            yield label, buf

    return counted


def _write_grouped(zw: ZipWriter, m: MemberPlan) -> dict[str, Any]:
    sink = zw.open_entry(m.name, align=1)
    sink.track_crc = False
    rows: list[list[Any]] = []
    size = running = 0
    for row, bufs in byte_groups.encode(byte_groups.pieces(m.grouped_parts()), reuse=True):
        for b in bufs:
            sink.write_untracked(memoryview(b))  # (written before the next chunk: encode's `reuse`)
        running = crc32_combine(running, int(row[6], 16), sum(row[5]))  # the chunks' CRCs make the member's
        rows.append(row)
        size += row[2]
    entry = sink.close(crc=running)
    return {
        "codec": byte_groups.CODEC,
        "size": size,
        "stored_size": entry.size,
        "crc32": crc_hex(entry.crc),
        "chunks": rows,
    }


def write_archive(
    target: BinaryIO,
    manifest: dict[str, Any] | bytes,
    members: list[MemberPlan],
    metadata: dict[str, Any],
    level: int | None,
    on_member: Callable[[str, int], None] | None = None,
    check_size: Callable[[int, int], None] | None = None,
) -> None:
    """Write the archive into an open, seekable binary file (the caller handles atomicity).

    `manifest`: the manifest, or its bytes already encoded (and checked, see write_check).
    on_member(name, size) is called after each member is written (for progress bars).
    check_size(read_cost, file_size), once every member is written: raise to refuse the file, given
    what a default full read allocates (members decoded or read into memory, and the estimated objects
    of every JSON text: see container.budget) and (about) the size of the whole file."""
    zw = ZipWriter(target)
    manifest_bytes = manifest if isinstance(manifest, bytes) else dumps_pretty(manifest)
    m_entry = zw.write_entry(MANIFEST_NAME, manifest_bytes)
    infos: dict[str, Any] = {
        MANIFEST_NAME: {
            "codec": "none",
            "size": m_entry.size,
            "stored_size": m_entry.size,
            "crc32": crc_hex(m_entry.crc),
        }
    }
    json_cost = [json_memory_estimate(manifest_bytes)]
    members = [replace(m, parts=_tallied(m.parts, json_cost)) if holds_json(m.name) else m for m in members]
    jobs = [
        Job(m.parts, m.size, level) if m.codec == "zstd" and level is not None and m.early is None else None
        for m in members
    ]
    pool = _ChecksumPool()
    try:
        with CompressAhead(jobs) as ahead:
            for i, m in enumerate(members):
                try:
                    if m.codec == "zstd" and level is not None:
                        frame = m.early.result() if m.early is not None else ahead.take(i)  # (compress_early)
                        infos[m.name] = _write_frame(zw, m, frame) if frame is not None else _write_zstd(zw, m, level)
                    elif m.codec == byte_groups.CODEC:
                        infos[m.name] = _write_grouped(zw, m)
                    else:
                        infos[m.name] = _write_plain(zw, m, pool)
                except (ZArchiveError, OSError):
                    raise
                except Exception as e:  # producing a member's bytes failed (e.g. a tensor that cannot be copied)
                    raise SaveError(f"writing the member failed: {type(e).__name__}: {e}", member=m.name) from e
                if on_member is not None:
                    on_member(m.name, infos[m.name]["size"])
    finally:
        pool.close()
    metadata = dict(metadata)
    metadata["members"] = infos
    metadata_bytes = dumps_pretty(metadata)
    if check_size is not None:
        read_cost = sum(info["size"] for info in infos.values()) + sum(json_cost)
        read_cost += json_memory_estimate(metadata_bytes) + len(metadata_bytes)
        # (the directory adds about 100 bytes a member: a file a little bigger than this)
        check_size(read_cost, target.tell() + len(metadata_bytes))
    zw.write_entry(METADATA_NAME, metadata_bytes)
    zw.finish([MANIFEST_NAME, METADATA_NAME])


def atomic_write(path: str, write: Callable[[BinaryIO], None], *, durable: bool = True) -> None:
    """Run `write` on a temporary file beside `path`, then move it over `path`.

    The temporary file is `.<name>.<random>.zarc-tmp` (<name>: the target's file name, cut to 100
    characters so the temporary name stays within the file system's limit). It is removed if anything
    fails, including KeyboardInterrupt; only a process killed outright (SIGKILL, power loss) leaves it
    behind, and the target is then still the complete previous file. A big file that is replaced is
    freed on a background thread (see old_file).

    A target that exists and is not a regular file (a device, a FIFO, a socket, a directory, a link
    into /proc) is refused before anything is opened or created: see check_target. A symlink to a
    regular file is replaced by the new archive (the file it pointed at is left as it was), like any
    other rename over it.
    """
    check_target(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    prefix = "." + os.path.basename(path)[:100] + "."
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".zarc-tmp", dir=directory)
    try:
        with os.fdopen(fd, "w+b", buffering=1 << 20) as f:
            with _EarlyWriteback(f.fileno(), enabled=durable):
                write(f)
            os.fchmod(f.fileno(), _default_mode(path))  # before fsync, so the mode is durable too
            f.flush()
            if durable:
                os.fsync(f.fileno())
        old = old_file.hold(path)
        try:
            os.replace(tmp, path)
        except BaseException:
            old_file.release_now(old)
            raise
        old_file.release_later(old)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if durable:
        _fsync_dir(directory)


_MAX_LINKS = 40  # as the kernel's own limit on symlinks followed in one lookup
_FILE_OBJECT_HINT = (
    "save to a regular file path, or pass a binary file object to write into it "
    "(e.g. zarchive.save(obj, f) with f = open(path, 'wb'), or sys.stdout.buffer)"
)


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    for test, what in (
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return what
    return "not a regular file"


def _links_through_proc(path: str) -> str | None:
    """The first name on the way from `path` to the file it names (the path itself, then each
    symlink's target) that lies in /proc or /dev/fd (process descriptor links), or None."""
    current = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        if current == "/proc" or current.startswith(("/proc/", "/dev/fd/")):
            return current
        try:
            target = os.readlink(current)
        except OSError:  # not a symlink, or missing: the chain ends here
            return None
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
    return None


def check_target(path: str) -> None:
    """Refuse a save target that exists and is not a regular file, without opening it (opening a
    FIFO blocks until someone opens its other end). Renaming over a device node, a FIFO or a socket
    would replace the special file with a regular one; a /proc/<pid>/fd/N link (/dev/stdout) cannot
    be renamed over at all."""
    proc = _links_through_proc(path)
    if proc is not None:
        raise SaveError(
            f"cannot save to {path!r}: it is (or links to) {proc!r}, a process's file descriptor, not a file a "
            f"save can replace; {_FILE_OBJECT_HINT}"
        )
    try:
        st = os.stat(path)  # follows symlinks; stat() opens nothing, so a FIFO does not block it
    except (FileNotFoundError, NotADirectoryError):
        return  # a new file (or a dangling symlink, which the rename replaces)
    except OSError as e:
        raise SaveError(f"cannot save to {path!r}: {e.strerror or e}") from None
    what = _kind(st.st_mode)
    if what == "a directory":
        raise SaveError(
            f"cannot save to {path!r}: it is a directory; give the path of a file (inside it, or elsewhere)"
        )
    if what is not None:
        raise SaveError(
            f"cannot save to {path!r}: it is {what}, not a regular file, and a save replaces the file at its "
            f"path; {_FILE_OBJECT_HINT}"
        )


class _EarlyWriteback:
    """While an archive is being written, flush what is already written to disk from a background
    thread, so the disk works while we still produce bytes and the final fsync has little left to do."""

    INTERVAL = 0.05

    def __init__(self, fd: int, *, enabled: bool) -> None:
        self._fd = fd
        self._enabled = enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.wait(self.INTERVAL):
            try:
                os.fdatasync(self._fd)
            except OSError:
                return

    def __enter__(self) -> Self:
        if self._enabled and hasattr(os, "fdatasync"):
            self._thread = threading.Thread(target=self._run, name="zarchive-writeback", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()


def _default_mode(path: str) -> int:
    """Keep an existing file's permissions; a new one gets what open() would give it."""
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _fsync_dir(directory: str) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def iter_parts(*bufs: memoryview | bytes) -> Iterator[Part]:
    for b in bufs:
        yield None, memoryview(b)


def ensure_not_reserved(name: str) -> None:
    if name in RESERVED_NAMES:
        raise SaveError(f"member name {name!r} is reserved")
