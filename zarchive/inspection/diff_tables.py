"""Comparing the parts of two tables that are not their columns' values: a pandas DataFrame's or
Series' row index, a table's column labels (names and order), its columns' dtypes.

The columns' values are compared elsewhere (as tensors, or as values by their manifest nodes); here:

- "index": the row labels, exactly (every label, in order; NaN equals NaN), with the index's class
  (a RangeIndex counts as the Index of int64 it equals), dtype and names. Equal manifest nodes (the
  members they name compared by size and CRC-32) are the same without reading anything; a RangeIndex
  is never materialised; any other index is loaded once per side through the archive's lazy read
  (its plan, policy and read budget) and compared INDEX_PIECE labels at a time, so the comparison
  itself adds a few pieces beside the two indexes, never a copy of either;
- "columns": the column labels in order (pandas: the columns' Index, compared as the row index is;
  polars: the column names);
- "dtypes": each column's dtype, as the manifest records it.

An index whose table names a class (its audit is not empty: an object column of dataclasses, a label
of a custom type) is compared by its manifest node only: the diff builds no class a file names.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import FormatError
from .diff_side import Side

TABLE_TYPES = ("pandas.DataFrame", "pandas.Series", "polars.DataFrame")
INDEX_TYPE = "pandas.Index"
INDEX_PIECE = 1 << 16  # labels of each side compared at a time
MAX_LISTED = 50  # column names (or dtypes) a record lists per side (names: then "... (+N more)")
MAX_LABEL_TEXT = 60  # characters of a label shown in a detail


@dataclass(frozen=True)
class TableRecord:
    """One part of a table as the walk found it (the public TableChange is built from it)."""

    path: str
    part: str  # "index", "columns", "dtypes"
    status: str  # "changed", "same"
    a: Any
    b: Any
    detail: str = ""


def table_records(a: Side, b: Side, path: str, na: Any, nb: Any) -> Iterator[TableRecord]:
    """The index, columns and dtypes records of two tables at `path` (nothing where either side is
    not a table, or is a frame's column: its index and label are the frame's, reported once there)."""
    if not (isinstance(na, dict) and isinstance(nb, dict)):
        return
    ta, tb = na.get("$type"), nb.get("$type")
    if ta not in TABLE_TYPES or tb not in TABLE_TYPES or "name_at" in na or "name_at" in nb:
        return
    ia, ib = na.get("index"), nb.get("index")
    if _is_index(ia) and _is_index(ib):
        yield _compare_index(a, b, path, "index", ia, ib, unit="row")
    if ta == tb == "pandas.DataFrame" and _is_index(na.get("columns")) and _is_index(nb.get("columns")):
        record = _compare_index(a, b, path, "columns", na["columns"], nb["columns"], unit="column")
        ka, kb = _names(na.get("column_keys")), _names(nb.get("column_keys"))
        order = _order_note(ka, kb)
        detail = f"{order}; {record.detail}" if record.status == "changed" and order else record.detail
        shown_a, shown_b = (_listed(ka), _listed(kb)) if ka is not None and kb is not None else (record.a, record.b)
        yield TableRecord(path, "columns", record.status, shown_a, shown_b, detail)
    elif _names(na.get("column_keys")) is not None and _names(nb.get("column_keys")) is not None:
        yield _compare_lists(path, "columns", na["column_keys"], nb["column_keys"], unit="column")
    if ta == tb and ta != "pandas.Series":
        yield _compare_dtypes(path, na, nb)


def _is_index(node: Any) -> bool:
    return isinstance(node, dict) and node.get("$type") == INDEX_TYPE


def _names(items: Any) -> list[str] | None:
    return items if isinstance(items, list) and all(isinstance(x, str) for x in items) else None


def _compare_index(a: Side, b: Side, path: str, part: str, ia: Any, ib: Any, *, unit: str) -> TableRecord:
    desc_a, desc_b = a.arc.describe(ia), b.arc.describe(ib)
    if a.identity(ia) == b.identity(ib):
        return TableRecord(path, part, "same", desc_a, desc_b)
    va, vb = _load_index(a, path, ia), _load_index(b, path, ib)
    if va is None or vb is None:  # a class would be built: the nodes differ, the labels are not compared
        detail = "the index differs (its labels not compared: the table names classes, see zarchive audit)"
        return TableRecord(path, part, "changed", desc_a, desc_b, detail)
    detail = index_difference(va, vb, unit=unit)
    return TableRecord(path, part, "changed" if detail else "same", desc_a, desc_b, detail)


def _load_index(side: Side, path: str, node: dict[str, Any]) -> Any:
    """The pandas Index a node describes, read through the archive's lazy read and charged against
    its budget; None where reading the table would build a class."""
    if side.arc.audit(path):
        return None
    index = side.arc.load_node(node, path)
    try:
        len(index)  # a RangeIndex of more labels than an index can hold is read lazily, never sized
    except (OverflowError, TypeError) as e:
        raise FormatError(f"malformed index of a table: {type(e).__name__}: {e}", path=path) from None
    side.charge(int(index.memory_usage(deep=False)), "comparing the tables' indexes", path)
    return index


def index_difference(ia: Any, ib: Any, *, unit: str = "row", piece: int = INDEX_PIECE) -> str:
    """ "" where two pandas Indexes hold the same labels in the same order, with the same class (a
    RangeIndex counts as the Index of int64 it equals), dtype and names; else what differs, in words:
    "Index -> DatetimeIndex", "dtype int64 -> float64", "names ['k'] -> ['key']", "length 5 -> 6",
    "row 0: 0 -> 10" (the first label that differs)."""
    parts = []
    ca, cb = _index_class(ia), _index_class(ib)
    if ca != cb:
        parts.append(f"{ca} -> {cb}")
    elif str(ia.dtype) != str(ib.dtype):
        parts.append(f"dtype {ia.dtype} -> {ib.dtype}")
    if list(ia.names) != list(ib.names):
        parts.append(f"names {_label_list(ia.names)} -> {_label_list(ib.names)}")
    if len(ia) != len(ib):
        parts.append(f"length {len(ia):,} -> {len(ib):,}")
    first = first_difference(ia, ib, piece=piece)
    if first is not None:
        parts.append(f"{unit} {first:,}: {_label(ia[first])} -> {_label(ib[first])}")
    return "; ".join(parts)


def first_difference(ia: Any, ib: Any, *, piece: int = INDEX_PIECE) -> int | None:
    """The first position, within the shorter one's length, where two indexes' labels differ (None
    where none does): pieces of `piece` labels compared with Index.equals, then the piece that
    differs halved until one label is left. Two RangeIndexes by arithmetic (a range of 10**18 labels
    is 60 bytes in a file: never walked)."""
    n = min(len(ia), len(ib))
    ra, rb = _as_range(ia), _as_range(ib)
    if ra is not None and rb is not None:
        if n == 0 or ra.start == rb.start and (ra.step == rb.step or n == 1):
            return None
        return 0 if ra.start != rb.start else 1
    for start in range(0, n, piece):
        lo, hi = start, min(n, start + piece)
        if ia[lo:hi].equals(ib[lo:hi]):
            continue
        while hi - lo > 1:  # the first difference is in [lo, hi)
            mid = (lo + hi) // 2
            if ia[lo:mid].equals(ib[lo:mid]):
                lo = mid
            else:
                hi = mid
        return lo
    return None


def _as_range(index: Any) -> range | None:
    import pandas as pd

    return range(index.start, index.stop, index.step) if isinstance(index, pd.RangeIndex) else None


def _index_class(index: Any) -> str:
    name = type(index).__name__
    return "Index" if name == "RangeIndex" else name


def _compare_lists(path: str, part: str, ka: list[Any], kb: list[Any], *, unit: str) -> TableRecord:
    shown_a, shown_b = _listed(ka), _listed(kb)
    if ka == kb:
        return TableRecord(path, part, "same", shown_a, shown_b)
    notes = [_order_note(ka, kb)]
    if len(ka) != len(kb):
        notes.append(f"length {len(ka):,} -> {len(kb):,}")
    first = next((i for i, (x, y) in enumerate(zip(ka, kb)) if x != y), None)
    if first is not None:
        notes.append(f"{unit} {first:,}: {_label(ka[first])} -> {_label(kb[first])}")
    return TableRecord(path, part, "changed", shown_a, shown_b, "; ".join(n for n in notes if n))


def _compare_dtypes(path: str, na: dict[str, Any], nb: dict[str, Any]) -> TableRecord:
    da, db = _dtypes(na), _dtypes(nb)
    shown_a, shown_b = dict(list(da.items())[:MAX_LISTED]), dict(list(db.items())[:MAX_LISTED])
    differ = [f"{_label(k)}: {da[k]} -> {db[k]}" for k in da if k in db and da[k] != db[k]]
    detail = "; ".join(differ[:MAX_LISTED]) + (
        f"; ... (+{len(differ) - MAX_LISTED} more)" if len(differ) > MAX_LISTED else ""
    )
    return TableRecord(path, "dtypes", "changed" if differ else "same", shown_a, shown_b, detail)


def _dtypes(node: dict[str, Any]) -> dict[str, str]:
    keys, dtypes = node.get("column_keys"), node.get("dtypes")
    if not (isinstance(keys, list) and isinstance(dtypes, list)):
        return {}
    return {k: t for k, t in zip(keys, dtypes) if isinstance(k, str) and isinstance(t, str)}


def _order_note(ka: Any, kb: Any) -> str:
    """'same columns, another order' where two lists of names hold the same names in another order."""
    la, lb = _names(ka), _names(kb)
    if la is None or lb is None or la == lb or sorted(la) != sorted(lb):
        return ""
    return "same columns, another order"


def _listed(items: list[Any]) -> list[Any]:
    if len(items) <= MAX_LISTED:
        return list(items)
    return [*items[:MAX_LISTED], f"... (+{len(items) - MAX_LISTED:,} more)"]


def _label_list(names: Any) -> str:
    return "[" + ", ".join(_label(n) for n in names) + "]"


def _label(x: Any) -> str:
    """A label as a detail shows it: text quoted, a tuple (a MultiIndex's label) in parentheses, a
    timestamp or number as it prints; at most MAX_LABEL_TEXT characters."""
    if isinstance(x, tuple):
        text = "(" + ", ".join(_label(v) for v in x) + ")"
    elif isinstance(x, str):
        text = json.dumps(x, ensure_ascii=False)
    else:
        item = getattr(x, "item", None)  # a numpy scalar as the Python value it holds
        text = str(item() if callable(item) and getattr(x, "shape", None) == () else x)
    text = text.replace("\n", "\\n")
    return text if len(text) <= MAX_LABEL_TEXT else text[: MAX_LABEL_TEXT - 3] + "..."


__all__ = ["INDEX_PIECE", "TableRecord", "first_difference", "index_difference", "table_records"]
