"""One archive of a diff's pair (zarchive.inspection.diff): what kind each manifest node is (a tensor,
a container or a value), how a value is shown and identified without building it, and fetching
tensors and indexes against the file's read budget."""

from __future__ import annotations

import json
from typing import Any

from ..container.depth import MAX_DEPTH, too_deep
from ..engine.browse import OpenedArchive
from ..errors import FormatError
from .tensor_compare import NUMERIC_KINDS, value_nbytes

# node types compared as arrays besides those whose schema reads as a tensor (a ZANJ array's node
# names its type under ZANJ_FORMAT_KEY: "numpy.ndarray:<mode>")
ARRAY_TYPES = ("numpy.ndarray", "foreign.ndarray")
ZANJ_FORMAT_KEY = "__muutils_format__"
COLUMN_TYPES = ("pandas.Series",)  # a table's column (or a Series) of numbers compared as an array
SERIES_TABLE_FIELDS = ("index", "name_at")  # a Series' row index and label: compared by diff_tables
SEQUENCE_TYPES = ("tuple", "list")  # typed sequences of plain values, shown whole (a config's betas)
PLAIN_LOAD_BYTES = 1 << 20  # a typed value built to compare it across formats reads at most this much
PLAIN_ITEMS = 1000  # ... and holds at most this many plain values
_PLAIN = (str, int, float, bool, type(None))


class Side:
    """One archive of the pair: browsing, fetching, and the values compared so far (against its budget)."""

    def __init__(self, arc: OpenedArchive) -> None:
        self.arc = arc
        self.budget = getattr(arc, "read_budget", None)
        self.compared = 0
        self._entries: dict[str, dict[str, str]] = {}  # member -> entry key -> "size:crc32"

    def kind(self, node: Any) -> str:
        """'tensor', 'container' or 'value'."""
        if isinstance(node, dict):
            tag = node.get("$type")
            zanj = node.get(ZANJ_FORMAT_KEY)
            zanj_array = isinstance(zanj, str) and zanj.startswith("numpy.ndarray")
            if tag in ARRAY_TYPES or zanj_array or self.arc.is_tensor(node):
                return "tensor"
            if tag in COLUMN_TYPES and _numeric_dtype(node.get("dtype")):
                return "tensor"
            if tag in SEQUENCE_TYPES and isinstance(node.get("items"), list) and _scalars(node["items"]):
                return "value"
        elif isinstance(node, list) and _scalars(node):
            return "value"
        kids = self.arc.children(node) if isinstance(node, (dict, list)) else None
        return "container" if kids else "value"

    def children(self, node: Any) -> dict[str, Any]:
        return self.arc.children(node) or {}

    def shown(self, node: Any) -> Any:
        """A value as a diff shows it: plain JSON as it is, a sequence of plain values as a list,
        anything else as its one-line description."""
        if isinstance(node, _PLAIN):
            return node
        if isinstance(node, list) and _scalars(node):
            return list(node)
        if isinstance(node, dict) and node.get("$type") in SEQUENCE_TYPES and _scalars(node.get("items")):
            return list(node["items"])
        if isinstance(node, dict) and "$type" not in node and not node:
            return {}
        return self.arc.describe(node)

    def identity(self, node: Any) -> str:
        """The manifest node as canonical JSON, each member it names replaced by that member's size
        and CRC-32 where the file records them (so equal values in differently named members match)."""
        if isinstance(node, dict) and node.get("$type") in COLUMN_TYPES:  # (diff_tables compares these)
            node = {k: v for k, v in node.items() if k not in SERIES_TABLE_FIELDS}
        return json.dumps(self._resolve(node, 0), sort_keys=True, ensure_ascii=True)

    def _resolve(self, node: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise too_deep(what="manifest nodes")
        if isinstance(node, list):
            return [self._resolve(x, depth + 1) for x in node]
        if not isinstance(node, dict):
            return node
        out = {k: self._resolve(v, depth + 1) for k, v in node.items() if k != "$ref"}
        if isinstance(node.get("$ref"), str):
            out["$ref"] = self.stored(node) or node["$ref"]
        return out

    def stored(self, node: dict[str, Any]) -> str | None:
        """'size:crc32' of the stored bytes a node names (its member, or its entry in the member),
        where a .zarc records them; None where the file does not (foreign files). A member that
        records no entries (format 1.6: at most 1 MiB) stands for each of its tensors by its own
        size and CRC-32 and the tensor's key: the same member bytes hold the same tensor under a key."""
        if getattr(self.arc, "format", None) != "zarchive":
            return None
        info = self.arc.members.get(node["$ref"])
        if not isinstance(info, dict):
            return None
        key = node.get("key")
        if isinstance(key, str):
            entries = self._entries.get(node["$ref"])
            if entries is None:  # indexed once a member: a checkpoint of 100,000 tensors in one member
                listed = info.get("entries")
                entries = self._entries[node["$ref"]] = {
                    e[0]: f"{e[2]}:{e[3]}"
                    for e in (listed if isinstance(listed, list) else ())
                    if isinstance(e, list) and len(e) == 4 and isinstance(e[0], str)
                }
            if entries or "entries" in info:
                return entries.get(key)
            crc = info.get("crc32")
            return f"{info.get('size')}:{crc}#{key}" if isinstance(crc, str) and info.get("codec") == "none" else None
        crc = info.get("crc32")
        return f"{info.get('size')}:{crc}" if isinstance(crc, str) else None

    def plain(self, path: str, node: Any) -> tuple[bool, Any]:
        """(True, the value as plain JSON) where the value at `path` is small and built of built-in
        types only (its audit lists no class: an int stored in a DCP shard, a numpy scalar), so two
        files of different formats compare by value; (False, None) otherwise. Built under the file's
        read policy and budget; a class is never built here."""
        if isinstance(node, _PLAIN):
            return True, node
        if self.arc.audit(path):
            return False, None
        try:
            plan = self.arc.plan(path)
        except FormatError:  # a format without plans (a DCP directory): its reads are budgeted alone
            plan = None
        if plan is not None:
            sizes = [plan.nbytes, *(self.arc.member_size(m) for m in plan.members)]
            if max(sizes) > PLAIN_LOAD_BYTES:
                return False, None
        return _as_plain(self.arc.get(path))

    def fetch(self, path: str, node: Any = None) -> Any:
        """The tensor or array at `path`; a table's column of numbers as its values alone (its
        `node`'s values read, not the index every column of the frame shares)."""
        values = node.get("values") if isinstance(node, dict) and node.get("$type") in COLUMN_TYPES else None
        value = self.arc.get(path) if not isinstance(values, dict) else self.arc.load_node(values, path)
        if hasattr(value, "to_numpy") and not hasattr(value, "element_size") and not hasattr(value, "itemsize"):
            value = value.to_numpy()  # a pandas column of numbers (its dtype said so: no copy for most)
        if not hasattr(value, "shape") or not hasattr(value, "dtype"):
            raise FormatError(f"expected a tensor or array here, the archive gives {type(value).__name__}", path=path)
        self.charge(value_nbytes(value), "comparing the tensors' values", path)
        return value

    def charge(self, nbytes: int, what: str, path: str) -> None:
        """Count values read to compare them against the file's read budget (a 1 KB file of expanded
        views names terabytes of values to compare)."""
        self.compared += nbytes
        if self.budget is not None:
            self.budget.fits(self.compared, what, path=path)


def _as_plain(value: Any) -> tuple[bool, Any]:
    """(True, JSON-like copy) of a value made of plain values, lists, tuples and str-keyed dicts (numpy
    scalars as Python numbers), at most PLAIN_ITEMS of them; (False, None) for anything else."""
    count = 0

    def convert(x: Any, depth: int) -> Any:
        nonlocal count
        count += 1
        if count > PLAIN_ITEMS or depth > MAX_DEPTH:
            raise ValueError
        if isinstance(x, _PLAIN):
            return x
        if hasattr(x, "item") and getattr(x, "shape", None) == ():  # a numpy scalar (not a tensor: never one here)
            item = x.item()
            if isinstance(item, _PLAIN):
                return item
            raise ValueError
        if isinstance(x, (list, tuple)):
            return [convert(v, depth + 1) for v in x]
        if isinstance(x, dict) and all(isinstance(k, str) for k in x):
            return {k: convert(v, depth + 1) for k, v in x.items()}
        raise ValueError

    try:
        return True, convert(value, 0)
    except ValueError:
        return False, None


def _scalars(items: Any) -> bool:
    return isinstance(items, list) and all(isinstance(x, _PLAIN) for x in items)


def _numeric_dtype(text: Any) -> bool:
    """A numpy dtype name of numbers or booleans ("float64", "int8", "bool"; not "Int64", "str")."""
    if not isinstance(text, str) or len(text) > 40:
        return False
    try:
        import numpy as np

        return np.dtype(text).kind in NUMERIC_KINDS
    except (TypeError, ValueError):
        return False


__all__ = ["ARRAY_TYPES", "COLUMN_TYPES", "SEQUENCE_TYPES", "Side"]
