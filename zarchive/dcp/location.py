"""Where a sharded checkpoint's files are: a local directory, or a folder of an fsspec filesystem
(`s3://bucket/ckpt/`, `memory://ckpt`, `file:///...`, chained URLs such as `blockcache::s3://...`).

`Location` is the one place the writer, the reader and the view ask about the checkpoint's files:
the target of each file (what ZArchive.save and ZArchive.open take, with the storage options that
go with it), whether it is a regular file and its size, the files there and removing one. A local
directory (a path, or a `file://` URL) is read through the open gate's stat, which never blocks on a
FIFO; a remote folder through its filesystem's listing, taken once per `snapshot` (one LIST request
on S3, whatever the number of shards), so a reader sees one consistent set of files and sizes.

fsspec is imported only for URLs (zarchive.container.remote).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from typing import Any

from ..container.open_gate import NotARegularFileError
from ..container.remote import is_url, resolve
from ..errors import MemberNotFoundError
from .limits import check_file


class Location:
    """A checkpoint's folder. `where`: a local path or an fsspec URL; storage_options: for URLs
    (fsspec's options of the filesystem, as zarchive.open takes them)."""

    def __init__(self, where: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> None:
        if not is_url(where):
            if storage_options:
                raise TypeError("storage_options apply to URLs only")
            self.where = os.fspath(where)
            self.local: str | None = self.where
            self._fs: Any = None
            self._dir = ""
        else:
            self.where = str(where)
            fs, path, local = resolve(self.where, storage_options)
            self.local = local.rstrip("/") or "/" if local is not None else None
            self._fs = None if local is not None else fs
            self._dir = path.rstrip("/")
        self.storage_options = dict(storage_options or {}) if self._fs is not None else None
        self._listing: dict[str, dict[str, Any]] | None = None

    @property
    def remote(self) -> bool:
        return self._fs is not None

    def __str__(self) -> str:
        return self.where

    # --- the targets of files ---
    def target(self, name: str) -> str:
        """What ZArchive.save and ZArchive.open take for file `name` (with `open_settings`)."""
        if self.local is not None:
            return os.path.join(self.local, name)
        return f"{self.where.rstrip('/')}/{name}"

    @property
    def folder_target(self) -> str:
        """What zarchive.open takes for the folder itself (a URL ends with "/": a folder, known as one
        without asking the store)."""
        return self.local if self.local is not None and not is_url(self.where) else f"{self.where.rstrip('/')}/"

    @property
    def open_settings(self) -> dict[str, Any]:
        """The keyword arguments ZArchive.save and ZArchive.open need besides the target."""
        return {} if self._fs is None else {"storage_options": self.storage_options}

    def _path(self, name: str) -> str:
        return f"{self._dir}/{name}"

    # --- what is there ---
    def snapshot(self) -> dict[str, dict[str, Any]]:
        """The folder's files (name -> {"size", "type"}), listed now, fresh (not from a cache of an
        earlier listing); kept until the next call. Local folders are not listed (stat per file)."""
        if self._fs is None:
            return {}
        self._fs.invalidate_cache(self._dir)
        try:
            entries = self._fs.ls(self._dir, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            entries = []
        listing = {}
        for e in entries:
            name = posixpath.basename(str(e.get("name", "")).rstrip("/"))
            size = e.get("size")
            listing[name] = {"type": e.get("type"), "size": size if isinstance(size, int) else None}
        self._listing = listing
        return listing

    def _listed(self) -> dict[str, dict[str, Any]]:
        return self._listing if self._listing is not None else self.snapshot()

    def is_dir(self) -> bool:
        if self._fs is None:
            return os.path.isdir(self.local or "")
        return bool(self._fs.isdir(self._dir))

    def has(self, name: str) -> bool:
        """Whether a file (of any type) is there under `name`."""
        if self._fs is None:
            return os.path.lexists(os.path.join(self.local or "", name))
        return name in self._listed()

    def check_file(self, name: str, *, what: str) -> str:
        """The target of file `name` if it is a regular file (MemberNotFoundError if there is none,
        NotARegularFileError for a FIFO, a device or a folder: refused without opening it)."""
        if self._fs is None:
            return check_file(self.local or "", name, what=what)
        info = self._listed().get(name)
        if info is None:
            raise MemberNotFoundError(
                f"{what} {name!r} is missing from {self.where!r}: the checkpoint is incomplete", member=name
            )
        if info["type"] != "file" or info["size"] is None:
            raise NotARegularFileError(f"{what} {name!r} in {self.where!r} is not a file (a {info['type']})")
        return self.target(name)

    def size(self, name: str, *, what: str = "file") -> int:
        """The size of file `name` (checked to be a regular file first)."""
        path = self.check_file(name, what=what)
        if self._fs is None:
            return os.path.getsize(path)
        return int(self._listed()[name]["size"])

    def names(self) -> list[str]:
        """The names of the files there now (a fresh listing)."""
        if self._fs is None:
            return os.listdir(self.local or "")
        return list(self.snapshot())

    def stored_size(self, name: str) -> int:
        """The size of file `name` as stored now (after a write: asked of the store, not a listing)."""
        if self._fs is None:
            return os.path.getsize(os.path.join(self.local or "", name))
        self._fs.invalidate_cache(self._path(name))
        return int(self._fs.info(self._path(name))["size"])

    # --- changing it ---
    def make(self) -> None:
        """Create the folder where folders exist (an object store has none: nothing to do)."""
        if self._fs is None:
            os.makedirs(self.local or "", exist_ok=True)

    def remove(self, name: str) -> None:
        """Delete file `name` if it is there (local files: see writer.remove_unlisted_shards)."""
        if self._fs is None:
            try:
                os.unlink(os.path.join(self.local or "", name))
            except FileNotFoundError:
                pass
            return
        try:
            self._fs.rm_file(self._path(name))
        except FileNotFoundError:
            pass


__all__ = ["Location"]
