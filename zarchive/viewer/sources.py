"""The archives a viewer serves: each opened once, read under its usual budget, looked up by object
path only (never by a file-system path), one reader at a time (a lock per archive).

An input is anything `zarchive.open` reads (.zarc, .pt, .safetensors, .npy, .npz, .zanj, a Hugging
Face folder, a DCP directory) or a model store's version: `STORE_FOLDER` (its latest version) or
`STORE_FOLDER@1.2.0`.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from ..engine.objpath import join_path, split_path
from ..errors import ArchiveNotFoundError, MemberNotFoundError, ZArchiveError

T = TypeVar("T")

CACHED_VALUES = 32  # computed page data (statistics, table summaries) kept per archive


class BadObjectPath(ZArchiveError, ValueError):
    """An object path the viewer refuses outright ('..', '.' or an empty component): HTTP 400."""


def check_objpath(text: str) -> str:
    """A normalised object path ('a/b/0'), or BadObjectPath for '.', '..', empty or NUL components
    (an object path names a value in the archive's tree, never a place in a file system)."""
    if "\x00" in text:
        raise BadObjectPath("an object path has no NUL characters")
    parts = split_path(text)
    for part in parts:
        if part in ("", ".", ".."):
            raise BadObjectPath(f"{text[:200]!r} is not an object path: no '', '.' or '..' components")
    return join_path(parts)


def resolve_input(path: str) -> tuple[str, str]:
    """(the file or folder to open, a label for it): a model store's folder gives its latest version,
    `FOLDER@VERSION` that version; anything else is opened as it is."""
    from ..store.model_store import ModelStore

    store_dir, _, version = path.rpartition("@") if not os.path.exists(path) else (path, "", "")
    if not store_dir or not os.path.isdir(store_dir) or (not version and not _is_store(store_dir)):
        return path, os.path.basename(os.path.normpath(path)) or path
    store = ModelStore(store_dir)
    info = store.info(version or "latest")
    return store.path(info.version), f"{os.path.basename(os.path.normpath(store_dir))}@{info.version}"


def _is_store(folder: str) -> bool:
    """A folder holding model store versions (and nothing zarchive.open reads as a folder)."""
    from ..store.model_store import ModelStore

    names = os.listdir(folder)
    if any(n.endswith((".safetensors", ".safetensors.index.json", ".metadata", ".zindex")) for n in names):
        return False
    return bool(ModelStore(folder).version_names())


class Source:
    """One archive being viewed. `open()` opens it (errors are kept and raised again on each use, so
    a page reports them); every use of the opened archive goes through `use`, under the lock."""

    def __init__(self, path: str, index: int, settings: dict[str, Any] | None = None) -> None:
        self.path = path
        self.settings = dict(settings or {})  # ZArchive settings for the open (max_read_bytes=...)
        self.index = index
        self.label = os.path.basename(os.path.normpath(path)) or path
        try:
            self.label = self._resolve()[1]
        except (ZArchiveError, OSError):
            pass  # said when it is opened
        self.lock = threading.RLock()
        self._arc: Any = None
        self._error: ZArchiveError | None = None
        self._cache: OrderedDict[tuple[str, ...], Any] = OrderedDict()

    def open(self) -> Any:
        """The opened archive (opened on first use); a ZArchiveError if it cannot be opened."""
        with self.lock:
            if self._arc is not None:
                return self._arc
            if self._error is not None:
                raise self._error
            try:
                target, self.label = self._resolve()
                if not os.path.exists(target):
                    raise ArchiveNotFoundError(f"no archive at {self.path!r}")
                from ..shortcuts import open as open_any

                self._arc = open_any(target, unresolved="generic", **self.settings)
            except ZArchiveError as e:
                self._error = e
                raise
            return self._arc

    def _resolve(self) -> tuple[str, str]:
        try:
            return resolve_input(self.path)
        except ZArchiveError:
            raise
        except ValueError as e:  # not a version (STORE@abc)
            raise ArchiveNotFoundError(f"{self.path!r}: {e}") from None

    def use(self, fn: Callable[[Any], T]) -> T:
        """`fn(archive)` under the lock."""
        with self.lock:
            return fn(self.open())

    def cached(self, key: tuple[str, ...], fn: Callable[[Any], T]) -> T:
        """`fn(archive)`, computed once per key (the last CACHED_VALUES kept); errors are not cached."""
        with self.lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]  # type: ignore[no-any-return]
            value = fn(self.open())
            self._cache[key] = value
            while len(self._cache) > CACHED_VALUES:
                self._cache.popitem(last=False)
            return value

    def node(self, objpath: str) -> Any:
        """The manifest node at an object path (MemberNotFoundError if there is none)."""
        path = check_objpath(objpath)

        def find(arc: Any) -> Any:
            try:
                return arc.node(path)
            except MemberNotFoundError as e:
                raise MemberNotFoundError(f"no object at path /{path}: {e.message}", path=path) from None

        return self.use(find)

    def close(self) -> None:
        with self.lock:
            if self._arc is not None:
                self._arc.close()
                self._arc = None
            self._cache.clear()


class Sources:
    """The archives of one viewer, by number (0, 1): the only things its URLs can name."""

    def __init__(self, paths: list[str], **settings: Any) -> None:
        self.items = [Source(p, i, settings) for i, p in enumerate(paths)]

    def get(self, index: str) -> Source:
        if not index.isdigit() or int(index) >= len(self.items):
            raise MemberNotFoundError(f"no archive number {index[:20]!r}")
        return self.items[int(index)]

    def close(self) -> None:
        for s in self.items:
            s.close()


__all__ = ["BadObjectPath", "Source", "Sources", "check_objpath", "resolve_input"]
