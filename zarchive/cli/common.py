"""What the command-line tools share: user-facing errors, opening an archive, sizes, node descriptions."""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

from ..engine.objpath import join_path
from ..errors import UnknownTypeError

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
    from ..container.remote import is_url

    if is_url(path):
        if not remote_ok:
            raise CliError(f"{path}: this command works on local files only")
        return
    if not os.path.exists(path):
        raise CliError(f"{path}: no such file")
    # a folder is read as one checkpoint (a DCP directory, a Hugging Face sharded folder); zarchive.open
    # says what it looked for in one that is neither
    if not os.access(path, os.R_OK):
        raise CliError(f"{path}: permission denied")


def parse_storage_options(items: list[str] | None) -> dict[str, Any]:
    """--storage-option KEY=VALUE (repeatable) as fsspec's storage_options: VALUE read as JSON where it
    is JSON (true, 3, null, {"region_name": "eu-west-1"}), else as text (http://127.0.0.1:9000)."""
    options: dict[str, Any] = {}
    for item in items or ():
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise CliError(f"--storage-option {item!r}: expected KEY=VALUE, a KEY such as endpoint_url")
        if key in options:
            raise CliError(f"--storage-option {key} is given twice")
        try:
            options[key] = json.loads(text)
        except ValueError:
            options[key] = text
    return options


def open_archive(path: str, **settings: Any) -> Any:
    """A LazyArchive (or, for a ZANJ file, a ZanjArchive) for `path`; ZArchiveErrors pass through."""
    from ..shortcuts import open as open_any

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
        from ..formats.zanj import nbytes_of

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
    if tag in ("torch.Tensor", "foreign.tensor"):
        from ..nodes.arrays import TORCH_ITEMSIZE  # never torch itself: listings do not import it

        return TORCH_ITEMSIZE.get(dtype)
    if tag in ("numpy.ndarray", "foreign.ndarray"):
        from ..nodes.arrays import numpy_itemsize

        return numpy_itemsize(dtype)
    return None


MAX_WALK_DEPTH = 200  # deeper levels are not walked (a read refuses them anyway)


class RefFind(NamedTuple):
    ref: str  # the member named
    path: str  # the object path of the node it was found at
    node: Any  # the dict holding the "$ref"
    pre: int  # the number of that node in the walk's depth-first order (see RefWalker.post)


class RefWalker:
    """Finds every member reference in a tree: through the handlers' children and, inside leaves,
    through any nested "$ref" (e.g. a table's columns).

    Each container of the manifest is looked at once, so the walk's work is linear in the manifest's
    size (`steps` counts it): a value reached again (a table's index, shared by the column nodes its
    handler builds, or a child also listed in the parent's own fields) is not walked again. Values
    that are fields of a node whose handler builds its children (a table) stay with that node, not
    with the first child that happens to include them."""

    def __init__(self, arc: Any) -> None:
        self.arc = arc
        self.steps = 0  # nodes and JSON values looked at
        self.post: dict[int, int] = {}  # a walked node's number -> the number of its last descendant
        self._seen: dict[int, Any] = {}  # containers looked at (kept alive, so their ids stay unique)
        self._count = 0

    def _first_time(self, value: Any) -> bool:
        if id(value) in self._seen:
            return False
        self._seen[id(value)] = value
        return True

    def walk(self, node: Any, path: list[str] | None = None) -> Iterator[RefFind]:
        return self._walk(node, list(path or []), 0, frozenset())

    def _walk(self, node: Any, path: list[str], depth: int, exclude: frozenset[int]) -> Iterator[RefFind]:
        """`path`: one list, appended to and popped as the walk goes down and up (joined only for a
        find), so each node costs the same however deep it is."""
        if depth > MAX_WALK_DEPTH or (isinstance(node, (dict, list)) and not self._first_time(node)):
            return
        self.steps += 1
        pre = self._count
        self._count += 1
        try:
            if isinstance(node, dict) and isinstance(node.get("$ref"), str):
                yield RefFind(node["$ref"], join_path(path), node, pre)
            kids = children(self.arc, node) if isinstance(node, (dict, list)) else None
            if kids:
                # a child built by the handler (a table's column) may include the node's own fields
                # (its index): those are the node's, looked at below with the node's path
                own = (
                    frozenset(id(v) for v in node.values() if isinstance(v, (dict, list)))
                    if isinstance(node, dict)
                    else frozenset()
                )
                for key, child in kids.items():
                    if id(child) not in exclude:
                        path.append(key)
                        try:
                            yield from self._walk(child, path, depth + 1, own)
                        finally:
                            path.pop()
            if isinstance(node, dict):
                for k, value in node.items():
                    if k != "$ref":
                        for ref, inner in self._nested(value, depth + 1, exclude):
                            yield RefFind(ref, join_path(path), inner, pre)
        finally:
            self.post[pre] = self._count - 1

    def _nested(self, value: Any, depth: int, exclude: frozenset[int]) -> Iterator[tuple[str, Any]]:
        stack = [(value, depth)]
        while stack:
            v, d = stack.pop()
            self.steps += 1
            if not isinstance(v, (dict, list)) or d > MAX_WALK_DEPTH or id(v) in exclude or not self._first_time(v):
                continue
            if isinstance(v, dict):
                if isinstance(v.get("$ref"), str):
                    yield v["$ref"], v
                stack.extend((x, d + 1) for k, x in reversed(v.items()) if k != "$ref")
            else:
                stack.extend((x, d + 1) for x in reversed(v))


def walk_refs(arc: Any, node: Any, path: list[str] | None = None) -> Iterator[tuple[str, str, Any]]:
    """(member, object path, node) for every member reference in the tree (see RefWalker)."""
    for found in RefWalker(arc).walk(node, path):
        yield found.ref, found.path, found.node


def tree_glyphs() -> tuple[str, str, str, str]:
    """Branch, last branch, pipe, blank: box drawing where the terminal can print it."""
    try:
        "├└│".encode(sys.stdout.encoding or "ascii")
        return "├── ", "└── ", "│   ", "    "
    except (UnicodeEncodeError, LookupError):
        return "|-- ", "`-- ", "|   ", "    "
