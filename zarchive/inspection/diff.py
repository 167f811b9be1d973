"""What changed between two archives or checkpoints: `diff_archives(a, b)`.

A and B are anything `zarchive.open` opens (.zarc, .pt/.pth, .safetensors, .npz, .zanj, Hugging Face
folders, DCP directories, a model store's version files), or archives already opened. Their object
trees are walked side by side by object path:

- every tensor or array path gives a `TensorChange`: "added", "removed", "reshaped" (shapes differ;
  values not compared), "dtype" (dtypes differ; values compared where shapes agree), "changed" or
  "same" (every element equal, NaN equal to NaN), with ||a-b|| / ||a||, the largest |a-b| and the
  number of elements that differ (zarchive.inspection.tensor_compare says how NaNs and infinities
  count);
- every other value (configs, hyperparameters, scalars, strings, lists of plain values, tables'
  non-numeric columns) gives a `ValueChange` (path, status, a, b), compared by its manifest node:
  nothing is constructed, so no class the files name is imported or built;
- every table on both sides (a pandas DataFrame or Series, a polars DataFrame) gives `TableChange`s
  for its row index (labels compared exactly, in order, in pieces; see diff_tables), its column
  labels (names and order) and its columns' dtypes: a frame whose index moved is a change even
  where every column's values are equal;
- the metadata (format and its version, library, environment, compression) side by side.

Reads are lazy and bounded: tensors are fetched one pair at a time (mapped from the files where the
stored form allows, so a 10 GB checkpoint is not copied into memory), compared in pieces, and the
values compared are charged against each file's read budget (max_read_bytes); a tensor whose stored
bytes have equal size and CRC-32 in both files (two .zarc files) is reported "same" without reading
it (`compared == "checksum"`; pass checksums=False to compare every value). Bad input raises a
ZArchiveError, as every other reader does.

`to_json()` keys are stable (documented on ArchiveDiff.to_json); new keys may be added, never renamed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from ..engine.browse import OpenedArchive
from .diff_records import TENSOR_STATUSES, MetaEntry, TableChange, TensorChange, ValueChange
from .diff_text import render as render_text
from .diff_walk import Side, TableRecord, TensorRecord, ValueRecord, walk

JSON_VERSION = 1


@dataclass(frozen=True)
class ArchiveDiff:
    """What changed from A to B (see the module docstring). `changed()` says whether anything changed
    beyond a tolerance (metadata never counts: creation times always differ)."""

    a: str  # the inputs as given (a path), or the opened archives' formats
    b: str
    tensors: tuple[TensorChange, ...]
    values: tuple[ValueChange, ...]
    metadata: tuple[MetaEntry, ...]
    rtol: float = 0.0
    atol: float = 0.0
    tables: tuple[TableChange, ...] = ()  # each table's row index, column labels and dtypes

    def changed(self, rtol: float | None = None, atol: float | None = None) -> bool:
        """True when any tensor changed beyond the tolerance (default: the diff's own rtol/atol; see
        TensorChange.changed), any value differs, or any table's index, column labels or dtypes do."""
        rtol = self.rtol if rtol is None else rtol
        atol = self.atol if atol is None else atol
        return (
            any(t.changed(rtol, atol) for t in self.tensors)
            or any(v.changed() for v in self.values)
            or any(t.changed() for t in self.tables)
        )

    def changed_tensors(self, rtol: float | None = None, atol: float | None = None) -> tuple[TensorChange, ...]:
        rtol = self.rtol if rtol is None else rtol
        atol = self.atol if atol is None else atol
        return tuple(t for t in self.tensors if t.changed(rtol, atol))

    def counts(self) -> dict[str, int]:
        """Tensors by status (every status present, 0 where none)."""
        out = dict.fromkeys(TENSOR_STATUSES, 0)
        for t in self.tensors:
            out[t.status] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with these keys (stable; keys may be added, never renamed):
        "version" (1), "a", "b" (inputs), "rtol", "atol", "changed" (bool, at rtol/atol),
        "counts" ({status: tensors}), "tensors" (a list of TensorChange.to_json(): path, status,
        shape_a, shape_b, dtype_a, dtype_b, relative_change, max_abs_diff, differing,
        nonfinite_mismatch, norm_a, norm_b, nan_a, nan_b, compared, and "changed": whether it counts
        as changed at rtol/atol; a number that is infinite is null), "values" (path, status, a, b), "metadata" (key, a, b, same) and "tables" (a list of
        TableChange.to_json(): path, part ("index", "columns", "dtypes"), status ("changed", "same"),
        a, b, detail)."""
        return {
            "version": JSON_VERSION,
            "a": self.a,
            "b": self.b,
            "rtol": self.rtol,
            "atol": self.atol,
            "changed": self.changed(),
            "counts": self.counts(),
            "tensors": [{**t.to_json(), "changed": t.changed(self.rtol, self.atol)} for t in self.tensors],
            "values": [v.to_json() for v in self.values],
            "metadata": [m.to_json() for m in self.metadata],
            "tables": [t.to_json() for t in self.tables],
        }

    def render(self, *, only_changed: bool = False) -> str:
        """The diff as text for a terminal (zarchive diff): tensors, values, tables, then metadata."""
        return render_text(self, only_changed=only_changed)

    def __str__(self) -> str:
        return self.render()


def diff_archives(
    a: str | os.PathLike[str] | OpenedArchive,
    b: str | os.PathLike[str] | OpenedArchive,
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
    checksums: bool = True,
    mmap: bool = True,
    max_read_bytes: int | None = None,
    labels: tuple[str, str] | None = None,
) -> ArchiveDiff:
    """Compare two archives (paths, or archives opened with zarchive.open, left open); see the module
    docstring. rtol, atol: the tolerance `changed()` applies by default. checksums: report tensors
    whose stored bytes have equal size and CRC-32 "same" without reading them. mmap: map local files
    (ZArchive(mmap=True)): uncompressed tensors are compared from the page cache, not copied.
    max_read_bytes: each file's read budget (default: 1 GiB + 64 x its size). labels: the names
    ArchiveDiff.a and .b give the inputs (default: the paths as given)."""
    for name, tol in (("rtol", rtol), ("atol", atol)):
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol < 0:
            raise ValueError(f"{name} must be a finite number >= 0, not {tol!r}")
    with ExitStack() as stack:
        arcs = [_opened(x, stack, mmap=mmap, max_read_bytes=max_read_bytes) for x in (a, b)]
        sa, sb = Side(arcs[0]), Side(arcs[1])
        tensors: list[TensorChange] = []
        values: list[ValueChange] = []
        tables: list[TableChange] = []
        for record in walk(sa, sb, checksums=checksums):
            if isinstance(record, TensorRecord):
                tensors.append(_tensor_change(record))
            elif isinstance(record, ValueRecord):
                values.append(ValueChange(record.path, record.status, record.a, record.b))
            elif isinstance(record, TableRecord):
                tables.append(TableChange(record.path, record.part, record.status, record.a, record.b, record.detail))
        metadata = tuple(_metadata(arcs[0], arcs[1]))
    la, lb = labels if labels is not None else (_label(a), _label(b))
    return ArchiveDiff(la, lb, tuple(tensors), tuple(values), metadata, float(rtol), float(atol), tuple(tables))


def _opened(x: Any, stack: ExitStack, *, mmap: bool, max_read_bytes: int | None) -> OpenedArchive:
    if isinstance(x, (str, os.PathLike)):
        from ..shortcuts import open as open_any

        opened: OpenedArchive = stack.enter_context(open_any(x, mmap=mmap, max_read_bytes=max_read_bytes))
        return opened
    if hasattr(x, "node") and hasattr(x, "children") and hasattr(x, "get"):
        return x  # type: ignore[no-any-return]
    raise TypeError(f"diff_archives compares paths or opened archives, not {type(x).__name__}")


def _label(x: Any) -> str:
    return os.fspath(x) if isinstance(x, (str, os.PathLike)) else f"<{getattr(x, 'format', 'archive')} archive>"


def _tensor_change(r: TensorRecord) -> TensorChange:
    s = r.stats
    if s is None:
        return TensorChange(r.path, r.status, r.shape_a, r.shape_b, r.dtype_a, r.dtype_b, compared=r.compared)
    return TensorChange(
        r.path, r.status, r.shape_a, r.shape_b, r.dtype_a, r.dtype_b,
        relative_change=s.relative_change, max_abs_diff=s.max_abs_diff, differing=s.differing,
        nonfinite_mismatch=s.nonfinite_mismatch, norm_a=s.norm_a, norm_b=s.norm_b, nan_a=s.nan_a,
        nan_b=s.nan_b, compared=r.compared,
    )  # fmt: skip


# --- metadata ---
_META_KEYS = ("format_version", "library_version", "created_utc")


def _metadata(a: OpenedArchive, b: OpenedArchive) -> Iterator[MetaEntry]:
    ma, mb = _meta_fields(a), _meta_fields(b)
    for key in [*ma, *(k for k in mb if k not in ma)]:
        yield MetaEntry(key, ma.get(key), mb.get(key))


def _meta_fields(arc: OpenedArchive) -> dict[str, Any]:
    """The metadata a diff shows: format, version, library, creation time, compression, and the
    environment flattened ("environment.python", "environment.packages.torch")."""
    meta = arc.meta if isinstance(arc.meta, dict) else {}
    out: dict[str, Any] = {"format": meta.get("format", getattr(arc, "format", None))}
    for key in _META_KEYS:
        if _scalar(meta.get(key)):
            out[key] = meta[key]
    compression = meta.get("compression")
    if isinstance(compression, dict):
        for key in ("codec", "level"):
            if _scalar(compression.get(key)):
                out[f"compression.{key}"] = compression[key]
    settings = meta.get("settings")
    if isinstance(settings, dict) and _scalar(settings.get("compress_weights")):
        out["compression.weights"] = settings["compress_weights"]
    env = meta.get("environment")
    if isinstance(env, dict):
        for key, value in env.items():
            if _scalar(value):
                out[f"environment.{key}"] = value
            elif key == "packages" and isinstance(value, dict):
                for name, version in value.items():
                    if _scalar(version):
                        out[f"environment.packages.{name}"] = version
    return out


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool)) and not (isinstance(value, float) and not math.isfinite(value))


__all__ = ["ArchiveDiff", "MetaEntry", "TableChange", "TensorChange", "ValueChange", "diff_archives"]
