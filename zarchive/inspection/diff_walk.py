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
from ..engine.objpath import join_path
from ..nodes.base import MISSING
from .diff_side import Side
from .diff_tables import TableRecord, table_records
from .tensor_compare import distance, equal_values, is_numeric

PLAIN_CONTAINERS = (None, "dict")  # containers whose type is not itself compared (dict vs OrderedDict)


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


def walk(a: Side, b: Side, *, checksums: bool) -> Iterator[TensorRecord | ValueRecord | TableRecord]:
    """Every tensor and value path of either archive, in the order of A's tree (then B's own paths),
    and the row index, column labels and dtypes of every table on both sides (diff_tables)."""
    stack: list[tuple[list[str], Any, Any]] = [([], a.arc.node(""), b.arc.node(""))]
    while stack:
        comps, na, nb = stack.pop()
        if len(comps) > MAX_DEPTH:
            raise too_deep(path=join_path(comps[:MAX_DEPTH]), what="object paths")
        path = join_path(comps)
        ka = a.kind(na) if na is not MISSING else None
        kb = b.kind(nb) if nb is not MISSING else None
        if ka is not None and kb is not None:
            yield from table_records(a, b, path, na, nb)
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
    va = a.fetch(path, na)
    vb = b.fetch(path, nb)
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


__all__ = ["Side", "TableRecord", "TensorRecord", "ValueRecord", "walk"]
