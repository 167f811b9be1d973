"""An opened ZANJ file with the same reading interface as a zarchive LazyArchive.

`zarchive.open("old.zanj")` returns one of these, so code (and the command line) that browses an
archive works on ZANJ files too: `keys(path)`, `arc[path]`, `load()`, `summary(path)`, `verify()`.
Opening reads the zip directory and ZANJ's two JSON members; `.npy` and `.jsonl` members are read
when a value needs them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import TracebackType
from typing import Any

from ..browse import TreeBrowser
from ..container.source import ByteSource
from ..errors import FormatError, MemberNotFoundError
from ..objpath import join_path, split_path
from ..options import ErrorMode
from .container import MAIN_NAME, META_NAME, ZanjZip
from .loader import FORMAT_KEY, REF_KEY, ZanjLoader, fields_of, node_kind

DEFAULT_MAX_MEMBER_BYTES = 4 << 30


class ZanjArchive(TreeBrowser):
    """A ZANJ file opened for reading. Values taken from it stay valid after it is closed."""

    format = "zanj"

    def __init__(
        self,
        source: ByteSource,
        *,
        error_mode: ErrorMode = ErrorMode.WARN,
        max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES,
        unknown: str = "error",
    ) -> None:
        self._zip = ZanjZip(source, max_member_bytes=max_member_bytes)
        try:
            if MAIN_NAME not in self._zip.members:
                raise FormatError(f"the zip has no {MAIN_NAME!r}: not a ZANJ file", member=MAIN_NAME)
            self._main = self._zip.read_json(MAIN_NAME)
            self._meta = self._zip.read_json(META_NAME) if META_NAME in self._zip.members else {}
            if not isinstance(self._meta, dict):
                raise FormatError("ZANJ metadata is not a JSON object", member=META_NAME)
        except BaseException:
            self._zip.close()
            raise
        self._error_mode = error_mode
        self._unknown = unknown

    @property
    def on_read(self) -> Callable[[str, int], None] | None:
        """Called with (member, bytes) for every member read (progress bars)."""
        return self._zip.on_read

    @on_read.setter
    def on_read(self, fn: Callable[[str, int], None] | None) -> None:
        self._zip.on_read = fn

    def member_size(self, name: str) -> int:
        """The stored size of a zip member."""
        info = self._zip.members.get(name)
        if info is None:
            raise MemberNotFoundError("no such member", member=str(name)[:200])
        return int(info.compress_size)

    # --- what is in it ---
    @property
    def manifest(self) -> Any:
        """ZANJ's object tree (`__zanj__.json`), as stored."""
        return self._main

    @property
    def meta(self) -> dict[str, Any]:
        """ZANJ's metadata (`__zanj_meta__.json`): its settings, system info, externals, timestamp."""
        return self._meta

    metadata = meta

    @property
    def members(self) -> dict[str, dict[str, Any]]:
        """Member name -> codec, sizes and CRC, like a zarchive metadata entry."""
        return {name: self._zip.entry(name) for name in self._zip.members}

    def children(self, node: Any) -> dict[str, Any] | None:
        kind = node_kind(node)
        if kind == "list":
            return {str(i): v for i, v in enumerate(node)}
        if kind == "dict":
            return dict(node)
        if kind in ("dataclass", "model", "unknown"):
            return fields_of(node)
        if kind == "set" and isinstance(node.get("data"), list):
            return {str(i): v for i, v in enumerate(node["data"])}
        return None

    def _root_node(self) -> Any:
        return self._main

    # --- loading ---
    def get(self, path: str = "", *, map_location: Any = None, dtype: Any = None) -> Any:
        node = self.node(path)
        loader = ZanjLoader(
            self._zip, error_mode=self._error_mode, map_location=map_location, dtype=dtype, unknown=self._unknown
        )
        loader.path = split_path(path)
        return loader.load(node)

    def __getitem__(self, path: str) -> Any:
        return self.get(path)

    def load(self, *, map_location: Any = None, dtype: Any = None) -> Any:
        return self.get("", map_location=map_location, dtype=dtype)

    def audit(self, path: str = "") -> dict[str, list[str]]:
        """The classes reading `path` would construct, by the name ZANJ recorded ('Config(SerializableDataclass)',
        a model's class), with their object paths; nothing is loaded or resolved."""
        found: dict[str, list[str]] = {}
        todo: list[tuple[Any, list[str]]] = [(self.node(path), split_path(path))]
        while todo:
            node, where = todo.pop()
            if node_kind(node) in ("dataclass", "model"):
                found.setdefault(str(node.get(FORMAT_KEY))[:200], []).append(join_path(where))
            kids = self.children(node) if len(where) < 200 else None
            for key, child in reversed(list((kids or {}).items())):
                todo.append((child, [*where, key]))
        return found

    def verify(self) -> list[tuple[str, str]]:
        """Inflate every member and check it against its zip CRC: [(member, problem), ...]."""
        return self._zip.verify_all()

    def describe(self, node: Any) -> str:
        """A one-line description of a node, for listings."""
        return describe(node)

    def summary(self, path: str = "") -> str:
        return describe(self.node(path))

    # --- lifetime ---
    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> ZanjArchive:  # noqa: PYI034
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<ZANJ file, {len(self._zip.members)} members, root: {self.summary()}>"


def describe(node: Any) -> str:
    """What a ZANJ node holds, in a few words ('ndarray float32 [2, 3] -> big.npy')."""
    kind = node_kind(node)
    if kind == "list":
        return f"list[{len(node)}]"
    if kind == "dict":
        return f"dict[{len(node)}]"
    if kind == "json":
        return type(node).__name__
    fmt = str(node.get(FORMAT_KEY))
    where = f" -> {node[REF_KEY]}" if isinstance(node.get(REF_KEY), str) else ""
    if kind in ("array", "tensor"):
        shape = node.get("shape")
        name = "ndarray" if kind == "array" else "tensor"
        dtype = str(node.get("dtype")).removeprefix("torch.")
        return f"{name} {dtype} {shape}{where}"
    if kind == "dataframe":
        rows = node.get("len(data)", len(node["data"]) if isinstance(node.get("data"), list) else "?")
        cols = node.get("columns")
        ncols = len(cols) if isinstance(cols, list) else "?"
        return f"DataFrame {rows} rows x {ncols} columns{where}"
    if kind == "external_list":
        return f"{fmt.partition(':')[0]}{where}"
    if kind == "set":
        data = node.get("data")
        return f"{fmt}[{len(data) if isinstance(data, list) else '?'}]"
    if kind == "dataclass":
        return f"dataclass {fmt[: -len('(SerializableDataclass)')]} (SerializableDataclass)"
    if kind == "model":
        params = node["meta"].get("num_params")
        extra = f", {params:,} parameters" if isinstance(params, int) else ""
        return f"model {fmt} (ConfiguredModel{extra})"
    return f"{fmt[:60]} (unknown ZANJ format)"


def nbytes_of(node: Any) -> int | None:
    """The size of an array or tensor node's data, from its dtype and shape, if they make sense."""
    import numpy as np

    if node_kind(node) not in ("array", "tensor"):
        return None
    try:
        dtype = np.dtype(str(node.get("dtype")).removeprefix("torch."))
        shape = node.get("shape")
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            return None
        return math.prod(shape) * dtype.itemsize
    except TypeError:
        return None
