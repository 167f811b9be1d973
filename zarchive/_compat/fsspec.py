"""fsspec internals: a filesystem's `_parent(path)`, the folder of a path in the filesystem's own
spelling (root marker included), which each backend may override.

Probe (see the package docstring for the rule), "fsspec.parent": `AbstractFileSystem._parent`
exists and gives the parent of a path with and without a root marker. Fallback: the parent made
from the path and the public `root_marker` the way fsspec's base class makes it.
"""

from __future__ import annotations

from typing import Any

from fsspec.spec import AbstractFileSystem

from . import Probe


def _check_parent() -> bool | None:
    base = getattr(AbstractFileSystem, "_parent", None)
    if not callable(base):
        return None

    class _Rooted(AbstractFileSystem):  # a throwaway class: the base class's method on a "/"-rooted fs
        root_marker = "/"
        protocol = ("zarchive-probe",)
        cachable = False

    ok = (
        base("bucket/dir/key") == "bucket/dir"
        and base("key") == ""
        and _Rooted._parent("/dir/key") == "/dir"
        and _Rooted._parent("/key") == "/"
    )
    return True if ok else None


_PARENT = Probe("fsspec.parent", _check_parent)


def public_parent(fs: Any, path: str) -> str:
    """The parent of `path` (already stripped of its protocol) from public attributes only."""
    marker = getattr(fs, "root_marker", "")
    marker = marker if isinstance(marker, str) else ""
    path = path.rstrip("/")
    if "/" not in path:
        return marker
    return marker + path.rsplit("/", 1)[0].lstrip(marker)


def parent(fs: Any, path: str) -> str:
    """The folder holding `path` on `fs` (an fsspec filesystem; `path` as url_to_fs gives it)."""
    if _PARENT.get() is not None:
        got = fs._parent(path)
        if isinstance(got, str):
            return got
    return public_parent(fs, path)


__all__ = ["parent", "public_parent"]
