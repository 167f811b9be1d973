"""Archives that are not plain local paths: fsspec URLs (`s3://`, `memory://`, `file://`, ...) and
binary file objects.

fsspec is optional and imported only when a URL is used. Saving to a URL writes the archive to a
local temporary file and uploads it in one `put_file`; on object stores (S3, GCS, Azure) an object
appears only when its upload completes, so readers see the old archive or the new one, never half of
one. Other backends may show a partial file while it uploads; the zip directory is written last, so
a reader rejects such a file as truncated. `file://` URLs are saved and mapped like local paths.

A lazy `open` of a URL reads through a small read-ahead window, so browsing an archive and loading
one value fetch the zip directory, the JSON members and the ranges that value needs, not the file.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

from ..errors import ArchiveNotFoundError, FormatError
from .archive_writer import atomic_write
from .open_gate import NotARegularFileError, open_regular
from .source import ByteSource, BytesSource, FileSource, open_local

REMOTE_BLOCK_SIZE = 64 << 10  # read-ahead per request: a few of these per value, not the whole object
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
INSTALL_HINT = "pip install fsspec s3fs  (the 'remote' extra: pip install '.[remote]' in a zarchive checkout)"


def is_url(target: Any) -> bool:
    """A string (not a PathLike) naming a protocol: 's3://b/k', 'memory://x', 'simplecache::s3://...'."""
    if not isinstance(target, str):
        return False
    return bool(_URL.match(target)) or ("::" in target and "://" in target)


def is_file_object(target: Any) -> bool:
    """A binary file-like object rather than a path: anything with read() or write()."""
    if isinstance(target, (str, bytes, bytearray, memoryview, os.PathLike)):
        return False
    return callable(getattr(target, "read", None)) or callable(getattr(target, "write", None))


def _fsspec() -> Any:
    try:
        import fsspec
    except ImportError:
        raise ImportError(f"reading or writing URLs needs fsspec: {INSTALL_HINT}") from None
    return fsspec


def resolve(url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[Any, str, str | None]:
    """(filesystem, path on it, local path or None): fsspec's view of a URL."""
    fsspec = _fsspec()
    try:
        fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except ImportError as e:  # the backend (s3fs, gcsfs, ...) is missing; fsspec names it
        raise ImportError(f"{e} ({INSTALL_HINT})") from None
    from fsspec.implementations.local import LocalFileSystem

    local = path if isinstance(fs, LocalFileSystem) else None
    return fs, path, local


def _check_no_options(target: Any, storage_options: Mapping[str, Any] | None) -> None:
    if storage_options:
        raise TypeError(f"storage_options apply to URLs only, not to {type(target).__name__} {target!r}")


# --- saving ---
def save_to(
    target: Any,
    write: Callable[[BinaryIO], None],
    *,
    storage_options: Mapping[str, Any] | None,
    durable: bool,
) -> str:
    """Write an archive to a URL or a file object; return the URL (or the file object's name)."""
    if is_file_object(target):
        _check_no_options(target, storage_options)
        if not callable(getattr(target, "write", None)):
            raise TypeError(f"{type(target).__name__} is not writable")
        _copy_through_temp(write, target.write)
        name = getattr(target, "name", None)
        return name if isinstance(name, str) else ""
    fs, path, local = resolve(target, storage_options)
    if local is not None:
        atomic_write(local, write, durable=durable)
        return target
    fd, tmp = tempfile.mkstemp(suffix=".zarc-upload")
    try:
        with os.fdopen(fd, "w+b", buffering=1 << 20) as f:
            write(f)
        try:
            fs.put_file(tmp, path)
        except FileNotFoundError:  # a backend with real folders whose parent is missing
            from .._compat.fsspec import parent

            fs.makedirs(parent(fs, path), exist_ok=True)
            fs.put_file(tmp, path)
    finally:
        os.unlink(tmp)
    return target


def _copy_through_temp(write: Callable[[BinaryIO], None], sink: Callable[[bytes], Any]) -> None:
    """The zip writer patches headers in place, so it needs a real file; copy that file out after."""
    with tempfile.TemporaryFile() as f:
        write(f)
        f.seek(0)
        while chunk := f.read(8 << 20):
            sink(chunk)


# --- reading ---
class RemoteSource(FileSource):
    """Ranges of an fsspec file; `bytes_fetched` counts what its read-ahead cache asked the store for."""

    @property
    def bytes_fetched(self) -> int:
        cache = getattr(self._f, "cache", None)
        fetched = getattr(cache, "total_requested_bytes", None)
        return fetched if isinstance(fetched, int) else self.bytes_read


def open_source(
    target: Any, *, lazy: bool, storage_options: Mapping[str, Any] | None, mmap: bool = False
) -> ByteSource:
    """A byte source for a URL or a file object (the caller closes it; a caller's file stays open)."""
    if is_file_object(target):
        _check_no_options(target, storage_options)
        if not callable(getattr(target, "read", None)):
            raise TypeError(f"{type(target).__name__} is not readable")
        seekable = getattr(target, "seekable", None)
        if callable(seekable) and seekable():
            return FileSource(target, owns=False)
        return BytesSource(target.read())  # a pipe or a stream: read it whole
    fs, path, local = resolve(target, storage_options)
    try:
        if local is not None:
            return open_local(local, mmap=mmap, what="archive") if lazy else BytesSource(_read_local(local))
        if not lazy:
            return BytesSource(fs.cat_file(path))
        f = _open_lazily(fs, path)
        if not hasattr(f, "read"):  # a block cache over local files: read the file in place
            return open_local(f, mmap=mmap)
        if _names_a_folder(f):  # (s3fs opens a key prefix as an empty file)
            f.close()
            raise FormatError(f"{target!r} is a directory, not an archive")
    except NotARegularFileError:
        if local is not None and os.path.isdir(local):
            raise FormatError(f"{target!r} is a directory, not an archive") from None
        raise  # a FIFO, socket or device, refused without blocking
    except (FileNotFoundError, IsADirectoryError):
        if local is not None and os.path.isdir(local) or local is None and fs.isdir(path):
            raise FormatError(f"{target!r} is a directory, not an archive") from None
        raise ArchiveNotFoundError(f"no archive at {target!r}") from None
    try:
        return RemoteSource(f, owns=True)
    except BaseException:
        f.close()
        raise


def _open_lazily(fs: Any, path: str) -> Any:
    """An fsspec file for lazy reads of `path` (or, for a block cache over local files, the local path).

    Opened with fsspec's read-ahead cache, except on fsspec's caching layers (`blockcache::`,
    `filecache::`, `simplecache::`), which choose the file's cache themselves. fsspec's block cache
    keeps blocks of files that are read in blocks (s3, gcs, http: its blocks are fetched only when
    read, and kept on local disk); over file systems whose files are not (local files, memory://) it
    cannot open them at all, so there the file is read in place, lazily, as the cache would give it."""
    from fsspec.implementations.cached import CachingFileSystem, WholeFileCacheFileSystem
    from fsspec.implementations.local import LocalFileSystem

    if not isinstance(fs, CachingFileSystem):
        return fs.open(path, "rb", block_size=REMOTE_BLOCK_SIZE, cache_type="readahead")
    if isinstance(fs, WholeFileCacheFileSystem):  # filecache::, simplecache::: the whole file, once
        return fs.open(path, "rb")
    target = fs.fs  # blockcache::, over the file system it caches
    if isinstance(target, LocalFileSystem):
        return path
    if not _reads_in_blocks(target):
        return target.open(path, "rb", block_size=REMOTE_BLOCK_SIZE, cache_type="readahead")
    return fs.open(path, "rb", block_size=REMOTE_BLOCK_SIZE)


def _names_a_folder(f: Any) -> bool:
    """Whether an opened fsspec file is a folder: its `details` (fsspec's buffered files keep what
    `info` said of their path) say so."""
    details = getattr(f, "details", None)
    return isinstance(details, dict) and details.get("type") == "directory"


def _reads_in_blocks(fs: Any) -> bool:
    """Whether `fs` opens files that fsspec's block cache can keep blocks of: its files are fsspec's
    buffered files (what `AbstractFileSystem._open` makes, and what s3fs, gcsfs and http give)."""
    from fsspec.implementations.memory import MemoryFileSystem

    return not isinstance(fs, MemoryFileSystem)


def _read_local(path: str) -> bytes:
    with open_regular(path, what="archive") as f:  # a FIFO or device is refused without blocking
        return f.read()


def exists(target: Any, storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether a path or URL names an existing file."""
    if not is_url(target):
        return os.path.isfile(os.fspath(target))
    fs, path, _ = resolve(target, storage_options)
    return bool(fs.isfile(path))


def remove(target: Any, storage_options: Mapping[str, Any] | None = None) -> None:
    """Delete a path or URL if it exists."""
    if not is_url(target):
        try:
            os.remove(os.fspath(target))
        except FileNotFoundError:
            pass
        return
    fs, path, _ = resolve(target, storage_options)
    if fs.exists(path):
        fs.rm(path)


__all__ = [
    "REMOTE_BLOCK_SIZE",
    "RemoteSource",
    "exists",
    "is_file_object",
    "is_url",
    "open_source",
    "remove",
    "resolve",
    "save_to",
]
