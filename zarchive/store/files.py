"""Where a model store keeps its version files: a local folder or an fsspec URL, and how a new
version's file is committed so that it appears whole or not at all, and, unless overwriting, only
if no other save of the same version committed first.

Local folders: the archive is written completely under a hidden temporary name in the store's
folder, then hard-linked to its final name: `link` fails when the name exists, so of two processes
saving one version exactly one wins, and a listing never sees a partial file. `overwrite=True`
renames it over the old file instead (atomic too). On a file system without hard links the commit
falls back to a check followed by a rename (not exclusive: said in the docs).

URLs: the archive is written to a local temporary file, then uploaded; without overwrite through
fsspec's exclusive create (mode "xb", which `memory://` and s3fs on AWS S3 implement: the upload
fails if the object exists), falling back to a check and an upload where a backend lacks it (not
exclusive there). On object stores an object appears only once its upload completed.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from ..container.open_gate import regular_file
from ..container.remote import is_url, resolve
from ..errors import SaveError

SUFFIX = ".zarc"
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK, errno.ENOSYS}


class VersionExists(SaveError):
    """The version is already in the store (save with overwrite=True to replace it)."""


class StoreFiles:
    """The version files of one store root."""

    def __init__(self, root: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> None:
        self.root = root if isinstance(root, str) and is_url(root) else os.fspath(root)
        self.storage_options = dict(storage_options or {})
        self.fs: Any = None
        self.fs_root = ""
        self.local: str | None = None
        if is_url(self.root):
            fs, path, local = resolve(self.root, self.storage_options)
            self.fs, self.fs_root, self.local = fs, path.rstrip("/"), local
        else:
            if self.storage_options:
                raise TypeError("storage_options apply to URLs only")
            self.local = self.root
        if self.local is not None:
            os.makedirs(self.local, exist_ok=True)
        else:
            self.fs.makedirs(self.fs_root, exist_ok=True)

    def __repr__(self) -> str:
        return f"StoreFiles({self.root!r})"

    # --- names ---
    def target(self, name: str) -> str:
        """The path or URL to open a version file by."""
        if self.local is not None:
            return os.path.join(self.local, name)
        return self.root.rstrip("/") + "/" + name

    def names(self) -> list[str]:
        """The committed version files' names (`<version>.zarc`; hidden and temporary files left out,
        and in a local folder anything not a regular file: a FIFO named `1.0.0.zarc` is not a
        version, and is never opened)."""
        if self.local is not None:
            local = self.local
            found = [n for n in os.listdir(local) if n.endswith(SUFFIX) and not n.startswith(".")]
            return [n for n in found if regular_file(os.path.join(local, n))]  # a stat, which never blocks
        found = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.fs_root, detail=False)]
        return [n for n in found if n.endswith(SUFFIX) and not n.startswith(".")]

    def exists(self, name: str) -> bool:
        if self.local is not None:
            return regular_file(os.path.join(self.local, name))
        return bool(self.fs.isfile(f"{self.fs_root}/{name}"))

    def size(self, name: str) -> int:
        if self.local is not None:
            return os.path.getsize(os.path.join(self.local, name))
        return int(self.fs.size(f"{self.fs_root}/{name}"))

    # --- committing ---
    def commit(self, name: str, write: Callable[[str], Any], *, overwrite: bool, durable: bool = True) -> None:
        """Write a new version file by calling `write(path)` with a temporary local path, then make it
        `name`; VersionExists when `name` exists (or appears meanwhile) and not `overwrite`."""
        if self.local is not None:
            self._commit_local(name, write, overwrite=overwrite, durable=durable)
        else:
            self._commit_remote(name, write, overwrite=overwrite)

    def exists_error(self, name: str) -> VersionExists:
        version = name[: -len(SUFFIX)]
        return VersionExists(
            f"version {version} is already in the store {self.root!r}; a saved version is never replaced "
            "unless you pass overwrite=True (or save it as a new version)"
        )

    def _commit_local(self, name: str, write: Callable[[str], Any], *, overwrite: bool, durable: bool) -> None:
        assert self.local is not None
        final = os.path.join(self.local, name)
        tmp = os.path.join(self.local, f".{name}.{uuid.uuid4().hex}.partial")
        try:
            write(tmp)
            if overwrite:
                os.replace(tmp, final)
            else:
                try:
                    os.link(tmp, final)
                except FileExistsError:
                    raise self.exists_error(name) from None
                except OSError as e:
                    if e.errno not in _NO_LINKS:
                        raise
                    if os.path.exists(final):  # no hard links here: a check, then a rename
                        raise self.exists_error(name) from None
                    os.replace(tmp, final)
            if durable:
                _fsync_dir(self.local)
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass

    def _commit_remote(self, name: str, write: Callable[[str], Any], *, overwrite: bool) -> None:
        path = f"{self.fs_root}/{name}"
        with tempfile.TemporaryDirectory(prefix="zarchive-store-") as tmpdir:
            tmp = os.path.join(tmpdir, name)
            write(tmp)
            if overwrite:
                self.fs.put_file(tmp, path)
                return
            try:
                with open(tmp, "rb") as src, self.fs.open(path, "xb") as dst:
                    shutil.copyfileobj(src, dst, 8 << 20)
            except FileExistsError:
                raise self.exists_error(name) from None
            except (ValueError, NotImplementedError):  # a backend without exclusive create
                if self.fs.exists(path):
                    raise self.exists_error(name) from None
                self.fs.put_file(tmp, path)


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = ["SUFFIX", "StoreFiles", "VersionExists"]
