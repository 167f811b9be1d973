"""What the command-line tools share: user-facing errors, opening an archive, sizes, node descriptions."""

from __future__ import annotations

import importlib
import math
import os
import sys
from collections.abc import Iterator
from typing import Any

from ..errors import UnknownTypeError
from ..objpath import join_path

EXIT_OK = 0
EXIT_FAILED = 1  # the operation ran and found a problem (a damaged archive)
EXIT_BAD_INPUT = 2  # the input could not be used (missing file, not an archive, unknown object path)


class CliError(Exception):
    """A problem to report in one line, with the exit code to return (never a traceback)."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


def check_file(path: str, *, remote_ok: bool = True) -> None:
    """A readable local file, or (where remote_ok) an fsspec URL that zarchive.open will fetch from."""
    from ..remote import is_url

    if is_url(path):
        if not remote_ok:
            raise CliError(f"{path}: this command works on local files only")
        return
    if not os.path.exists(path):
        raise CliError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CliError(f"{path}: is a directory, not an archive")
    if not os.access(path, os.R_OK):
        raise CliError(f"{path}: permission denied")


def open_archive(path: str, **settings: Any) -> Any:
    """A LazyArchive (or, for a ZANJ file, a ZanjArchive) for `path`; ZArchiveErrors pass through."""
    from ..api import open as open_any

    check_file(path)
    return open_any(path, **settings)


def import_modules(names: list[str] | None) -> None:
    """Import modules the user named (--import), so their classes can be read; the current directory
    is searched first, as `python -m` does."""
    if not names:
        return
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001  # whatever the user's module raises on import
            raise CliError(f"--import {name}: {type(e).__name__}: {e}") from None


def human_size(n: int | None) -> str:
    if n is None:
        return "?"
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024  # type: ignore[assignment]
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"
    return f"{n} B"  # unreachable


def size_text(n: int | None, exact: bool) -> str:
    return "?" if n is None else (f"{n}" if exact else human_size(n))


def show_path(path: str) -> str:
    return "/" + path


def is_zanj(arc: Any) -> bool:
    return getattr(arc, "format", "zarchive") == "zanj"


def children(arc: Any, node: Any) -> dict[str, Any] | None:
    """The node's children; None for leaves and for types this reader does not know."""
    try:
        return arc.children(node)
    except UnknownTypeError:
        return None


def describe(arc: Any, node: Any) -> str:
    """One line about a node: its type, and shape/dtype/size where it has them."""
    if is_zanj(arc):
        from ..zanj import nbytes_of

        if not (isinstance(node, dict) and "__muutils_format__" in node):
            return _plain(node)
        text, nbytes = arc.describe(node), nbytes_of(node)
    elif isinstance(node, dict) and "$type" in node:
        tag = node["$type"]
        try:
            text = arc.describe(node)
        except UnknownTypeError:
            return f"{str(tag)[:80]} (a type this zarchive does not know)"
        nbytes = _nbytes(node)
    else:
        return _plain(node)
    return f"{text}  ({human_size(nbytes)})" if nbytes is not None else text


def _plain(node: Any) -> str:
    if isinstance(node, dict):
        return f"dict[{len(node)}]"
    if isinstance(node, list):
        return f"list[{len(node)}]"
    text = repr(node)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(node).__name__} {text}"


def _nbytes(node: dict[str, Any]) -> int | None:
    """Bytes of a tensor or array node's values, from its dtype and shape."""
    dtype, shape = node.get("dtype"), node.get("shape")
    if not isinstance(dtype, str) or not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        return None
    itemsize = _itemsize(dtype, node.get("$type"))
    return None if itemsize is None else math.prod(shape) * itemsize


def _itemsize(dtype: str, tag: Any) -> int | None:
    if tag == "torch.Tensor":
        from ..nodes.arrays import TORCH_ITEMSIZE  # never torch itself: listings do not import it

        return TORCH_ITEMSIZE.get(dtype)
    if tag == "numpy.ndarray":
        from ..nodes.arrays import numpy_itemsize

        return numpy_itemsize(dtype)
    return None


def walk_refs(arc: Any, node: Any, path: list[str] | None = None, depth: int = 0) -> Iterator[tuple[str, str, Any]]:
    """(member, object path, node) for every member reference in the tree, found through the
    handlers' children and, inside leaves, through any nested "$ref" (e.g. a table's columns)."""
    path = path or []
    if depth > 200:
        return
    if isinstance(node, dict) and isinstance(node.get("$ref"), str):
        yield node["$ref"], join_path(path), node
    kids = children(arc, node) if isinstance(node, (dict, list)) else None
    if kids:
        kid_ids = {id(v) for v in kids.values()}
        for key, child in kids.items():
            yield from walk_refs(arc, child, [*path, key], depth + 1)
        rest = [v for k, v in node.items() if k != "$ref" and id(v) not in kid_ids] if isinstance(node, dict) else []
    elif isinstance(node, dict):
        rest = [v for k, v in node.items() if k != "$ref"]
    else:
        rest = []
    for value in rest:
        for ref, inner in _nested_refs(value, depth + 1):
            yield ref, join_path(path), inner


def _nested_refs(value: Any, depth: int) -> Iterator[tuple[str, Any]]:
    if depth > 200:
        return
    if isinstance(value, dict):
        if isinstance(value.get("$ref"), str):
            yield value["$ref"], value
        for k, v in value.items():
            if k != "$ref":
                yield from _nested_refs(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            yield from _nested_refs(v, depth + 1)


def tree_glyphs() -> tuple[str, str, str, str]:
    """Branch, last branch, pipe, blank: box drawing where the terminal can print it."""
    try:
        "├└│".encode(sys.stdout.encoding or "ascii")
        return "├── ", "└── ", "│   ", "    "
    except (UnicodeEncodeError, LookupError):
        return "|-- ", "`-- ", "|   ", "    "
