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
from .diff_walk import Side, TensorRecord, ValueRecord, walk

TENSOR_STATUSES = ("added", "removed", "reshaped", "dtype", "changed", "same")
VALUE_STATUSES = ("added", "removed", "changed", "same")
JSON_VERSION = 1


@dataclass(frozen=True)
class TensorChange:
    """One tensor (or numpy array) path. shape/dtype of a side are None where it lacks the tensor.
    The numbers are None where values were not compared (added, removed, reshaped, equal stored
    bytes, or values compared by equality only: strings, datetimes)."""

    path: str
    status: str  # one of TENSOR_STATUSES
    shape_a: tuple[int, ...] | None
    shape_b: tuple[int, ...] | None
    dtype_a: str | None
    dtype_b: str | None
    relative_change: float | None = None  # ||a-b|| / ||a|| (||a|| == 0: 0.0 if ||b|| == 0 else 1.0)
    max_abs_diff: float | None = None  # max |a-b| over positions finite on both sides
    differing: int | None = None  # elements not equal (NaN == NaN)
    nonfinite_mismatch: int | None = None  # of those, where a side is NaN or infinite: always a change
    norm_a: float | None = None
    norm_b: float | None = None
    nan_a: int | None = None
    nan_b: int | None = None
    compared: str = "values"  # "values" (read and compared), "checksum" (equal stored bytes), "none"

    def changed(self, rtol: float = 0.0, atol: float = 0.0) -> bool:
        """Whether this tensor changed beyond the tolerance. Added, removed, reshaped and dtype
        changes always count, as do NaN/infinity mismatches; otherwise values count as changed when
        max |a-b| > atol and ||a-b||/||a|| > rtol (within either tolerance is unchanged; both 0:
        any differing element counts)."""
        if self.status in ("added", "removed", "reshaped", "dtype"):
            return True
        if self.status == "same":
            return False
        if self.nonfinite_mismatch or self.max_abs_diff is None or self.relative_change is None:
            return True
        return self.max_abs_diff > atol and self.relative_change > rtol

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "status": self.status,
            "shape_a": list(self.shape_a) if self.shape_a is not None else None,
            "shape_b": list(self.shape_b) if self.shape_b is not None else None,
            "dtype_a": self.dtype_a,
            "dtype_b": self.dtype_b,
            "relative_change": _finite(self.relative_change),
            "max_abs_diff": _finite(self.max_abs_diff),
            "differing": self.differing,
            "nonfinite_mismatch": self.nonfinite_mismatch,
            "norm_a": _finite(self.norm_a),
            "norm_b": _finite(self.norm_b),
            "nan_a": self.nan_a,
            "nan_b": self.nan_b,
            "compared": self.compared,
        }


@dataclass(frozen=True)
class ValueChange:
    """A value that is not a tensor. a, b: plain JSON values as they are, a list of plain values as
    a list, any other value as its one-line description (e.g. "DataFrame 2 rows x 2 columns ...");
    None on the side that lacks it."""

    path: str
    status: str  # one of VALUE_STATUSES
    a: Any
    b: Any

    def changed(self) -> bool:
        return self.status != "same"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "status": self.status, "a": _json_safe(self.a), "b": _json_safe(self.b)}


@dataclass(frozen=True)
class MetaEntry:
    """One metadata field side by side ("format", "format_version", "environment.python", ...)."""

    key: str
    a: Any
    b: Any

    @property
    def same(self) -> bool:
        return self.a == self.b

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "a": _json_safe(self.a), "b": _json_safe(self.b), "same": self.same}


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

    def changed(self, rtol: float | None = None, atol: float | None = None) -> bool:
        """True when any tensor changed beyond the tolerance (default: the diff's own rtol/atol; see
        TensorChange.changed) or any value differs."""
        rtol = self.rtol if rtol is None else rtol
        atol = self.atol if atol is None else atol
        return any(t.changed(rtol, atol) for t in self.tensors) or any(v.changed() for v in self.values)

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
        nonfinite_mismatch, norm_a, norm_b, nan_a, nan_b, compared; a number that is infinite is
        null), "values" (path, status, a, b) and "metadata" (key, a, b, same)."""
        return {
            "version": JSON_VERSION,
            "a": self.a,
            "b": self.b,
            "rtol": self.rtol,
            "atol": self.atol,
            "changed": self.changed(),
            "counts": self.counts(),
            "tensors": [t.to_json() for t in self.tensors],
            "values": [v.to_json() for v in self.values],
            "metadata": [m.to_json() for m in self.metadata],
        }

    def render(self, *, only_changed: bool = False) -> str:
        """The diff as text for a terminal (zarchive diff): tensors, then values, then metadata."""
        from .diff_text import render

        return render(self, only_changed=only_changed)

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
        for record in walk(sa, sb, checksums=checksums):
            if isinstance(record, TensorRecord):
                tensors.append(_tensor_change(record))
            elif isinstance(record, ValueRecord):
                values.append(ValueChange(record.path, record.status, record.a, record.b))
        metadata = tuple(_metadata(arcs[0], arcs[1]))
    la, lb = labels if labels is not None else (_label(a), _label(b))
    return ArchiveDiff(la, lb, tuple(tensors), tuple(values), metadata, float(rtol), float(atol))


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


def _finite(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


def _json_safe(x: Any) -> Any:
    """Plain JSON values as they are (a non-finite float as its text: JSON has none)."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    return x


__all__ = ["ArchiveDiff", "MetaEntry", "TensorChange", "ValueChange", "diff_archives"]
