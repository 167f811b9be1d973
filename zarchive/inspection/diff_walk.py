"""Walking two opened archives' object trees side by side: each object path is a tensor (compared by
value, see tensor_compare), a container (walked into) or a value (compared by its manifest node).

Nothing is constructed: values other than tensors and arrays are compared as their manifest nodes
(the members those name by their sizes and CRC-32s, in a .zarc), and shown as plain JSON where the
node is plain JSON, else as the node's one-line description (`arc.describe`). Tensors and arrays are
fetched one pair at a time through the public lazy fetch (`arc.get`), compared piece by piece, and
dropped before the next pair.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..container.depth import MAX_DEPTH, too_deep
from ..engine.browse import OpenedArchive
from ..engine.objpath import join_path
from ..errors import FormatError
from ..nodes.base import MISSING
from .tensor_compare import NUMERIC_KINDS, distance, equal_values, is_numeric, value_nbytes

# node types compared as arrays besides those whose schema reads as a tensor (a ZANJ array's node
# names its type under ZANJ_FORMAT_KEY: "numpy.ndarray:<mode>")
ARRAY_TYPES = ("numpy.ndarray", "foreign.ndarray")
ZANJ_FORMAT_KEY = "__muutils_format__"
COLUMN_TYPES = ("pandas.Series",)  # a table's column (or a Series) of numbers compared as an array
SEQUENCE_TYPES = ("tuple", "list")  # typed sequences of plain values, shown whole (a config's betas)
PLAIN_CONTAINERS = (None, "dict")  # containers whose type is not itself compared (dict vs OrderedDict)
PLAIN_LOAD_BYTES = 1 << 20  # a typed value built to compare it across formats reads at most this much
PLAIN_ITEMS = 1000  # ... and holds at most this many plain values
_PLAIN = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class TensorRecord:
    """One tensor path as the walk found it (the public TensorChange is built from it)."""

    path: str
    status: str
    shape_a: tuple[int, ...] | None
    shape_b: tuple[int, ...] | None
    dtype_a: str | None
    dtype_b: str | None
    compared: str  # "values", "checksum" (equal stored bytes, not read) or "none"
    stats: Any  # a tensor_compare.Distance, or None


@dataclass(frozen=True)
class ValueRecord:
    path: str
    status: str  # "added", "removed", "changed", "same"
    a: Any
    b: Any


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
        where a .zarc records them; None where the file does not (foreign files)."""
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
            return entries.get(key)
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

    def fetch(self, path: str) -> Any:
        value = self.arc.get(path)
        if hasattr(value, "to_numpy") and not hasattr(value, "element_size") and not hasattr(value, "itemsize"):
            value = value.to_numpy()  # a pandas column of numbers (its dtype said so: no copy for most)
        if not hasattr(value, "shape") or not hasattr(value, "dtype"):
            raise FormatError(f"expected a tensor or array here, the archive gives {type(value).__name__}", path=path)
        self.compared += value_nbytes(value)
        if self.budget is not None:  # a 1 KB file of expanded views names terabytes of values to compare
            self.budget.fits(self.compared, "comparing the tensors' values", path=path)
        return value


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


def _shape_dtype(node: Any) -> tuple[tuple[int, ...] | None, str | None]:
    shape = node.get("shape") if isinstance(node, dict) else None
    if shape is None and isinstance(node, dict) and isinstance(node.get("length"), int):
        shape = [node["length"]]  # a column
    dtype = node.get("dtype") if isinstance(node, dict) else None
    ok = isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in shape)
    return (tuple(shape) if ok and isinstance(shape, list) else None), (
        _dtype_name(dtype) if isinstance(dtype, str) else None
    )


def _dtype_name(text: str) -> str:
    """A dtype as one name for torch and numpy alike ('<f4' and 'float32' are both 'float32')."""
    try:
        import numpy as np

        return str(np.dtype(text)) if text[:1] in "<>|=" else text
    except (TypeError, ValueError):
        return text


def walk(a: Side, b: Side, *, checksums: bool) -> Iterator[TensorRecord | ValueRecord]:
    """Every tensor and value path of either archive, in the order of A's tree (then B's own paths)."""
    stack: list[tuple[list[str], Any, Any]] = [([], a.arc.node(""), b.arc.node(""))]
    while stack:
        comps, na, nb = stack.pop()
        if len(comps) > MAX_DEPTH:
            raise too_deep(path=join_path(comps[:MAX_DEPTH]), what="object paths")
        path = join_path(comps)
        ka = a.kind(na) if na is not MISSING else None
        kb = b.kind(nb) if nb is not MISSING else None
        if ka == "container" or kb == "container":
            if ka not in (None, "container") or kb not in (None, "container"):  # a tensor or value became a container
                yield ValueRecord(path, "changed", _show(a, na, ka), _show(b, nb, kb))
                continue
            ta, tb = (_container_type(na), _container_type(nb)) if ka and kb else (None, None)
            if ta is not None and tb is not None and ta != tb:
                yield ValueRecord(path, "changed", a.arc.describe(na), b.arc.describe(nb))
            kids_a = a.children(na) if ka else {}
            kids_b = b.children(nb) if kb else {}
            pairs = [(k, v, kids_b.get(k, MISSING)) for k, v in kids_a.items()]
            pairs += [(k, MISSING, v) for k, v in kids_b.items() if k not in kids_a]
            stack.extend(([*comps, k], va, vb) for k, va, vb in reversed(pairs))
        elif ka == "tensor" or kb == "tensor":
            if ka not in (None, "tensor") or kb not in (None, "tensor"):
                yield ValueRecord(path, "changed", _show(a, na, ka), _show(b, nb, kb))
            else:
                yield _tensor(a, b, path, na, nb, checksums)
        elif ka is None:
            yield ValueRecord(path, "added", None, b.shown(nb))
        elif kb is None:
            yield ValueRecord(path, "removed", a.shown(na), None)
        else:
            shown_a, shown_b = a.shown(na), b.shown(nb)
            same = a.identity(na) == b.identity(nb)
            if not same:  # another format may store the same value another way: compare plain values
                ok_a, plain_a = a.plain(path, na)
                ok_b, plain_b = b.plain(path, nb) if ok_a else (False, None)
                if ok_a and ok_b:
                    same = _canonical(plain_a) == _canonical(plain_b)
                    shown_a, shown_b = plain_a, plain_b
            yield ValueRecord(path, "same" if same else "changed", shown_a, shown_b)


def _show(side: Side, node: Any, kind: str | None) -> Any:
    return None if kind is None else side.arc.describe(node) if kind != "value" else side.shown(node)


def _container_type(node: Any) -> tuple[Any, Any] | None:
    """A container's type as compared (dataclass and model classes); None for dicts and lists, and for
    containers of formats that name no type."""
    if not isinstance(node, dict) or node.get("$type") in PLAIN_CONTAINERS:
        return None
    return (node.get("$type"), node.get("class"))


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True)


def _tensor(a: Side, b: Side, path: str, na: Any, nb: Any, checksums: bool) -> TensorRecord:
    shape_a, dtype_a = _shape_dtype(na) if na is not MISSING else (None, None)
    shape_b, dtype_b = _shape_dtype(nb) if nb is not MISSING else (None, None)
    if na is MISSING or nb is MISSING:
        status = "added" if na is MISSING else "removed"
        return TensorRecord(path, status, shape_a, shape_b, dtype_a, dtype_b, "none", None)
    if checksums and _same_stored(a, b, na, nb):
        return TensorRecord(path, "same", shape_a, shape_b, dtype_a, dtype_b, "checksum", None)
    va = a.fetch(path)
    vb = b.fetch(path)
    shape_a, shape_b = tuple(int(d) for d in va.shape), tuple(int(d) for d in vb.shape)
    dtype_a, dtype_b = (
        _dtype_name(str(va.dtype).removeprefix("torch.")),
        _dtype_name(str(vb.dtype).removeprefix("torch.")),
    )
    if shape_a != shape_b:
        return TensorRecord(path, "reshaped", shape_a, shape_b, dtype_a, dtype_b, "none", None)
    numeric = is_numeric(va) and is_numeric(vb)
    if numeric:
        stats = distance(va, vb)
        unequal = stats.differing > 0
    else:
        stats = None
        unequal = not equal_values(va, vb)
    status = "dtype" if dtype_a != dtype_b else "changed" if unequal else "same"
    return TensorRecord(path, status, shape_a, shape_b, dtype_a, dtype_b, "values", stats)


def _same_stored(a: Side, b: Side, na: Any, nb: Any) -> bool:
    """Both nodes name stored bytes of equal size and CRC-32 the same way (dtype, shape, view): equal
    values, known without reading them (.zarc files only, whose members record their CRC-32s)."""
    if not (isinstance(na, dict) and isinstance(nb, dict) and isinstance(na.get("$ref"), str)):
        return False
    if not isinstance(nb.get("$ref"), str):
        return False
    rest_a = {k: v for k, v in na.items() if k not in ("$ref", "key")}
    rest_b = {k: v for k, v in nb.items() if k not in ("$ref", "key")}
    if json.dumps(rest_a, sort_keys=True) != json.dumps(rest_b, sort_keys=True):
        return False
    stored = a.stored(na)
    return stored is not None and stored == b.stored(nb)


__all__ = ["Side", "TensorRecord", "ValueRecord", "walk"]
